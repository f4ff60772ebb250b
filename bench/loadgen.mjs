// Load driver. Runs as its own process (run.mjs pins it to CPU 0) and takes commands over the
// Node IPC channel: {id, cmd: 'saturate' | 'paced' | 'exit', spec}. Replies {id, result} or {id, error}.
//
// saturate: closed loop, autocannon with N connections for a fixed time, after a warm-up run.
//   Reads utime+stime of the server (and the mock) from /proc/<pid>/stat around the measured run:
//   server CPU µs per request = CPU time / completed requests.
// paced: open loop at a fixed rate (default 1,000 RPS). Request i is due at t0 + i/rate; a ticker
//   thread wakes the main loop on schedule with sub-millisecond precision, every due request is sent
//   whether or not earlier ones have answered, and latency is taken from the *scheduled* time to the
//   end of the response body (no coordinated omission). Percentiles come from a sorted array of all
//   samples in the measured window (bounded by rate × duration).
import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import autocannon from 'autocannon';
import { Pool } from 'undici';

const CLK_TCK = 100; // Linux USER_HZ; run.mjs checks `getconf CLK_TCK` and passes it when different.
let clkTck = CLK_TCK;

function procCpuUs(pid) {
  if (!pid) return null;
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // After "pid (comm) ": f[0] = state (field 3), utime = field 14, stime = field 15.
    return ((Number(f[11]) + Number(f[12])) * 1e6) / clkTck;
  } catch {
    return null;
  }
}

// Busy and total jiffies per CPU from /proc/stat (busy = total - idle - iowait).
function cpuTimes() {
  const out = {};
  for (const line of readFileSync('/proc/stat', 'utf8').split('\n')) {
    const m = /^cpu(\d+) (.*)$/.exec(line);
    if (!m) continue;
    const v = m[2].trim().split(/\s+/).map(Number);
    const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
    out[m[1]] = { busy: total - v[3] - v[4], total };
  }
  return out;
}

function cpuBusyShare(before, after) {
  const out = {};
  for (const k of Object.keys(after)) {
    const b = before[k];
    const a = after[k];
    if (!b || a.total === b.total) continue;
    out[`cpu${k}`] = round((a.busy - b.busy) / (a.total - b.total), 3);
  }
  return out;
}

function round(x, digits = 2) {
  if (x === null || !Number.isFinite(x)) return null;
  const p = 10 ** digits;
  return Math.round(x * p) / p;
}

