import type { RootDatabase } from 'lmdb';
import { ServiceError } from '../core/errors.js';

/**
 * Groups the writes queued during one event-loop turn into one synchronous LMDB transaction.
 * Each caller's promise resolves once its write is committed (visible to readers and safe from a
 * process crash); the environment is fsynced on a timer (see `startSyncTimer`).
 */
export class BatchWriter {
  private queue: (() => void)[] = [];
  private waiters: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  private scheduled = false;
  private closed = false;

  constructor(
    private readonly root: RootDatabase,
    private readonly onCommit: () => void = () => {},
  ) {}

  /** Queues `write` (synchronous LMDB calls such as putSync) for the next commit. */
  enqueue(write: () => void): Promise<void> {
    if (this.closed) return Promise.reject(new ServiceError('unavailable', 'the store is closed'));
    this.queue.push(write);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
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
    }
    this.onCommit();
    for (const w of waiters) w.resolve();
  };
}
