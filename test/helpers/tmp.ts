import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const made: string[] = [];

/**
 * A fresh directory under the system's temp dir, removed when the test process exits, whatever
 * the test did with it (a service closed with its data kept, a test that failed half-way).
 */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  if (made.length === 0)
    process.once('exit', () => {
      for (const d of made) rmSync(d, { recursive: true, force: true });
    });
  made.push(dir);
  return dir;
}
