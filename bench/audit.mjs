// Audit log benchmark (issue "audit trail", item 10). In-process, against the transparency-log
// store (dist/src/audit/chain-log.js: ChainLog on LMDB, with seals signed by WorkerSealSigner),
// pinned to one CPU with taskset (every thread: the LMDB fsync thread and the ML-DSA worker too).
//   1. Sustained append: events of a realistic shape appended in batches per event-loop turn,
//      with the commits (one LMDB transaction per turn), the JSONL mirror and the seals (every
//      1,000 events or 250 ms per org, Ed25519 + ML-DSA-65), for one org and for ten orgs.
//   2. Per-append latency, open loop at a fixed rate: the synchronous append() call, and append()
//      to its promise resolving (the event committed).
//   3. The integrity scan (every hash, link, Merkle root and seal signature) over the one-org
//      chain (≥ 100,000 events): inline on the pinned core (ChainLog#integrity), and as the
//      endpoint runs it (ChainLog#integrityAsync: chunks checked on the integrity worker threads,
//      applied in order on the main thread) with the process allowed every CPU of the machine.
//   4. Receipts: ChainLog#receipt (inclusion proof + seal note) and verifyReceipt (both seal
//      signatures, the inclusion proof, and the event's hash recomputed) for random events.
// When chain-log.js is not built yet, polls for it (every 3 minutes, up to --wait-min minutes).
// Writes results/NAME.json and .md (default NAME: audit) and prints the Markdown table.
//
// Usage: node audit.mjs [--quick] [--duration=S] [--batch=N] [--rates=EPS,EPS] [--cpu=1] [--nice=N]
//                       [--wait-min=40] [--out=NAME]

import { spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { makeInputs } from './audit-events.mjs';
import {
  BENCH_DIR,
  hasTaskset,
  log,
  median,
  parseFlags,
  percentile,
  ROOT_DIR,
  runBench,
  sleep,
} from './targets.mjs';

const DIST = join(ROOT_DIR, 'dist', 'src');
const CHAIN_LOG_JS = join(DIST, 'audit', 'chain-log.js');

function parseArgs(argv) {
  const { flags, quick, num, outName } = parseFlags(argv);
  const out = outName('audit');
  return {
    quick,
    out,
    durationS: num('duration', quick ? 3 : 10),
    rounds: Math.max(1, Math.round(num('rounds', quick ? 1 : 3))),
    warmupS: quick ? 1 : 2,
    batch: Math.max(1, Math.round(num('batch', 100))),
    // Batch sizes of the supplementary one-org runs (shorter).
    extraBatches: quick ? [] : [1, 10, 1000],
    extraDurationS: quick ? 2 : 5,
    rates: (flags.get('rates') ?? '1000,5000')
      .split(',')
      .map(Number)
      .filter((x) => x > 0),
    latencyS: quick ? 2 : 5,
    minScanEvents: 100_000,
    receipts: quick ? 200 : 1000,
    cpu: Math.round(num('cpu', 1)),
    nice: flags.has('nice') ? Math.round(Number(flags.get('nice'))) : process.getuid?.() === 0 ? -20 : null,
    waitMin: num('wait-min', 40),
  };
}

const r = (x, d = 1) =>
  x === null || x === undefined || !Number.isFinite(x) ? null : Math.round(x * 10 ** d) / 10 ** d;
const nowNs = () => process.hrtime.bigint();
const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
const sysUs = () => process.cpuUsage().system;

// CPU µs of each thread of this process (utime+stime from /proc/self/task/*/stat), by thread name.
function threadCpu() {
  const out = new Map();
  try {
    for (const tid of readdirSync('/proc/self/task')) {
      try {
        const st = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
        const name = st.slice(st.indexOf('(') + 1, st.lastIndexOf(')'));
        const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
        out.set(`${tid}`, { name, us: ((Number(f[11]) + Number(f[12])) * 1e6) / 100 });
      } catch {}
    }
  } catch {}
  return out;
}

// CPU µs per event between two threadCpu() snapshots: the main thread and all the others
// (the ML-DSA signing worker, LMDB's and libuv's threads, V8's GC helpers).
function threadShares(before, after, events) {
  let main = 0;
  let other = 0;
  for (const [tid, a] of after) {
    const d = a.us - (before.get(tid)?.us ?? 0);
    if (tid === String(process.pid)) main += d;
    else other += d;
  }
  return { main: r(main / events, 1), otherThreads: r(other / events, 1) };
}

function latStats(us, n = us.length) {
  const s = us.subarray(0, n).sort();
  return {
    n,
    p50Us: r(percentile(s, 0.5, n), 1),
    p90Us: r(percentile(s, 0.9, n), 1),
    p99Us: r(percentile(s, 0.99, n), 1),
    maxUs: r(n ? s[n - 1] : null, 1),
  };
}

function dirBytes(dir) {
  let n = 0;
  for (const f of readdirSync(dir, { recursive: true })) {
    try {
      const st = statSync(join(dir, f));
      if (st.isFile()) n += st.size;
    } catch {}
  }
  return n;
}

// ---------------------------------------------------------------------------------------------

async function waitForChainLog(waitMin) {
  const deadline = Date.now() + waitMin * 60_000;
  while (!existsSync(CHAIN_LOG_JS)) {
    if (Date.now() >= deadline) throw new Error(`${CHAIN_LOG_JS} did not appear within ${waitMin} minutes`);
    log(`${CHAIN_LOG_JS} not built yet; checking again in 3 minutes`);
    await sleep(Math.min(180_000, Math.max(1000, deadline - Date.now())));
  }
  // A build may be writing the file right now: give it a moment to finish.
  await sleep(2000);
}

async function loadModules() {
  const imp = (p) => import(pathToFileURL(join(DIST, p)).href);
  const [chain, db, keys, signer, integrity, core, head] = await Promise.all([
    imp('audit/chain-log.js'),
    imp('store/db.js'),
    imp('crypto/audit-keys.js'),
    imp('crypto/seal-signer.js'),
    imp('audit/integrity.js').catch(() => imp('audit/index.js')),
    imp('core/chain/index.js'),
    imp('audit/org-head.js').catch(() => ({})),
  ]);
  return {
    ChainLog: chain.ChainLog,
    openStore: db.openStore,
    AuditKeys: keys.AuditKeys,
    WorkerSealSigner: signer.WorkerSealSigner,
    verifiersFor: integrity.verifiersFor,
    verifyReceipt: core.verifyReceipt,
    lastSeal: head.lastSeal,
  };
}

// A fresh store and ChainLog in a temp directory, sharing one signer.
function openLog(M, signer, root, name) {
  const dataDir = join(root, name);
  const store = M.openStore(dataDir);
  // Integrity workers for every CPU of the machine (the default counts the pinned one only).
  const integrityWorkers = Math.min(4, cpus().length);
  const chain = new M.ChainLog(store, signer, { dataDir, rotationMaxMb: 256, integrityWorkers });
  return { dataDir, store, log: chain };
}

async function closeLog(h) {
  await h.log.close();
  await h.store.close();
}

// Closed loop for `durationS` after `warmupS`: append `batch` events in one event-loop turn (orgs
// round-robin), wait until they are committed (one LMDB transaction), repeat. Counts committed
// events, process CPU (all threads) and the latency of each turn's first event (append to commit).
async function sustained(M, h, orgs, { batch, durationS, warmupS }) {
  const pools = orgs.map((o) => makeInputs(o, 4096));
  const ids = new Map(orgs.map((o) => [o, []]));
  const sealsOf = () =>
    M.lastSeal ? orgs.reduce((a, o) => a + (M.lastSeal(h.store, o)?.seq ?? 0), 0) : null;
  let appended = 0;
  const firstLat = [];
  let syncNs = 0n;
  let k = 0;
  const run = async (seconds, measure) => {
    const end = nowNs() + BigInt(Math.round(seconds * 1e9));
    let n = 0;
    while (nowNs() < end) {
      const t0 = nowNs();
      const org = orgs[k % orgs.length];
      let first;
      let last;
      for (let i = 0; i < batch; i++) {
        const o = k % orgs.length;
        last = h.log.append(pools[o][Math.floor(k / orgs.length) % 4096]);
        if (i === 0) first = last;
        k++;
      }
      const t1 = nowNs();
      if (measure) {
        syncNs += t1 - t0;
        first.then((ref) => {
          firstLat.push(Number(nowNs() - t0) / 1000);
          ids.get(org).push(ref.id);
        });
      }
      n += batch;
      await last;
    }
    return n;
  };
  await run(warmupS, false);
  const seals0 = sealsOf();
  const th0 = threadCpu();
  const c0 = cpuUs();
  const k0 = sysUs();
  const t0 = nowNs();
  appended = await run(durationS, true);
  const wallS = Number(nowNs() - t0) / 1e9;
  const cpuS = (cpuUs() - c0) / 1e6;
  const sysS = (sysUs() - k0) / 1e6;
  const threads = threadShares(th0, threadCpu(), appended);
  const seals1 = sealsOf();
  const f0 = nowNs();
  await h.log.flushSeals();
  const flushMs = Number(nowNs() - f0) / 1e6;
  const lat = latStats(Float64Array.from(firstLat));
  return {
    orgs: orgs.length,
    batch,
    wallS: r(wallS, 3),
    events: appended,
    eventsPerS: r(appended / wallS, 0),
    cpuS: r(cpuS, 3),
    cpuShare: r(cpuS / wallS, 2),
    eventsPerCpuS: r(appended / cpuS, 0),
    cpuUsPerEvent: r((cpuS * 1e6) / appended, 1),
    kernelCpuUsPerEvent: r((sysS * 1e6) / appended, 1),
    threadCpuUsPerEvent: threads,
    syncAppendUs: r(Number(syncNs) / 1000 / appended, 2),
    sealsDuring: seals0 === null || seals1 === null ? null : seals1 - seals0,
    flushSealsAfterMs: r(flushMs, 1),
    turnFirstEventCommitLatency: lat,
    ids,
  };
}

// Open loop at `rate` events/s: every 1 ms timer tick appends the events due by then. Times each
// append() call and each event from its append() to its promise resolving.
async function paced(h, org, { rate, seconds, append }) {
  const pool = makeInputs(org, 4096);
  const add = append ?? ((input) => h.log.append(input));
  const total = Math.round(rate * seconds);
  const callUs = new Float64Array(total);
  const commitUs = new Float64Array(total);
  let done = 0;
  let sent = 0;
  const th0 = threadCpu();
  const start = nowNs();
  const c0 = cpuUs();
  const k0 = sysUs();
  await new Promise((resolve) => {
    const tick = () => {
      const due = Math.min(total, Math.floor((Number(nowNs() - start) / 1e9) * rate));
      while (sent < due) {
        const i = sent++;
        const t0 = nowNs();
        const p = add(pool[i % 4096]);
        const t1 = nowNs();
        callUs[i] = Number(t1 - t0) / 1000;
        p.then(() => {
          commitUs[i] = Number(nowNs() - t0) / 1000;
          if (++done === total) resolve();
        });
      }
      if (sent < total) setTimeout(tick, 1);
    };
    tick();
  });
  const wallS = Number(nowNs() - start) / 1e9;
  const cpuS = (cpuUs() - c0) / 1e6;
  const sysS = (sysUs() - k0) / 1e6;
  const threads = threadShares(th0, threadCpu(), total);
  return {
    rate,
    threadCpuUsPerEvent: threads,
    events: total,
    cpuShare: r(cpuS / wallS, 2),
    cpuUsPerEvent: r((cpuS * 1e6) / total, 1),
    kernelCpuUsPerEvent: r((sysS * 1e6) / total, 1),
    appendCall: latStats(callUs),
    appendToCommit: latStats(commitUs),
  };
}

function integrityScan(h, org, times) {
  const runs = [];
  let res;
  for (let i = 0; i < times; i++) {
    const c0 = cpuUs();
    const t0 = nowNs();
    res = h.log.integrity(org);
    const s = Number(nowNs() - t0) / 1e9;
    runs.push({ s, cpuS: (cpuUs() - c0) / 1e6 });
  }
  if (res.status !== 'intact') throw new Error(`integrity: ${res.status} (${res.broken} broken)`);
  const s = median(runs.map((x) => x.s));
  return {
    events: res.events,
    status: res.status,
    runs: runs.length,
    seconds: r(s, 3),
    eventsPerS: r(res.events / s, 0),
    perRun: runs.map((x) => r(res.events / x.s, 0)),
  };
}

// The endpoint's scan (integrityAsync, on the integrity workers) with every thread of the process
// allowed on `cpuList` (taskset -a), then pinned back to `pinned`.
async function integrityScanParallel(h, org, times, cpuList, pinned) {
  const setAffinity = (list) =>
    spawnSync('taskset', ['-a', '-p', '-c', list, String(process.pid)], { stdio: 'ignore' }).status === 0;
  const widened = hasTaskset() && setAffinity(cpuList);
  const runs = [];
  let res;
  try {
    for (let i = 0; i < times + 1; i++) {
      const c0 = cpuUs();
      const t0 = nowNs();
      res = await h.log.integrityAsync(org);
      const s = Number(nowNs() - t0) / 1e9;
      // The first run starts the workers and verifies every seal signature once (later runs
      // remember them, like the inline scans before): it is reported, not counted.
      runs.push({ s, cores: (cpuUs() - c0) / 1e6 / s });
    }
  } finally {
    if (widened) setAffinity(String(pinned));
  }
  if (res.status !== 'intact') throw new Error(`integrity: ${res.status} (${res.broken} broken)`);
  const counted = runs.slice(1);
  const s = median(counted.map((x) => x.s));
  return {
    events: res.events,
    cpus: widened ? cpuList : 'not widened (no taskset)',
    workers: Math.min(4, cpus().length),
    runs: counted.length,
    seconds: r(s, 3),
    eventsPerS: r(res.events / s, 0),
    coresBusy: r(median(counted.map((x) => x.cores)), 2),
    firstRunEventsPerS: r(res.events / runs[0].s, 0),
    perRun: counted.map((x) => r(res.events / x.s, 0)),
  };
}

function receipts(M, h, org, ids, count, signer) {
  const verifiers = M.verifiersFor(signer.publicDocument());
  const pick = [];
  for (let i = 0; i < count; i++) pick.push(ids[Math.floor(Math.random() * ids.length)]);
  const buildUs = new Float64Array(count);
  const verifyUs = new Float64Array(count);
  let proofLen = 0;
  for (let i = 0; i < count; i++) {
    const id = pick[i];
    const t0 = nowNs();
    const rc = h.log.receipt(org, id);
    const t1 = nowNs();
    if (!rc) throw new Error(`no receipt for ${id}: ${rc}`);
    const event = h.log.get(org, id);
    const t2 = nowNs();
    const v = M.verifyReceipt(rc, verifiers, event);
    const t3 = nowNs();
    if (!v.ok) throw new Error(`receipt of ${id} does not verify: ${v.reason}`);
    buildUs[i] = Number(t1 - t0) / 1000;
    verifyUs[i] = Number(t3 - t2) / 1000;
    proofLen += rc.inclusion_proof.length;
  }
  return {
    count,
    meanProofHashes: r(proofLen / count, 1),
    build: latStats(buildUs),
    verify: latStats(verifyUs),
  };
}

// ---------------------------------------------------------------------------------------------

function report(res) {
  const f = (x, d = 0) =>
    x === null || x === undefined
      ? '–'
      : Number(x).toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
  const lines = [
    '| measurement | result | CPU | latency p50 / p99 | notes |',
    '| --- | ---: | --- | --- | --- |',
  ];
  for (const s of res.sustainedSummary) {
    lines.push(
      `| sustained append, ${s.orgs} org${s.orgs > 1 ? 's' : ''}, ${s.batch} per turn, median of ${s.rounds} × ` +
        `${res.config.durationS} s | **${f(s.eventsPerS)} events/s** (rounds: ${s.perRound.map((x) => f(x)).join(' / ')}) | ` +
        `${f(s.cpuShare * 100)} % of the core; ${f(s.cpuUsPerEvent, 1)} µs/event: main thread ` +
        `${f(s.mainThreadCpuUsPerEvent, 1)}, other threads ${f(s.otherThreadsCpuUsPerEvent, 1)}; kernel ${f(s.kernelCpuUsPerEvent, 1)} | ` +
        `${f(s.commitP50Ms, 1)} / ${f(s.commitP99Ms, 1)} ms (a turn's first event to commit) | ` +
        `append() ${f(s.syncAppendUs, 1)} µs synchronous; ${f(s.sealsPerS, 1)} seals/s |`,
    );
  }
  for (const s of res.extraBatches) {
    const l = s.turnFirstEventCommitLatency;
    lines.push(
      `| sustained append, 1 org, ${s.batch} per turn, ${f(s.wallS, 0)} s | ${f(s.eventsPerS)} events/s | ` +
        `${f(s.cpuShare * 100)} % of the core; ${f(s.cpuUsPerEvent, 1)} µs/event: main thread ` +
        `${f(s.threadCpuUsPerEvent.main, 1)}, other threads ${f(s.threadCpuUsPerEvent.otherThreads, 1)}; kernel ${f(s.kernelCpuUsPerEvent, 1)} | ` +
        `${f(l.p50Us / 1000, 2)} / ${f(l.p99Us / 1000, 2)} ms | append() ${f(s.syncAppendUs, 1)} µs synchronous |`,
    );
  }
  for (const p of res.paced) {
    lines.push(
      `| per-append latency, open loop ${f(p.rate)} events/s, 1 org | ${f(p.events)} events | ` +
        `${f(p.cpuShare * 100)} % of the core; ${f(p.cpuUsPerEvent, 0)} µs/event: main thread ` +
        `${f(p.threadCpuUsPerEvent.main, 0)}, other threads ${f(p.threadCpuUsPerEvent.otherThreads, 0)}; kernel ${f(p.kernelCpuUsPerEvent, 0)} | ` +
        `append() call ${f(p.appendCall.p50Us, 1)} / ${f(p.appendCall.p99Us, 1)} µs; append → committed ` +
        `${f(p.appendToCommit.p50Us / 1000, 2)} / ${f(p.appendToCommit.p99Us / 1000, 2)} ms | ` +
        `${res.pacedHarness ? `the harness alone: ${f(res.pacedHarness.cpuUsPerEvent, 0)} µs/event at 1,000/s` : ''} |`,
    );
  }
  const s = res.integrity;
  if (s) {
    lines.push(
      `| integrity scan, 1 org, inline | **${f(s.eventsPerS)} events/s** | one thread, the pinned core | ${f(s.seconds, 2)} s for ${f(s.events)} events (median of ${s.runs}) | per run: ${s.perRun.map((x) => f(x)).join(' / ')} events/s |`,
    );
  }
  const sp = res.integrityParallel;
  if (sp) {
    lines.push(
      `| integrity scan, 1 org, as the endpoint runs it | **${f(sp.eventsPerS)} events/s** | ${sp.workers} integrity workers + main thread on CPUs ${sp.cpus}; ${f(sp.coresBusy, 2)} cores busy | ${f(sp.seconds, 2)} s for ${f(sp.events)} events (median of ${sp.runs}) | per run: ${sp.perRun.map((x) => f(x)).join(' / ')} events/s; first run (workers starting, every seal signature verified) ${f(sp.firstRunEventsPerS)} events/s |`,
    );
  }
  const rc = res.receipts;
  if (rc) {
    lines.push(
      `| receipt(): inclusion proof + seal note | ${f(rc.count)} receipts | one thread | ${f(rc.build.p50Us, 1)} / ${f(rc.build.p99Us, 1)} µs | ${f(rc.meanProofHashes, 1)} proof hashes on average |`,
      `| verifyReceipt(): Ed25519 + ML-DSA-65 seal, inclusion, event hash | ${f(rc.count)} receipts | one thread | ${f(rc.verify.p50Us, 1)} / ${f(rc.verify.p99Us, 1)} µs | |`,
    );
  }
  if (res.storage) {
    lines.push(
      '',
      `Storage after the one-org run: LMDB ${f(res.storage.lmdbBytesPerEvent)} bytes/event, JSONL ` +
        `${f(res.storage.jsonlBytesPerEvent)} bytes/event (${f(res.storage.events)} events).`,
    );
  }
  lines.push('', '| issue target | measured | met? |', '| --- | --- | --- |');
  for (const t of res.targets) lines.push(`| ${t.target} | ${t.measured} | ${t.met ? 'yes' : '**no**'} |`);
  return lines.join('\n');
}

async function main(cfg) {
  if (!existsSync(CHAIN_LOG_JS)) await waitForChainLog(cfg.waitMin);
  const M = await loadModules();
  if (typeof M.ChainLog !== 'function') throw new Error('dist/src/audit/chain-log.js exports no ChainLog');
  let affinity = null;
  try {
    affinity = spawnSync('taskset', ['-p', '-c', String(process.pid)], { encoding: 'utf8' }).stdout.trim();
  } catch {}
  log(`config: ${JSON.stringify(cfg)}; ${affinity ?? 'affinity unknown'}`);
  const build = statSync(CHAIN_LOG_JS).mtime.toISOString();
  const root = mkdtempSync(join(tmpdir(), 'govgate-audit-bench-'));
  const cleanup = () => rmSync(root, { recursive: true, force: true });
  process.on('exit', cleanup);
  const keys = M.AuditKeys.load({ keysDir: join(root, 'keys') });
  const signer = await M.WorkerSealSigner.start(keys);
  const res = {
    date: new Date().toISOString(),
    node: process.version,
    cpus: `${cpus().length} × ${cpus()[0]?.model ?? '?'}`,
    affinity,
    config: cfg,
    chainLogBuild: build,
    sustained: [],
    sustainedSummary: null,
    extraBatches: [],
    paced: [],
    pacedHarness: null,
    integrity: null,
    integrityParallel: null,
    receipts: null,
    storage: null,
  };
  try {
    // 1. Rounds of one org then ten orgs, each on a fresh store. The first one-org chain is kept
    //    for the latency, integrity and receipt measurements.
    const orgs10 = Array.from({ length: 10 }, (_, i) => `org_bench_${String(i).padStart(2, '0')}`);
    let one;
    let ids;
    for (let round = 1; round <= cfg.rounds; round++) {
      for (const n of [1, 10]) {
        const orgs = n === 1 ? ['org_bench_one'] : orgs10;
        const h = openLog(M, signer, root, `r${round}-${n}`);
        log(
          `round ${round}: sustained append, ${n} org${n > 1 ? 's' : ''}, ${cfg.batch} per turn, ${cfg.durationS} s`,
        );
        const s = await sustained(M, h, orgs, {
          batch: cfg.batch,
          durationS: cfg.durationS,
          warmupS: cfg.warmupS,
        });
        if (round === 1 && n === 1) ids = s.ids.get('org_bench_one');
        delete s.ids;
        res.sustained.push({ round, ...s });
        log(`  ${s.eventsPerS} events/s, ${s.cpuUsPerEvent} µs CPU/event, ${s.sealsDuring} seals`);
        if (round === 1 && n === 1) one = h;
        else {
          await closeLog(h);
          rmSync(h.dataDir, { recursive: true, force: true });
        }
      }
    }
    // Top up to the scan size if the machine was slow.
    let total = one.store.auditEvents.getKeysCount?.({
      start: ['org_bench_one', 0],
      end: ['org_bench_one', Number.MAX_SAFE_INTEGER],
    });
    if (typeof total !== 'number') total = res.sustained[0].events;
    if (total < cfg.minScanEvents) {
      log(`topping the one-org chain up to ${cfg.minScanEvents} events`);
      const pool = makeInputs('org_bench_one', 4096);
      for (let i = total; i < cfg.minScanEvents; i += 1000) {
        let last;
        for (let j = 0; j < 1000; j++) last = one.log.append(pool[j]);
        await last;
      }
      await one.log.flushSeals();
    }
    // 2. Per-append latency, open loop; first the harness alone (append replaced by a resolved promise).
    const ref = Promise.resolve({ id: 'x', seq: 0 });
    const idle = await paced(one, 'org_bench_one', { rate: 1000, seconds: 2, append: () => ref });
    res.pacedHarness = { rate: 1000, cpuShare: idle.cpuShare, cpuUsPerEvent: idle.cpuUsPerEvent };
    log(`  the paced harness alone at 1,000/s: ${idle.cpuUsPerEvent} µs CPU/event`);
    for (const rate of cfg.rates) {
      log(`per-append latency, open loop, ${rate} events/s`);
      const p = await paced(one, 'org_bench_one', { rate, seconds: cfg.latencyS });
      res.paced.push(p);
      await one.log.flushSeals();
      log(
        `  append → commit p50 ${p.appendToCommit.p50Us} µs, p99 ${p.appendToCommit.p99Us} µs, ${p.cpuUsPerEvent} µs CPU/event`,
      );
    }
    // 3. Integrity scan; 4. receipts.
    log('integrity scan');
    res.integrity = integrityScan(one, 'org_bench_one', cfg.quick ? 1 : 3);
    log(`  ${res.integrity.events} events, ${res.integrity.eventsPerS} events/s`);
    log('integrity scan on the integrity workers');
    res.integrityParallel = await integrityScanParallel(
      one,
      'org_bench_one',
      cfg.quick ? 1 : 3,
      `0-${cpus().length - 1}`,
      cfg.cpu,
    );
    log(`  ${res.integrityParallel.eventsPerS} events/s on CPUs ${res.integrityParallel.cpus}`);
    log('receipts');
    res.receipts = receipts(M, one, 'org_bench_one', ids, cfg.receipts, signer);
    log(`  build p50 ${res.receipts.build.p50Us} µs, verify p50 ${res.receipts.verify.p50Us} µs`);
    await closeLog(one);
    const lmdb = dirBytes(one.dataDir) - dirBytes(join(one.dataDir, 'audit'));
    const jsonl = dirBytes(join(one.dataDir, 'audit'));
    res.storage = {
      events: res.integrity.events,
      lmdbBytesPerEvent: r(lmdb / res.integrity.events, 0),
      jsonlBytesPerEvent: r(jsonl / res.integrity.events, 0),
    };
    rmSync(one.dataDir, { recursive: true, force: true });

    // Supplementary: other batch sizes (events per event-loop turn), one org, shorter.
    for (const b of cfg.extraBatches) {
      const h = openLog(M, signer, root, `b${b}`);
      log(`sustained append, 1 org, ${b} per turn, ${cfg.extraDurationS} s`);
      const s = await sustained(M, h, ['org_bench_b'], {
        batch: b,
        durationS: cfg.extraDurationS,
        warmupS: 1,
      });
      delete s.ids;
      res.extraBatches.push(s);
      log(`  ${s.eventsPerS} events/s, ${s.cpuUsPerEvent} µs CPU/event`);
      await closeLog(h);
      rmSync(h.dataDir, { recursive: true, force: true });
    }
  } finally {
    await signer.close();
  }

  // Medians over the rounds, per org count.
  res.sustainedSummary = [1, 10].map((n) => {
    const rs = res.sustained.filter((x) => x.orgs === n);
    const med = (f, d) => r(median(rs.map(f)), d);
    return {
      orgs: n,
      batch: cfg.batch,
      rounds: rs.length,
      eventsPerS: med((x) => x.eventsPerS, 0),
      cpuShare: med((x) => x.cpuShare, 2),
      cpuUsPerEvent: med((x) => x.cpuUsPerEvent, 1),
      kernelCpuUsPerEvent: med((x) => x.kernelCpuUsPerEvent, 1),
      mainThreadCpuUsPerEvent: med((x) => x.threadCpuUsPerEvent.main, 1),
      otherThreadsCpuUsPerEvent: med((x) => x.threadCpuUsPerEvent.otherThreads, 1),
      eventsPerCpuS: med((x) => x.eventsPerCpuS, 0),
      syncAppendUs: med((x) => x.syncAppendUs, 1),
      sealsPerS: med((x) => (x.sealsDuring === null ? null : x.sealsDuring / x.wallS), 1),
      commitP50Ms: med((x) => x.turnFirstEventCommitLatency.p50Us / 1000, 2),
      commitP99Ms: med((x) => x.turnFirstEventCommitLatency.p99Us / 1000, 2),
      perRound: rs.map((x) => x.eventsPerS),
      perRoundCpuUsPerEvent: rs.map((x) => x.cpuUsPerEvent),
    };
  });
  const [main1, main10] = res.sustainedSummary;
  const fmt = (x) => Number(x).toLocaleString('en-US');
  res.targets = [
    {
      target: 'append ≥ 20,000 events/s on one core, 1 org',
      measured: `${fmt(main1.eventsPerS)} events/s (rounds: ${main1.perRound.map(fmt).join(' / ')})`,
      met: main1.eventsPerS >= 20_000,
    },
    {
      target: 'append ≥ 20,000 events/s on one core, 10 orgs',
      measured: `${fmt(main10.eventsPerS)} events/s (rounds: ${main10.perRound.map(fmt).join(' / ')})`,
      met: main10.eventsPerS >= 20_000,
    },
    {
      target: 'integrity scan ≥ 100,000 events/s (over ≥ 100k events), as the endpoint runs it',
      measured: res.integrityParallel
        ? `${fmt(res.integrityParallel.eventsPerS)} events/s over ${fmt(res.integrityParallel.events)} events on CPUs ${res.integrityParallel.cpus} (inline on one core: ${fmt(res.integrity.eventsPerS)})`
        : `${fmt(res.integrity.eventsPerS)} events/s over ${fmt(res.integrity.events)} events`,
      met: (res.integrityParallel ?? res.integrity).eventsPerS >= 100_000 && res.integrity.events >= 100_000,
    },
  ];
  const md = [
    `Run ${res.date}, node ${res.node}, ${res.cpus}, ${res.affinity ?? ''}, chain-log.js built ${build}.`,
    '',
    report(res),
  ].join('\n');
  const dir = join(BENCH_DIR, 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${cfg.out}.json`), `${JSON.stringify(res, null, 2)}\n`);
  writeFileSync(join(dir, `${cfg.out}.md`), `${md}\n`);
  process.stdout.write(`\n${md}\n`);
}

const cfg0 = parseArgs(process.argv.slice(2));
runBench(main, cfg0, { nice: cfg0.nice, cpu: cfg0.cpu });
