// Runs the compiled tap test files, each in its own node process, a few at a time, and prints
// tap's own summary line at the end: `# { total: N, pass: P, fail: F }` (what .ci/run reads).
//
//   node scripts/run-tests.mjs [file-or-dir …]        (default: dist/test)
//
// Why not the `tap` runner: on Node 20 it starts every test process with
// `--import @tapjs/processinfo`, whose module hooks run off-thread for every module the test and
// its workers load, coverage off or not: measured here, +1.7 s of CPU per test file (3.6 s
// against 1.9 s for one gateway test), about half of a CI run. The files are ordinary tap tests
// and still run alone with `npx tap FILE` or `node FILE`.
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, relative } from 'node:path';

const TIMEOUT_MS = 120_000;
const JOBS = Math.max(1, Number(process.env.TEST_JOBS) || availableParallelism());

function testFiles(paths) {
  const out = [];
  for (const p of paths) {
    if (statSync(p).isDirectory()) {
      for (const f of readdirSync(p, { recursive: true }))
        if (String(f).endsWith('.test.js') && !String(f).includes('fixtures')) out.push(join(p, String(f)));
    } else out.push(p);
  }
  return out.sort();
}

/** The counts of the `# { total: …, pass: …, fail: … }` line a tap test prints as it ends. */
function summaryOf(text) {
  const lines = text.trimEnd().split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    const m = /^# \{ total: (\d+)(.*)\}$/.exec(lines[i]);
    if (!m) continue;
    const num = (k) => Number(new RegExp(`${k}: (\\d+)`).exec(m[2])?.[1] ?? 0);
    return { total: Number(m[1]), pass: num('pass'), fail: num('fail') };
  }
  return undefined;
}

/** The process groups of the tests running now: an interrupted run stops them too. */
const running = new Set();
for (const signal of ['SIGINT', 'SIGTERM'])
  process.on(signal, () => {
    for (const pid of running)
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {}
    process.exit(130);
  });

function run(file) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    // Its own process group: a timeout stops whatever the test started too.
    const child = spawn(process.execPath, ['--enable-source-maps', file], {
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
      // tap's own limit (30 s a test by default) cut long files short when the machine was busy
      // (two flakes in one session); this runner's limit per file bounds every file instead.
      env: { ...process.env, TAP_COLOR: '0', TAP_TIMEOUT: process.env.TAP_TIMEOUT ?? '110' },
    });
    running.add(child.pid);
    const chunks = [];
    child.stdout.on('data', (c) => chunks.push(c));
    child.stderr.on('data', (c) => chunks.push(c));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    }, TIMEOUT_MS);
    child.on('close', (code, signal) => {
      running.delete(child.pid);
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('utf8');
      resolve({ file, code, signal, timedOut, text, ms: performance.now() - t0, summary: summaryOf(text) });
    });
  });
}

const started = performance.now();
const files = testFiles(process.argv.length > 2 ? process.argv.slice(2) : ['dist/test']);
if (files.length === 0) {
  console.error('no test files');
  process.exit(1);
}
const totals = { total: 0, pass: 0, fail: 0 };
const failed = [];
let next = 0;
const indent = (text) => text.replace(/^/gm, '    ');
async function worker() {
  while (next < files.length) {
    const r = await run(files[next++]);
    const s = r.summary;
    // A file that ends without its summary, or not with exit 0, failed as a whole.
    const broken = s === undefined || r.code !== 0 || r.timedOut;
    const fail = (s?.fail ?? 0) + (broken && (s?.fail ?? 0) === 0 ? 1 : 0);
    totals.total += (s?.total ?? 0) + (fail > (s?.fail ?? 0) ? 1 : 0);
    totals.pass += s?.pass ?? 0;
    totals.fail += fail;
    const name = relative(process.cwd(), r.file);
    const secs = (r.ms / 1000).toFixed(1);
    if (fail === 0) {
      console.log(`ok   ${name} (${s.total} asserts, ${secs} s)`);
      continue;
    }
    failed.push(name);
    const why = r.timedOut
      ? `timed out after ${TIMEOUT_MS / 1000} s`
      : s === undefined
        ? `ended without a summary (exit ${r.code ?? r.signal})`
        : `${s.fail} failed`;
    console.log(`FAIL ${name} (${why}, ${secs} s)\n${indent(r.text)}`);
  }
}
await Promise.all(Array.from({ length: Math.min(JOBS, files.length) }, worker));
if (failed.length > 0) console.log(`\nfailed:\n${failed.map((f) => `  ${f}`).join('\n')}`);
console.log(`\n${files.length} files, ${JOBS} at a time`);
console.log(`# { total: ${totals.total}, pass: ${totals.pass}, fail: ${totals.fail} }`);
console.log(`# time=${Math.round(performance.now() - started)}ms`);
process.exitCode = totals.fail === 0 ? 0 : 1;
