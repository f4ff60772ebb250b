import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import {
  BENCH_DIR,
  chatBodies,
  clkTck,
  directTarget,
  GOVGATE_CLI,
  hasTaskset,
  log,
  median,
  parseFlags,
  pinSelf,
  portkeyVersion,
  runBench,
  SYSTEM,
  sleep,
  smokeCheck,
  spawnOptions,
  startGovgate,
  startLoadgen,
  startMock,
  startPassthrough,
  startPortkey,
  USER,
} from './targets.mjs';

const ALL_TARGETS = ['direct', 'passthrough', 'portkey', 'govgate'];
const SCENARIOS = ['chat', 'stream'];

function parseArgs(argv) {
  const { flags, quick, num, outName } = parseFlags(argv);
  const targets = (flags.get('targets') ?? ALL_TARGETS.join(',')).split(',').filter(Boolean);
  for (const t of targets) if (!ALL_TARGETS.includes(t)) throw new Error(`unknown target ${t}`);
  if (!targets.includes('direct')) targets.unshift('direct'); // the baseline for added latency
  // --baseline=DIR: also measure the govgate build in DIR (a dist/ of another commit), A/B in one run.
  const baseline = flags.get('baseline');
  if (baseline !== undefined) targets.push('govgate-base');
  const out = outName('latest');
  return {
    quick,
    out,
    rounds: Math.max(1, Math.round(num('rounds', 3))),
    targets,
    baseline: baseline === undefined ? null : resolve(baseline),
    connections: Math.round(num('connections', 50)),
    rate: num('rate', 1000),
    genCpu: Math.round(num('gen-cpu', 0)),
    serverCpu: Math.round(num('server-cpu', 1)),
    // Negative niceness (root only) keeps other work on a shared machine from stealing the cores.
    nice: flags.has('nice') ? Math.round(Number(flags.get('nice'))) : process.getuid?.() === 0 ? -20 : null,
    saturation: quick ? { warmupS: 0.3, durationS: 1 } : { warmupS: 1, durationS: 5 },
    paced: quick ? { warmupS: 0.3, durationS: 1.5 } : { warmupS: 1, durationS: 10 },
    prewarmS: quick ? 1 : 2,
    settleMs: quick ? 200 : 500,
  };
}

const r2 = (x, d = 2) => (x === null || !Number.isFinite(x) ? null : Math.round(x * 10 ** d) / 10 ** d);
const ratio = (a, b, minDen = 0) =>
  a === null || b === null || !Number.isFinite(a) || !Number.isFinite(b) || b <= minDen ? null : a / b;

function phaseOk(p, total) {
  if (!p) return false;
  const bad = (p.errors ?? 0) + (p.non2xx ?? 0) + (p.timeouts ?? 0);
  return total > 0 && bad / total <= 0.01;
}

