// Saturation only, CPU per request, for the passthrough and one or more govgate variants, taking
// turns: a quick A/B of the request path's CPU (paced-ab.mjs adds latency; run.mjs is the full run).
//
//   node sat.mjs [--rounds=5] [--duration=5] [--scenario=chat|stream] [--passthrough] [--sidecar]
//                [--variants='NAME=CLI|NODE_FLAGS;…'] [--siem=all|block]
//
// `--siem=FILTER` gives every govgate variant a deployment-wide SIEM export (webhook, batches of
// 100, that severity filter) posting to the mock: what the export costs per call.
//
// `--sidecar-base=CLI` adds a second sidecar (and control plane) of another build: an A/B.
// `--sidecar` adds `govgate sidecar` (this checkout's build) in front of its own control plane:
// its CPU per call is the sidecar's; the control plane's, which takes in the sidecar's log and
// runs on the generator's CPU here, is printed beside it.
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
    sidecar: flags.has('sidecar'),
    sidecarBase: flags.get('sidecar-base'),
    siem: flags.get('siem'),
    variants,
    nice: process.getuid?.() === 0 ? -20 : null,
  };
}

async function main(cfg) {
  const { targets, lg, spec, mock } = await T.startVariants(cfg, {
    passthrough: cfg.passthrough,
    sidecar: cfg.sidecar,
    sidecarBase: cfg.sidecarBase,
  });
  if (cfg.siem !== undefined)
    for (const t of targets.filter((x) => x.adminHeaders !== undefined && x.controlPid === undefined)) {
      const r = await T.http('PUT', `${t.origin}/api/settings/siem`, {
        headers: t.adminHeaders,
        body: {
          destination: 'webhook',
          url: `${mock.origin}/v1/embeddings`,
          buffer_size: 100,
          severity_filter: cfg.siem,
        },
      });
      if (r.status !== 200)
        throw new Error(`${t.name}: SIEM export: HTTP ${r.status} ${r.text.slice(0, 200)}`);
    }
  const controlCpu = new Map();
  const cpu = new Map(targets.map((t) => [t.name, []]));
  for (let r = 0; r < cfg.rounds; r++) {
    const line = [];
    for (const t of targets.map((_, i) => targets[(i + r) % targets.length])) {
      // The control plane's CPU over the whole phase (warm-up included), per call of the phase.
      const c0 = t.controlPid ? T.procCpuUs(t.controlPid) : null;
      const s = await lg.call('saturate', {
        ...spec(t),
        connections: 50,
        warmupS: 1,
        durationS: cfg.durationS,
      });
      cpu.get(t.name).push(s.serverCpuUsPerReq);
      if (c0 !== null) {
        const per = Math.round(((T.procCpuUs(t.controlPid) - c0) / (s.rps * (cfg.durationS + 1))) * 10) / 10;
        controlCpu.set(t.name, [...(controlCpu.get(t.name) ?? []), per]);
        line.push(`${t.name}'s control plane ~${per} µs`);
      }
      line.push(
        `${t.name} ${s.serverCpuUsPerReq} µs (${Math.round(s.rps)} rps${s.errors || s.non2xx ? ', errors!' : ''})`,
      );
    }
    T.log(`round ${r + 1}: ${line.join(', ')}`);
  }
  for (const [name, xs] of cpu)
    T.log(`${name}: median ${T.median(xs)} µs CPU per ${cfg.scenario} call (${xs.join(' / ')})`);
  for (const [name, xs] of controlCpu)
    T.log(
      `${name}'s control plane: median ~${Math.round(T.median(xs) * 10) / 10} µs CPU per call (${xs.join(' / ')})`,
    );
  await lg.call('exit').catch(() => {});
}

const cfg0 = parseArgs(process.argv.slice(2));
T.runBench(main, cfg0, { nice: cfg0.nice });
