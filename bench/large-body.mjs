// Ordinary calls while another client sends large bodies built to be slow to scan: what one
// tenant's 2 MiB worst-case prompts cost everybody else's latency, per govgate build.
//
//   node large-body.mjs [--variants='NAME=CLI;…'] [--rounds=2] [--duration=10] [--mib=2] [--rate=50] [--answer]
//
// With --answer the large side is the provider's instead: the other client's calls are small, and
// each answer is streamed as one SSE event of `mib` MiB of full-width letters (the mock's
// `gpt-slow-stream-N`), what an org whose provider answers so costs everybody else.
//
// Each variant (a govgate CLI; empty: this checkout's dist/src/cli.js) runs in turn on CPU 1 with
// the mock upstream on CPU 0. For `duration` seconds one client sends chat calls whose prompt is
// `mib` MiB of full-width letters (the detectors' slowest text, bench/detect-worst.mjs), one after
// the other, while another sends ordinary 1 KB calls at `rate` per second (open loop: each is due
// at its time, whether or not the one before answered). Reported: the ordinary calls' latency
// (p50, p99, max, from their due time) and how many large calls completed. Bounded: the run
// stops after rounds × variants × (duration + 15 s) at the most.
import { Pool } from 'undici';
import * as T from './targets.mjs';

const { flags, num } = T.parseFlags(process.argv.slice(2));
const rounds = Math.max(1, Math.round(num('rounds', 2)));
const durationS = num('duration', 10);
const mib = num('mib', 2);
const rate = num('rate', 50);
const variants = (flags.get('variants') ?? 'govgate=')
  .split(';')
  .filter(Boolean)
  .map((v) => {
    const i = v.indexOf('=');
    return { name: i < 0 ? v : v.slice(0, i), cli: (i < 0 ? '' : v.slice(i + 1)) || T.GOVGATE_CLI };
  });

const pin = T.hasTaskset();
if (pin) T.pinSelf(0);
process.on('SIGINT', () => T.stopAll().then(() => process.exit(130)));
process.on('SIGTERM', () => T.stopAll().then(() => process.exit(143)));

const small = JSON.stringify({
  model: 'gpt-4o-mini',
  messages: [
    { role: 'system', content: T.SYSTEM },
    { role: 'user', content: T.USER },
  ],
});
const slowText = 'ｉｇｎｏｒｅ '
  .repeat(Math.ceil((mib * 1024 * 1024) / 7 / 3))
  .slice(0, Math.floor((mib * 1024 * 1024) / 3));
const answer = flags.has('answer');
const large = answer
  ? JSON.stringify({
      model: `gpt-slow-stream-${mib}`,
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
    })
  : JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: slowText }] });

async function phase(target) {
  const pool = new Pool(target.origin, { connections: 8, pipelining: 1 });
  let refused;
  const call = async (body) => {
    const res = await pool.request({ path: target.path, method: 'POST', headers: target.headers, body });
    const text = await res.body.text();
    if (res.statusCode !== 200) refused ??= `${res.statusCode} ${text.slice(0, 200)}`;
    return res.statusCode;
  };
  for (let i = 0; i < 20; i++) await call(small); // warm-up
  const end = performance.now() + durationS * 1000;
  let largeDone = 0;
  const largeMs = [];
  const attacker = (async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      const status = await call(large);
      if (status === 200) largeDone++;
      largeMs.push(performance.now() - t0);
    }
  })();
  const latencies = [];
  const pending = [];
  const t0 = performance.now();
  for (let i = 0; ; i++) {
    const due = t0 + (i * 1000) / rate;
    if (due >= end) break;
    const wait = due - performance.now();
    if (wait > 0) await T.sleep(wait);
    pending.push(
      call(small).then(
        () => latencies.push(performance.now() - due),
        () => latencies.push(Number.POSITIVE_INFINITY),
      ),
    );
  }
  await Promise.race([Promise.all([attacker, ...pending]), T.sleep(15_000)]);
  await pool.close();
  if (refused !== undefined) T.log(`${target.name}: a call was refused: ${refused}`);
  latencies.sort((a, b) => a - b);
  largeMs.sort((a, b) => a - b);
  return {
    calls: latencies.length,
    p50: T.percentile(latencies, 0.5),
    p99: T.percentile(latencies, 0.99),
    max: latencies.at(-1),
    large: largeDone,
    largeP50: T.percentile(largeMs, 0.5),
  };
}

const mock = await T.startMock(pin ? 0 : undefined);
const results = new Map(variants.map((v) => [v.name, []]));
try {
  for (let r = 1; r <= rounds; r++) {
    for (const v of variants) {
      const target = await T.startGovgate(mock, pin ? 1 : undefined, { cli: v.cli, name: v.name });
      try {
        const res = await phase(target);
        results.get(v.name).push(res);
        T.log(
          `round ${r} ${v.name}: ordinary calls ${res.calls}, p50 ${res.p50.toFixed(2)} ms, p99 ${res.p99.toFixed(1)} ms, ` +
            `max ${res.max.toFixed(1)} ms; large calls done ${res.large} (p50 ${res.largeP50?.toFixed(0)} ms)`,
        );
      } finally {
        await T.stopChild(target.child);
      }
    }
  }
} finally {
  await T.stopAll();
}
const med = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
};
console.log(
  `\n| variant | ordinary p50 ms | p99 ms | max ms | large ${answer ? 'streamed answers' : 'calls'} (${mib} MiB) done per round |`,
);
console.log('| --- | --- | --- | --- | --- |');
for (const [name, rs] of results) {
  console.log(
    `| ${name} | ${med(rs.map((x) => x.p50)).toFixed(2)} | ${med(rs.map((x) => x.p99)).toFixed(1)} | ` +
      `${med(rs.map((x) => x.max)).toFixed(1)} | ${rs.map((x) => x.large).join(' / ')} |`,
  );
}
