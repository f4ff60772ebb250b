import type { RootDatabase } from 'lmdb';
import { ServiceError } from '../core/errors.js';

export interface BatchWriterOptions {
  /** Called after each successful commit (the store marks itself dirty for its fsync timer). */
  readonly onCommit?: () => void;
  /**
   * A write queued when no commit ended in the last `idleMs` is committed as soon as the code
   * that queued it yields (a microtask), not at the end of the event-loop turn: at low rates
   * there is nothing to group it with, and the rest of the turn (e.g. the upstream client's own
   * bookkeeping) only delays the answer. Default 0.5 ms.
   */
  readonly idleMs?: number;
  readonly now?: () => number;
}

interface Waiter {
  resolve: () => void;
  reject: (e: unknown) => void;
}

/**
 * Groups the writes queued during one event-loop turn into one synchronous LMDB transaction.
 * Each caller's promise resolves once its write is committed (visible to readers and safe from a
 * process crash); the environment is fsynced on a timer (see `startSyncTimer`). An idle writer
 * commits a write when its caller yields instead (see `idleMs`): writes queued by the same
 * synchronous code still share that commit, and under load, when commits follow each other
 * closely, they group per turn.
 */
export class BatchWriter {
  private queue: (() => void)[] = [];
  private waiters: Waiter[] = [];
  private alone: Array<{ write: () => void; waiter: Waiter }> = [];
  private scheduled = false;
  private closed = false;
  private lastCommitEnd = Number.NEGATIVE_INFINITY;
  private readonly onCommit: () => void;
  private readonly idleMs: number;
  private readonly now: () => number;

  constructor(
    private readonly root: RootDatabase,
    opts: BatchWriterOptions = {},
  ) {
    this.onCommit = opts.onCommit ?? (() => {});
    this.idleMs = opts.idleMs ?? 0.5;
    this.now = opts.now ?? (() => performance.now());
  }

  /** Queues `write` (synchronous LMDB calls such as putSync) for the next commit. */
  enqueue(write: () => void): Promise<void> {
    if (this.closed) return Promise.reject(new ServiceError('unavailable', 'the store is closed'));
    this.queue.push(write);
    this.#schedule();
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /**
   * Queues `write` for a transaction of its own, committed right after the next grouped commit
   * (in the same flush, so it sees every write queued before it), and only if that commit
   * succeeded (else it is rejected with its error, unrun). Its failure rejects it alone: the
   * grouped writes are already committed. For background work (index and rollup flushes) that
   * must never be able to roll back the writes callers are waiting on.
   */
  enqueueAlone(write: () => void): Promise<void> {
    if (this.closed) return Promise.reject(new ServiceError('unavailable', 'the store is closed'));
    const done = new Promise<void>((resolve, reject) =>
      this.alone.push({ write, waiter: { resolve, reject } }),
    );
    this.#schedule();
    return done;
  }

  #schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    if (this.now() - this.lastCommitEnd >= this.idleMs) queueMicrotask(this.flush);
    else setImmediate(this.flush);
  }

  /** Commits what is queued and refuses further writes (touching a closed LMDB env crashes). */
  close(): void {
    this.flush();
    this.closed = true;
  }

  readonly flush = (): void => {
    this.scheduled = false;
    if (this.closed) return;
    const queue = this.queue;
    const waiters = this.waiters;
    const alone = this.alone;
    if (queue.length === 0 && alone.length === 0) return;
    this.queue = [];
    this.waiters = [];
    this.alone = [];
    let failed = false;
    let error: unknown;
    if (queue.length > 0) {
      try {
        this.root.transactionSync(() => {
          for (const w of queue) w();
        });
      } catch (err) {
        failed = true;
        error = err;
      } finally {
        this.lastCommitEnd = this.now();
      }
    }
    let committed = queue.length > 0 && !failed;
    const settled: Array<[Waiter, boolean, unknown]> = [];
    for (const { write, waiter } of alone) {
      if (failed) {
        settled.push([waiter, false, error]);
        continue;
      }
      try {
        this.root.transactionSync(write);
        committed = true;
        settled.push([waiter, true, undefined]);
      } catch (err) {
        settled.push([waiter, false, err]);
      } finally {
        this.lastCommitEnd = this.now();
      }
    }
    if (committed) this.onCommit();
    for (const w of waiters)
      if (failed) w.reject(error);
      else w.resolve();
    for (const [w, ok, err] of settled)
      if (ok) w.resolve();
      else w.reject(err);
  };
}
