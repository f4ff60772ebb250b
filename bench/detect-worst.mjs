// The detectors on text built to be slow to scan: every request text is scanned on the event loop
// before it is sent, so the worst cost per MiB bounds how long one large body can hold it.
//
//   node detect-worst.mjs [--baseline=DIR] [--mib=N] [--rounds=N]
//
// Each pattern is repeated to N MiB (default 1) and scanned with every detector on, the median of
// `rounds` runs (default 3) reported in ms per MiB, the slowest first. `--baseline=DIR` (a `dist/`
// of another commit) scans the same texts with that build too, run for run. Pin it to one core
// (`taskset -c 1`) on a shared machine.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const [k, v = 'true'] = a.replace(/^--/, '').split('=');
    return [k, v];
  }),
);
const mib = Number(args.mib ?? 1);
const rounds = Number(args.rounds ?? 3);
const here = resolve(import.meta.dirname, '../dist');
const builds = [['govgate', here]];
if (args.baseline) builds.push(['baseline', resolve(args.baseline)]);

const PATTERNS = [
  'The quick brown fox jumps over the lazy dog. ',
  // assignments to secret-looking names
  'pwd=',
  'token=',
  'secret:',
  'apikey:',
  'password=',
  'AccountKey=',
  'key=',
  'auth=',
  'Server=a;Password=',
  // markers, look-alikes and invisible characters
  '[[',
  '<|im_start|>',
  '### ',
  'ｉｇｎｏｒｅ ',
  '\u200b',
  '\u202e',
  'ign0re ',
  // digits, cards, phones, addresses, dates
  '0',
  '1234 ',
  '4111 1111 ',
  '+1 ',
  'DE89 ',
  '192.168.',
  'born 1990-01-01 ',
  // e-mail and key prefixes
  'a@',
  'a.b@c.d ',
  'sk-',
  'AKIA',
  'ghp_',
  'eyJa.eyJb.',
  '-----BEGIN ',
];

const detectors = [];
for (const [name, dir] of builds) {
  const { detect } = await import(pathToFileURL(`${dir}/src/core/detect/index.js`).href);
  detectors.push([name, detect]);
}
const opts = { pii: true, secrets: true, injection: true, unicode: true };
const size = Math.round(mib * 1024 * 1024);
const rows = [];
for (const pattern of PATTERNS) {
  const text = pattern.repeat(Math.ceil(size / pattern.length)).slice(0, size);
  const times = detectors.map(() => []);
  for (const [, detect] of detectors) detect(text.slice(0, 64 * 1024), opts); // warm-up
  for (let r = 0; r < rounds; r++) {
    detectors.forEach(([, detect], i) => {
      const t0 = performance.now();
      detect(text, opts);
      times[i].push((performance.now() - t0) / mib);
    });
  }
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  rows.push([JSON.stringify(pattern), ...times.map(median)]);
}
rows.sort((a, b) => b[1] - a[1]);
console.log(`| pattern | ${builds.map(([n]) => `${n} ms/MiB`).join(' | ')} |`);
console.log(`| --- | ${builds.map(() => '---:').join(' | ')} |`);
for (const [p, ...ms] of rows) console.log(`| \`${p}\` | ${ms.map((x) => x.toFixed(0)).join(' | ')} |`);
