import { setImmediate as yieldTurn } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import type { IntegrityResult } from '../core/chain/index.js';
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

interface Job {
  resolve(lines: CheckedLine[]): void;
  reject(err: Error): void;
}

interface Slot {
  worker: Worker | null;
  readonly pending: Map<number, Job>;
}

/**
 * Integrity scans spread over worker threads. The chain is cut into chunks; workers check each
 * chunk's lines on their own (parsing, event hashes, commitments, seal signatures: nearly all of
 * a scan's cost) and this thread applies the results in chain order, so the verdict is the inline
 * scan's, while the event loop stays free and a multi-core machine scans several times faster.
 * Workers start on first use, are unref'd while idle, and are replaced if one dies.
 */
export class IntegrityPool {
  readonly #dataDir: string;
  readonly #chunkEvents: number;
  readonly #slots: Slot[];
  #nextId = 1;
  #closed = false;

  constructor(opts: IntegrityPoolOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1)
      throw new RangeError('workers is an integer ≥ 1');
    this.#dataDir = opts.dataDir;
    this.#chunkEvents = Math.max(1, Math.floor(opts.chunkEvents ?? 2_048));
    this.#slots = Array.from({ length: opts.workers }, () => ({ worker: null, pending: new Map() }));
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
        const p = this.#check(
          this.#slots[next % this.#slots.length] as Slot,
          chunks[next] as ScanChunk,
          keys,
        );
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

  #check(slot: Slot, chunk: ScanChunk, keys: string): Promise<CheckedLine[]> {
    if (this.#closed) return Promise.reject(new Error('the integrity pool is closed'));
    const worker = slot.worker ?? this.#spawn(slot);
    const id = this.#nextId++;
    return new Promise<CheckedLine[]>((resolve, reject) => {
      slot.pending.set(id, { resolve, reject });
      if (slot.pending.size === 1) worker.ref();
      worker.postMessage({ id, chunk, keys });
    });
  }

  #spawn(slot: Slot): Worker {
    const worker = new Worker(WORKER_URL, { workerData: { dataDir: this.#dataDir } });
    slot.worker = worker;
    worker.unref();
    worker.on('message', (m: unknown) => {
      if (slot.worker !== worker || m === null || typeof m !== 'object') return;
      const { id, lines, error } = m as { id?: unknown; lines?: unknown; error?: unknown };
      const job = typeof id === 'number' ? slot.pending.get(id) : undefined;
      if (job === undefined) return;
      slot.pending.delete(id as number);
      if (slot.pending.size === 0) worker.unref();
      if (Array.isArray(lines)) job.resolve(lines as CheckedLine[]);
      else job.reject(new Error(`integrity worker: ${typeof error === 'string' ? error : 'no result'}`));
    });
    const die = (err: Error): void => {
      if (slot.worker !== worker) return;
      slot.worker = null;
      const jobs = [...slot.pending.values()];
      slot.pending.clear();
      for (const j of jobs) j.reject(err);
      void worker.terminate();
    };
    worker.on('error', die);
    worker.on('exit', (code: number) => die(new Error(`the integrity worker exited (code ${code})`)));
    return worker;
  }

  /** Stops the workers (each closes its store handle first). */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(
      this.#slots.map(async (slot) => {
        const worker = slot.worker;
        if (worker === null) return;
        slot.worker = null;
        const jobs = [...slot.pending.values()];
        slot.pending.clear();
        for (const j of jobs) j.reject(new Error('the integrity pool is closed'));
        const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
        worker.postMessage({ close: true });
        const timer = setTimeout(() => void worker.terminate(), CLOSE_GRACE_MS);
        await exited;
        clearTimeout(timer);
      }),
    );
  }
}
