// Added latency at a paced rate, A/B: govgate builds (or node flags) taking turns, with the direct
// baseline measured again right before each target, so a drift of the machine hits both alike.
// Shorter than run.mjs (paced phases only, optional saturation for CPU per request).
//
//   node paced-ab.mjs [--rounds=3] [--duration=8] [--rate=1000] [--saturate] [--scenario=chat|stream]
//                     [--variants='NAME=CLI|NODE_FLAGS;…'] [--nice=N]
//
// Each variant names a govgate CLI (empty: this checkout's dist/src/cli.js) and optional node
// flags, e.g. --variants='head=;base=/tmp/base/dist/src/cli.js' or
// --variants='plain=;semi=|--max-semi-space-size=64'. Pinned and reniced like run.mjs: generator
// and mock on CPU 0, servers on CPU 1, niceness −20 when run as root. Prints one line per phase
// and the per-variant medians.
import * as T from './targets.mjs';

function parseArgs(argv) {
  const { flags, num } = T.parseFlags(argv);
  const scenario = T.scenarioFlag(flags);
  const variants = T.parseVariants(flags.get('variants'));
  return {
    rounds: Math.max(1, Math.round(num('rounds', 3))),
    durationS: num('duration', 8),
    rate: num('rate', 1000),
    scenario,
    saturate: flags.has('saturate'),
    variants,
    nice: flags.has('nice') ? Math.round(Number(flags.get('nice'))) : process.getuid?.() === 0 ? -20 : null,
  };
}

async function main(cfg) {
  const { mock, targets, lg, spec } = await T.startVariants(cfg);

  const results = new Map(targets.map((t) => [t.name, { added: [], cpu: [] }]));
  for (let r = 0; r < cfg.rounds; r++) {
    for (const t of targets.map((_, i) => targets[(i + r) % targets.length])) {
      const res = results.get(t.name);
      let sat = '';
      if (cfg.saturate) {
        const s = await lg.call('saturate', { ...spec(t), connections: 50, warmupS: 1, durationS: 5 });
        res.cpu.push(s.serverCpuUsPerReq);
        sat = `, saturated ${s.serverCpuUsPerReq} µs CPU/req`;
      }
      const paced = (target, durationS) =>
        lg.call('paced', { ...spec(target), rate: cfg.rate, connections: 256, warmupS: 1, durationS });
      await T.sleep(300);
      const d = await paced(T.directTarget(mock), 4);
      await T.sleep(300);
      const p = await paced(t, cfg.durationS);
      const added = p.latencyMs.p50 - d.latencyMs.p50;
      res.added.push(added);
      T.log(
        `round ${r + 1} ${t.name}: direct p50 ${d.latencyMs.p50} ms, govgate p50 ${p.latencyMs.p50} ms, ` +
          `added ${added.toFixed(3)} ms, p99 ${p.latencyMs.p99} ms${sat}, errors ${p.errors + p.non2xx}`,
      );
    }
  }
  for (const [name, res] of results) {
    const cpu = res.cpu.length ? `, saturated CPU/req median ${T.median(res.cpu)} µs` : '';
    T.log(`${name}: added p50 median ${T.median(res.added).toFixed(3)} ms over ${cfg.rounds} rounds${cpu}`);
  }
}

const cfg0 = parseArgs(process.argv.slice(2));
T.runBench(main, cfg0, { nice: cfg0.nice });
