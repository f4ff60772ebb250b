// Saturation only, CPU per request, for the passthrough and one or more govgate variants, taking
// turns: a quick A/B of the request path's CPU (paced-ab.mjs adds latency; run.mjs is the full run).
//
//   node sat.mjs [--rounds=5] [--duration=5] [--scenario=chat|stream] [--passthrough]
//                [--variants='NAME=CLI|NODE_FLAGS;…']
//
// Pinned and reniced like run.mjs: generator and mock on CPU 0, servers on CPU 1.
import * as T from './targets.mjs';

function parseArgs(argv) {
  const { flags, num } = T.parseFlags(argv);
  const scenario = T.scenarioFlag(flags);
  const variants = T.parseVariants(flags.get('variants'));
  return {
    rounds: Math.max(1, Math.round(num('rounds', 5))),
    durationS: num('duration', 5),
    scenario,
    passthrough: flags.has('passthrough'),
    variants,
    nice: process.getuid?.() === 0 ? -20 : null,
  };
}

async function main(cfg) {
  const { targets, lg, spec } = await T.startVariants(cfg, { passthrough: cfg.passthrough });
  const cpu = new Map(targets.map((t) => [t.name, []]));
  for (let r = 0; r < cfg.rounds; r++) {
    const line = [];
    for (const t of targets.map((_, i) => targets[(i + r) % targets.length])) {
      const s = await lg.call('saturate', {
        ...spec(t),
        connections: 50,
        warmupS: 1,
        durationS: cfg.durationS,
      });
      cpu.get(t.name).push(s.serverCpuUsPerReq);
      line.push(
        `${t.name} ${s.serverCpuUsPerReq} µs (${Math.round(s.rps)} rps${s.errors || s.non2xx ? ', errors!' : ''})`,
      );
    }
    T.log(`round ${r + 1}: ${line.join(', ')}`);
  }
  for (const [name, xs] of cpu)
    T.log(`${name}: median ${T.median(xs)} µs CPU per ${cfg.scenario} call (${xs.join(' / ')})`);
  await lg.call('exit').catch(() => {});
}

const cfg0 = parseArgs(process.argv.slice(2));
T.runBench(main, cfg0, { nice: cfg0.nice });
