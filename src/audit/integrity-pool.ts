import { setImmediate as yieldTurn } from 'node:timers/promises';
import type { IntegrityResult } from '../core/chain/index.js';
import { JobWorker } from '../util/job-worker.js';
import type { CheckedLine, IntegrityScan, ScanChunk } from './integrity.js';

const WORKER_URL = new URL('./integrity-worker.js', import.meta.url);
const CLOSE_GRACE_MS = 2_000;
/** Checked lines applied per event-loop turn (a few ms of work). */
const APPLY_STEP = 1_024;

export interface IntegrityPoolOptions {
  /** The store's data directory (the workers open the same LMDB environment). */
  readonly dataDir: string;
  /** Worker threads (≥ 1). */
  readonly workers: number;
  /** Events per chunk handed to a worker (default 2,048). */
  readonly chunkEvents?: number;
}

/**
 * Integrity scans spread over worker threads. The chain is cut into chunks; workers check each
 * chunk's lines on their own (parsing, event hashes, commitments, seal signatures: nearly all of
 * a scan's cost) and this thread applies the results in chain order, so the verdict is the inline
 * scan's, while the event loop stays free and a multi-core machine scans several times faster.
 * Workers start on first use, are unref'd while idle, and are replaced if one dies.
 */
export class IntegrityPool {
  readonly #chunkEvents: number;
  readonly #slots: JobWorker[];

  constructor(opts: IntegrityPoolOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1)
      throw new RangeError('workers is an integer ≥ 1');
    this.#chunkEvents = Math.max(1, Math.floor(opts.chunkEvents ?? 2_048));
    this.#slots = Array.from(
      { length: opts.workers },
      () => new JobWorker(WORKER_URL, 'integrity', { workerData: { dataDir: opts.dataDir } }),
    );
  }

  /**
   * Runs `scan` to the end; `keys` is the signing-key document as JSON. Rejects if a worker
   * fails. `chunkEvents` overrides the pool's chunk size for this scan.
   */
  async run(scan: IntegrityScan, keys: string, chunkEvents = this.#chunkEvents): Promise<IntegrityResult> {
    const chunks = scan.chunks(chunkEvents);
    const results: Array<Promise<CheckedLine[]> | undefined> = [];
    const ahead = this.#slots.length * 2; // chunks in flight: keeps every worker busy, memory bounded
    let next = 0;
    for (let i = 0; i < chunks.length; i++) {
      for (; next < chunks.length && next < i + ahead; next++) {
        const slot = this.#slots[next % this.#slots.length] as JobWorker;
        const p = slot.run<CheckedLine[]>({ chunk: chunks[next] as ScanChunk, keys });
        p.catch(() => {}); // awaited in order below; a later failure must not go unhandled meanwhile
        results[next] = p;
      }
      const lines = await (results[i] as Promise<CheckedLine[]>);
      results[i] = undefined;
      // Applied a slice at a time, yielding between slices: the event loop is never held long.
      for (let at = 0; at < lines.length; at += APPLY_STEP) {
        if (at > 0) await yieldTurn();
        scan.apply(lines, at, Math.min(at + APPLY_STEP, lines.length));
      }
    }
    return scan.result();
  }

  /** Stops the workers (each closes its store handle first). */
  async close(): Promise<void> {
    await Promise.all(this.#slots.map((slot) => slot.close(CLOSE_GRACE_MS)));
  }
}
