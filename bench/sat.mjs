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
  const pin = T.hasTaskset();
  const gen = pin ? 0 : undefined;
  const server = pin ? 1 : undefined;
  if (pin) T.pinSelf(0);
  if (Number.isInteger(cfg.nice) && cfg.nice !== 0) T.spawnOptions.nice = cfg.nice;
  const bodies = T.chatBodies(T.SYSTEM, T.USER);
  const mock = await T.startMock(gen);
  const targets = [];
  if (cfg.passthrough) targets.push(await T.startPassthrough(mock, server));
  for (const v of cfg.variants)
    targets.push(await T.startGovgate(mock, server, { cli: v.cli, name: v.name, nodeArgs: v.nodeArgs }));
  const lg = T.startLoadgen(gen);
  await lg.call('config', { clkTck: T.clkTck() });
  const spec = (t) => ({
    url: `${t.origin}${t.path}`,
    headers: t.headers,
    body: bodies[cfg.scenario],
    pid: t.pid,
    mockPid: mock.child.pid,
  });
  for (const t of targets)
    await lg.call('saturate', { ...spec(t), connections: 50, warmupS: 0, durationS: 3 });
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
