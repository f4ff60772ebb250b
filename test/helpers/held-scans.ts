import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { tempDir } from './tmp.js';

/** The held scan worker's entry, for `new ScanPool(HELD_SCAN_WORKER)` or `startService`. */
export const HELD_SCAN_WORKER = new URL('./held-scan-worker.js', import.meta.url);

/**
 * The test's side of the held scan worker (held-scan-worker.ts): the jobs it took (their
 * characters, in order), a wait for the n-th, and `release(n)` to let n more be scanned. Made
 * before the pool's worker starts: the worker finds its directory in its environment.
 */
export interface HeldScans {
  readonly started: readonly number[];
  startedCount(n: number): Promise<void>;
  release(n?: number): void;
  close(): void;
}

export function heldScans(): HeldScans {
  const dir = tempDir('govgate-held-scan-');
  writeFileSync(join(dir, 'started'), '');
  writeFileSync(join(dir, 'released'), '0');
  process.env.HELD_SCAN_DIR = dir;
  let released = 0;
  const started = (): number[] =>
    readFileSync(join(dir, 'started'), 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map(Number);
  return {
    get started() {
      return started();
    },
    async startedCount(n) {
      while (started().length < n) await sleep(2);
    },
    release(n = 1) {
      released += n;
      writeFileSync(join(dir, 'released'), String(released));
    },
    close: () => rmSync(dir, { recursive: true, force: true }),
  };
}
