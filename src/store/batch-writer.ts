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
  private waiters: { resolve: () => void; reject: (e: unknown) => void }[] = [];
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
    if (!this.scheduled) {
      this.scheduled = true;
      if (this.now() - this.lastCommitEnd >= this.idleMs) queueMicrotask(this.flush);
      else setImmediate(this.flush);
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
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
    if (queue.length === 0) return;
    this.queue = [];
    this.waiters = [];
    try {
      this.root.transactionSync(() => {
        for (const w of queue) w();
      });
    } catch (err) {
      for (const w of waiters) w.reject(err);
      return;
    } finally {
      this.lastCommitEnd = this.now();
    }
    this.onCommit();
    for (const w of waiters) w.resolve();
  };
}