// Per round: raw metrics and added latency vs direct from the same round; then medians and ratios.
function summarize(rounds, targetNames) {
  const perRound = rounds.map((round) => {
    const out = {};
    for (const t of targetNames) {
      out[t] = {};
      for (const sc of SCENARIOS) {
        const r = round[t]?.[sc];
        const d = round.direct?.[sc];
        if (!r) continue;
        const p50 = r.paced?.latencyMs?.p50 ?? null;
        const p99 = r.paced?.latencyMs?.p99 ?? null;
        const dp50 = d?.paced?.latencyMs?.p50 ?? null;
        const dp99 = d?.paced?.latencyMs?.p99 ?? null;
        out[t][sc] = {
          cpuUsPerReq: r.saturate?.serverCpuUsPerReq ?? null,
          rps: r.saturate?.rps ?? null,
          serverCpuShare: r.saturate?.serverCpuShare ?? null,
          p50,
          p99,
          addedP50: p50 !== null && dp50 !== null ? p50 - dp50 : null,
          addedP99: p99 !== null && dp99 !== null ? p99 - dp99 : null,
          overloaded: r.paced?.skipped !== undefined,
          valid:
            phaseOk(r.saturate, r.saturate?.completed ?? 0) &&
            (r.paced?.skipped !== undefined || phaseOk(r.paced, r.paced?.scheduled ?? 0)),
        };
      }
    }
    return out;
  });
  const summary = {};
  for (const t of targetNames) {
    summary[t] = {};
    for (const sc of SCENARIOS) {
      const rows = perRound.map((r) => r[t]?.[sc]).filter(Boolean);
      if (rows.length === 0) continue;
      const pts = perRound.map((r) => r.passthrough?.[sc]);
      const col = (k) => rows.map((x) => x[k]);
      const ratios = (k, minDen = 0) =>
        perRound.map((r, i) => ratio(r[t]?.[sc]?.[k] ?? null, pts[i]?.[k] ?? null, minDen));
      summary[t][sc] = {
        rounds: rows.length,
        allValid: rows.every((x) => x.valid),
        pacedOverloadedRounds: rows.filter((x) => x.overloaded).length,
        cpuUsPerReq: r2(median(col('cpuUsPerReq')), 1),
        rps: r2(median(col('rps')), 0),
        serverCpuShare: r2(median(col('serverCpuShare')), 2),
        p50: r2(median(col('p50')), 3),
        p99: r2(median(col('p99')), 3),
        addedP50: r2(median(col('addedP50')), 3),
        addedP99: r2(median(col('addedP99')), 3),
        vsPassthrough: {
          cpuUsPerReq: r2(median(ratios('cpuUsPerReq')), 2),
          rps: r2(median(ratios('rps')), 2),
          // Added-latency ratios only where the passthrough's added latency is measurable (> 10 µs).
          addedP50: r2(median(ratios('addedP50', 0.01)), 2),
          addedP99: r2(median(ratios('addedP99', 0.01)), 2),
        },
      };
    }
  }
  return { perRound, summary };
}

function fmt(x, d = 2) {
  return x === null || x === undefined ? '–' : x.toFixed(d);
}

function markdownTable(summary, targetNames) {
  const lines = [
    '| target | request | CPU µs/req | ×PT | RPS (sat.) | ×PT | p50 ms | p99 ms | added p50 ms | ×PT | added p99 ms | ×PT |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const t of targetNames) {
    for (const sc of SCENARIOS) {
      const s = summary[t]?.[sc];
      if (!s) continue;
      const v = s.vsPassthrough;
      const isDirect = t === 'direct';
      const head =
        `| ${t}${s.allValid ? '' : ' (errors!)'} | ${sc === 'chat' ? '1 KB chat' : 'stream'} | ` +
        `${fmt(s.cpuUsPerReq, 1)} | ${fmt(v.cpuUsPerReq)} | ${fmt(s.rps, 0)} | ${fmt(v.rps)} | `;
      if (s.pacedOverloadedRounds > s.rounds / 2) {
        lines.push(`${head}not run: saturates below 1.2× the paced rate | | | | | |`);
        continue;
      }
      lines.push(
        `${head}${fmt(s.p50, 3)} | ${fmt(s.p99, 3)} | ${isDirect ? '(baseline)' : fmt(s.addedP50, 3)} | ` +
          `${isDirect ? '' : fmt(v.addedP50)} | ${isDirect ? '' : fmt(s.addedP99, 3)} | ${isDirect ? '' : fmt(v.addedP99)} |`,
      );
    }
  }
  return lines.join('\n');
}

function issueTargets(summary) {
  const out = {};
  for (const sc of SCENARIOS) {
    const g = summary.govgate?.[sc];
    if (!g) continue;
    out[sc] = {
      cpuRatio: g.vsPassthrough.cpuUsPerReq,
      cpuRatioMet: g.vsPassthrough.cpuUsPerReq === null ? null : g.vsPassthrough.cpuUsPerReq <= 1.3,
      addedP50Ms: g.addedP50,
      addedP50Met: g.addedP50 === null ? null : g.addedP50 <= 0.3,
    };
  }
  return out;
}

