// Added latency at a paced rate, A/B: govgate builds (or node flags) taking turns, with the direct
// baseline measured again right before each target, so a drift of the machine hits both alike.
// Shorter than run.mjs (paced phases only, optional saturation for CPU per request).
//
//   node paced-ab.mjs [--rounds=3] [--duration=8] [--rate=1000] [--saturate] [--scenario=chat|stream]
//                     [--variant=NAME=DIST_CLI[|NODE_FLAGS]]...
//
// Each --variant names a govgate CLI (default: this checkout's dist/src/cli.js) and optional node
// flags, e.g. --variant=head= --variant=base=/tmp/base/dist/src/cli.js
// --variant=semi=|--max-semi-space-size=64. Pinned like run.mjs: generator and mock on CPU 0,
// servers on CPU 1. Prints one line per phase and the per-variant medians.
import * as T from './targets.mjs';

const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const a = args.find((x) => x.startsWith(`--${name}=`));
  return a ? a.slice(name.length + 3) : fallback;
};
const rounds = Number(opt('rounds', '3'));
const durationS = Number(opt('duration', '8'));
const rate = Number(opt('rate', '1000'));
const scenario = opt('scenario', 'chat');
const saturate = args.includes('--saturate');
const specs = args.filter((x) => x.startsWith('--variant=')).map((x) => x.slice('--variant='.length));
const variants = (specs.length > 0 ? specs : ['govgate=']).map((v) => {
  const i = v.indexOf('=');
  const [cli, flags] = (i < 0 ? '' : v.slice(i + 1)).split('|');
  return {
    name: i < 0 ? v : v.slice(0, i),
    cli: cli || T.GOVGATE_CLI,
    nodeArgs: (flags ?? '').split(' ').filter(Boolean),
  };
});

// The request bodies of run.mjs, so the numbers compare.
const bodies = T.chatBodies(T.SYSTEM, T.USER);

const pin = T.hasTaskset();
if (pin) T.pinSelf(0);
process.on('SIGINT', () => {
  T.killAllSync();
  process.exit(130);
});
const mock = await T.startMock(pin ? 0 : undefined);
const targets = [];
for (const v of variants) {
  targets.push(
    await T.startGovgate(mock, pin ? 1 : undefined, { cli: v.cli, name: v.name, nodeArgs: v.nodeArgs }),
  );
}
const lg = T.startLoadgen(pin ? 0 : undefined);
await lg.call('config', { clkTck: T.clkTck() });
const spec = (t) => ({
  url: `${t.origin}${t.path}`,
  headers: t.headers,
  body: bodies[scenario],
  pid: t.pid,
  mockPid: mock.child.pid,
});
for (const t of targets) await lg.call('saturate', { ...spec(t), connections: 50, warmupS: 0, durationS: 3 });

const results = new Map(targets.map((t) => [t.name, { added: [], cpu: [] }]));
for (let r = 0; r < rounds; r++) {
  for (const t of targets.map((_, i) => targets[(i + r) % targets.length])) {
    const res = results.get(t.name);
    let sat = '';
    if (saturate) {
      const s = await lg.call('saturate', { ...spec(t), connections: 50, warmupS: 1, durationS: 5 });
      res.cpu.push(s.serverCpuUsPerReq);
      sat = `, saturated ${s.serverCpuUsPerReq} µs CPU/req`;
    }
    await T.sleep(300);
    const d = await lg.call('paced', {
      ...spec(T.directTarget(mock)),
      rate,
      connections: 256,
      warmupS: 1,
      durationS: 4,
    });
    await T.sleep(300);
    const p = await lg.call('paced', { ...spec(t), rate, connections: 256, warmupS: 1, durationS });
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
  T.log(`${name}: added p50 median ${T.median(res.added).toFixed(3)} ms over ${rounds} rounds${cpu}`);
}
lg.child.proc.kill();
await T.stopAll();
process.exit(0);