function autocannonRun(opts) {
  return new Promise((resolve, reject) => {
    autocannon(opts, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

async function saturate(spec) {
  const base = {
    url: spec.url,
    method: 'POST',
    headers: spec.headers,
    body: spec.body,
    connections: spec.connections,
    pipelining: 1,
    timeout: 10,
  };
  if (spec.warmupS > 0) await autocannonRun({ ...base, duration: spec.warmupS });
  const cpu0 = cpuTimes();
  const server0 = procCpuUs(spec.pid);
  const mock0 = procCpuUs(spec.mockPid);
  const self0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const res = await autocannonRun({ ...base, duration: spec.durationS });
  const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
  const server1 = procCpuUs(spec.pid);
  const mock1 = procCpuUs(spec.mockPid);
  const self = process.cpuUsage(self0);
  const cpu1 = cpuTimes();
  const completed = res.requests.total;
  const serverCpuUs = server0 === null || server1 === null ? null : server1 - server0;
  const mockCpuUs = mock0 === null || mock1 === null ? null : mock1 - mock0;
  return {
    wallS: round(wallS, 3),
    completed,
    ok: res['2xx'],
    non2xx: res.non2xx,
    errors: res.errors,
    timeouts: res.timeouts,
    rps: round(completed / wallS, 1),
    serverCpuUsPerReq: serverCpuUs === null || completed === 0 ? null : round(serverCpuUs / completed, 2),
    serverCpuShare: serverCpuUs === null ? null : round(serverCpuUs / 1e6 / wallS, 3),
    mockCpuUsPerReq: mockCpuUs === null || completed === 0 ? null : round(mockCpuUs / completed, 2),
    loadgenCpuUsPerReq: completed === 0 ? null : round((self.user + self.system) / completed, 2),
    cpuBusy: cpuBusyShare(cpu0, cpu1),
    latencyMs: { p50: res.latency.p50, p99: res.latency.p99 },
  };
}

// Ticker thread: sleeps with Atomics.wait (futex, sub-ms) until each due time and posts the index
// of the latest due request. One message per slot; the main thread sends everything due up to it.
const TICKER = `
const { parentPort, workerData } = require('node:worker_threads');
const cell = new Int32Array(new SharedArrayBuffer(4));
const start = BigInt(workerData.startNs);
const interval = BigInt(workerData.intervalNs);
for (let i = 0; i < workerData.count; i++) {
  const due = start + BigInt(i) * interval;
  for (;;) {
    const left = Number(due - process.hrtime.bigint());
    if (left <= 0) break;
    Atomics.wait(cell, 0, 0, left / 1e6);
  }
  parentPort.postMessage(i);
}
parentPort.postMessage(-1);
`;

function percentile(sorted, n, q) {
  if (n === 0) return null;
  const idx = Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1));
  return sorted[idx];
}

function summarize(arr, n) {
  const s = arr.subarray(0, n).sort();
  return {
    p50: round(percentile(s, n, 0.5) / 1000, 3),
    p90: round(percentile(s, n, 0.9) / 1000, 3),
    p99: round(percentile(s, n, 0.99) / 1000, 3),
    max: round(n ? s[n - 1] / 1000 : null, 3),
  };
}

async function paced(spec) {
  const rate = spec.rate;
  const intervalNs = Math.round(1e9 / rate);
  const warmCount = Math.round(spec.warmupS * rate);
  const measCount = Math.round(spec.durationS * rate);
  const count = warmCount + measCount;
  const url = new URL(spec.url);
  const pool = new Pool(url.origin, {
    connections: spec.connections,
    pipelining: 1,
    headersTimeout: 10_000,
    bodyTimeout: 10_000,
  });
  const path = url.pathname + url.search;
  const body = Buffer.from(spec.body);
  const headers = spec.headers;
  // Latency samples in µs from the scheduled time, and from the actual send, for measured requests.
  const fromSched = new Float64Array(measCount);
  const fromSend = new Float64Array(measCount);
  const sendLag = new Float64Array(measCount);
  let nLat = 0;
  let errors = 0;
  let non2xx = 0;
  let outstanding = 0;
  let maxOutstanding = 0;
  let next = 0;
  let tickerDone = false;
  const startNs = process.hrtime.bigint() + 50_000_000n;
  const startN = Number(startNs);

  let finish;
  const finished = new Promise((resolve) => {
    finish = resolve;
  });
  const maybeFinish = () => {
    if (tickerDone && outstanding === 0) finish();
  };

  class Probe {
    constructor(i, sentNs) {
      this.i = i;
      this.sentNs = sentNs;
      this.status = 0;
    }
    onRequestStart() {}
    onResponseStart(_c, status) {
      this.status = status;
    }
    onResponseData() {}
    onResponseEnd() {
      const end = Number(process.hrtime.bigint());
      outstanding--;
      if (this.i >= warmCount) {
        if (this.status < 200 || this.status > 299) non2xx++;
        else {
          const sched = startN + this.i * intervalNs;
          fromSched[nLat] = (end - sched) / 1000;
          fromSend[nLat] = (end - this.sentNs) / 1000;
          sendLag[nLat] = (this.sentNs - sched) / 1000;
          nLat++;
        }
      }
      maybeFinish();
    }
    onResponseError() {
      outstanding--;
      if (this.i >= warmCount) errors++;
      maybeFinish();
    }
  }

  const sendUpTo = (last) => {
    while (next <= last) {
      const i = next++;
      outstanding++;
      if (outstanding > maxOutstanding) maxOutstanding = outstanding;
      pool.dispatch({ path, method: 'POST', headers, body }, new Probe(i, Number(process.hrtime.bigint())));
    }
  };

  const cpu0 = cpuTimes();
  const server0 = procCpuUs(spec.pid);
  const wall0 = process.hrtime.bigint();
  const worker = new Worker(TICKER, {
    eval: true,
    workerData: { startNs: String(startNs), intervalNs, count },
  });
  worker.on('message', (i) => {
    if (i < 0) {
      tickerDone = true;
      maybeFinish();
      return;
    }
    sendUpTo(i);
  });
  worker.on('error', (err) => {
    tickerDone = true;
    errors++;
    console.error('loadgen ticker error', err);
    maybeFinish();
  });
  // Bounded: give stragglers at most 10 s after the schedule ends.
  const hardStop = setTimeout(
    () => {
      errors += outstanding;
      outstanding = 0;
      tickerDone = true;
      finish();
    },
    (spec.warmupS + spec.durationS) * 1000 + 10_000,
  );
  await finished;
  clearTimeout(hardStop);
  const server1 = procCpuUs(spec.pid);
  const wallS = Number(process.hrtime.bigint() - wall0) / 1e9;
  const cpu1 = cpuTimes();
  await worker.terminate();
  await pool.destroy();
  const serverCpuUs = server0 === null || server1 === null ? null : server1 - server0;
  return {
    rate,
    scheduled: measCount,
    ok: nLat,
    non2xx,
    errors,
    maxOutstanding,
    latencyMs: summarize(fromSched, nLat),
    serviceMs: summarize(fromSend, nLat),
    sendLagMs: summarize(sendLag, nLat),
    serverCpuUsPerReq: serverCpuUs === null ? null : round(serverCpuUs / count, 2),
    serverCpuShare: serverCpuUs === null ? null : round(serverCpuUs / 1e6 / wallS, 3),
    cpuBusy: cpuBusyShare(cpu0, cpu1),
  };
}

const handlers = { saturate, paced };

if (!process.send) {
  console.error('loadgen.mjs is driven by run.mjs over IPC');
  process.exit(2);
}
process.on('message', async (msg) => {
  if (msg?.cmd === 'exit') {
    process.exit(0);
  }
  if (msg?.cmd === 'config') {
    if (Number.isInteger(msg.spec?.clkTck) && msg.spec.clkTck > 0) clkTck = msg.spec.clkTck;
    process.send({ id: msg.id, result: { clkTck } });
    return;
  }
  const fn = handlers[msg?.cmd];
  if (!fn) {
    process.send({ id: msg?.id, error: `unknown command ${msg?.cmd}` });
    return;
  }
  try {
    process.send({ id: msg.id, result: await fn(msg.spec) });
  } catch (err) {
    process.send({ id: msg.id, error: String(err?.stack ?? err) });
  }
});
process.on('disconnect', () => process.exit(0));