// Newest modification time among govgate's built files when the run starts: which build was measured.
function govgateBuildTime() {
  try {
    const dir = dirname(GOVGATE_CLI);
    let newest = 0;
    for (const f of readdirSync(dir, { recursive: true })) {
      if (f.endsWith('.js')) newest = Math.max(newest, statSync(join(dir, f)).mtimeMs);
    }
    return newest ? new Date(newest).toISOString() : null;
  } catch {
    return null;
  }
}

function pkgVersion(name) {
  try {
    return JSON.parse(readFileSync(join(BENCH_DIR, 'node_modules', name, 'package.json'), 'utf8')).version;
  } catch {
    return null;
  }
}

async function main(cfg) {
  const nCpu = cpus().length;
  const pin = hasTaskset() && nCpu >= 2;
  if (!pin) log(`WARNING: not pinning (taskset ${hasTaskset() ? 'found' : 'missing'}, ${nCpu} CPUs)`);
  const genCpu = pin ? cfg.genCpu : undefined;
  const serverCpu = pin ? cfg.serverCpu : undefined;
  if (pin) pinSelf(cfg.genCpu);
  if (Number.isInteger(cfg.nice) && cfg.nice !== 0) spawnOptions.nice = cfg.nice;
  const ticks = clkTck();
  const govgateBuild = govgateBuildTime(); // before start: a rebuild during the run must not show
  const bodies = chatBodies(SYSTEM, USER);
  log(`config: ${JSON.stringify({ ...cfg, pin, chatBytes: bodies.chat.length })}`);

  const mock = await startMock(genCpu);
  log(`mock upstream on ${mock.origin} (pid ${mock.child.pid})`);
  const lg = startLoadgen(genCpu);
  await lg.call('config', { clkTck: ticks });

  const targets = new Map();
  const status = {};
  const starters = {
    direct: async () => directTarget(mock),
    passthrough: () => startPassthrough(mock, serverCpu),
    portkey: () => startPortkey(mock, serverCpu, bodies),
    govgate: () => startGovgate(mock, serverCpu),
    'govgate-base': () =>
      startGovgate(mock, serverCpu, { cli: join(cfg.baseline, 'src', 'cli.js'), name: 'govgate-base' }),
  };
  for (const name of cfg.targets) {
    try {
      const t = await starters[name]();
      await smokeCheck(t, bodies);
      targets.set(name, t);
      status[name] = { status: 'ok', pid: t.pid, origin: t.origin };
      log(`${name}: ready on ${t.origin} (pid ${t.pid})`);
    } catch (err) {
      status[name] = { status: 'unavailable', reason: String(err.message ?? err).slice(0, 600) };
      log(`${name}: UNAVAILABLE: ${status[name].reason}`);
    }
  }
  const names = [...targets.keys()];

  const specFor = (t, sc) => ({
    url: `${t.origin}${t.path}`,
    headers: t.headers,
    body: bodies[sc],
    pid: t.pid,
    mockPid: mock.child.pid,
  });

  // JIT warm-up of every target before the first round.
  for (const name of names) {
    const t = targets.get(name);
    for (const sc of SCENARIOS) {
      await lg.call('saturate', {
        ...specFor(t, sc),
        connections: cfg.connections,
        warmupS: 0,
        durationS: cfg.prewarmS / 2,
      });
    }
  }
  log('warm-up done');

  const rounds = [];
  for (let r = 0; r < cfg.rounds; r++) {
    const order = names.map((_, i) => names[(i + r) % names.length]);
    log(`round ${r + 1}/${cfg.rounds}: ${order.join(' → ')}`);
    const round = { order };
    for (const name of order) {
      const t = targets.get(name);
      if (t.child?.exited) {
        log(`${name}: process exited (${t.child.exitCode}): ${t.child.tail.slice(-5).join(' | ')}`);
        continue;
      }
      round[name] = {};
      for (const sc of SCENARIOS) {
        await sleep(cfg.settleMs);
        const s = await lg.call('saturate', {
          ...specFor(t, sc),
          connections: cfg.connections,
          ...cfg.saturation,
        });
        round[name][sc] = { saturate: s };
        log(
          `  ${name.padEnd(11)} ${sc.padEnd(6)} saturate: ${s.rps} rps, ${s.serverCpuUsPerReq} µs CPU/req, ` +
            `server ${Math.round((s.serverCpuShare ?? 0) * 100)}% of a core, err ${s.errors + s.non2xx}`,
        );
      }
      for (const sc of SCENARIOS) {
        // A target that cannot reach 1.2× the paced rate even closed-loop would only measure its queue.
        const satRps = round[name][sc].saturate.rps ?? 0;
        if (satRps < 1.2 * cfg.rate) {
          round[name][sc].paced = { skipped: `overloaded: ${satRps} RPS at saturation < 1.2 × ${cfg.rate}` };
          log(
            `  ${name.padEnd(11)} ${sc.padEnd(6)} paced ${cfg.rate}/s: skipped (saturates at ${satRps} RPS)`,
          );
          continue;
        }
        await sleep(cfg.settleMs);
        const p = await lg.call('paced', {
          ...specFor(t, sc),
          rate: cfg.rate,
          connections: 256,
          ...cfg.paced,
        });
        round[name][sc].paced = p;
        log(
          `  ${name.padEnd(11)} ${sc.padEnd(6)} paced ${cfg.rate}/s: p50 ${p.latencyMs.p50} ms, ` +
            `p99 ${p.latencyMs.p99} ms, err ${p.errors + p.non2xx}`,
        );
      }
    }
    rounds.push(round);
  }

  const { perRound, summary } = summarize(rounds, names);
  const table = markdownTable(summary, names);
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    cpus: `${nCpu} × ${cpus()[0]?.model ?? '?'}`,
    clkTck: ticks,
    pinning: pin ? { loadgenAndMock: genCpu, servers: serverCpu } : null,
    mode: cfg.quick ? 'quick' : 'full',
    config: cfg,
    requestBytes: { chat: bodies.chat.length, stream: bodies.stream.length },
    versions: {
      govgateBuild,
      portkey: portkeyVersion(),
      '@hono/node-server': pkgVersion('@hono/node-server'),
      autocannon: pkgVersion('autocannon'),
      undici: pkgVersion('undici'),
      uws: pkgVersion('@trufflesuite/uws-js-unofficial'),
    },
    targets: status,
    issueTargets: issueTargets(summary),
    summary,
    perRound,
    rounds,
  };
  const dir = join(BENCH_DIR, 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${cfg.out}.json`), `${JSON.stringify(result, null, 2)}\n`);
  const unavailable = Object.entries(status)
    .filter(([, s]) => s.status !== 'ok')
    .map(([n, s]) => `- ${n}: not measured (${s.reason})`);
  const md = [
    `Run ${result.date}, node ${result.node}, ${result.cpus}, mode ${result.mode}, ` +
      `${cfg.rounds} rounds, medians; ×PT = ratio to the passthrough (median of per-round ratios).`,
    '',
    table,
    '',
    ...unavailable,
  ].join('\n');
  writeFileSync(join(dir, `${cfg.out}.md`), `${md}\n`);
  process.stdout.write(`\n${md}\n`);
  if (Object.keys(result.issueTargets).length) {
    process.stdout.write(`\nissue targets (govgate): ${JSON.stringify(result.issueTargets)}\n`);
  }
}

const cfg0 = parseArgs(process.argv.slice(2));
runBench(main, cfg0, { nice: cfg0.nice });
