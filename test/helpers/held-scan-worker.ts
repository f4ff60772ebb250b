// A scan worker for ScanPool tests: each job is announced by a line in `started` (the characters
// of its texts) in the directory HELD_SCAN_DIR names, and scanned only once the number in
// `released` there counts it; what the worker holds is decided by the test (held-scans.ts), not
// by how slow a text is to scan. Files, not a broadcast channel: messages posted to a worker's
// BroadcastChannel were now and then never delivered under load.
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type DetectOptions, detect } from '../../src/core/detect/index.js';
import { serveJobs } from '../../src/util/job-worker.js';

const dir = process.env.HELD_SCAN_DIR ?? '';
let jobs = 0;

/** Jobs the test let go; all of them once its directory is gone (the test is over). */
function released(): number {
  try {
    return Number(readFileSync(join(dir, 'released'), 'utf8')) || 0;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

serveJobs(async (job) => {
  const { texts, opts } = job as { texts: readonly string[]; opts: DetectOptions };
  const mine = ++jobs;
  appendFileSync(join(dir, 'started'), `${texts.reduce((n, t) => n + t.length, 0)}\n`);
  while (released() < mine) await sleep(2);
  return texts.map((text) => (text.length === 0 ? null : detect(text, opts)));
});
