import { parentPort, type TransferListItem, Worker } from 'node:worker_threads';

/**
 * What a job's caller may go away through: a server response (`ServerResponse`) or a provider's
 * `Cancellation` fits, so no AbortController is made per job.
 */
export interface JobCancel {
  readonly aborted: boolean;
  onAbort(listener: () => void): void;
}

/** A job dropped before the worker started it: its caller went away (JobCancel) meanwhile. */
export class JobDropped extends Error {
  override readonly name = 'JobDropped';
}

export interface JobWorkerOptions {
  /** Passed to the worker thread. */
  readonly workerData?: unknown;
  /**
   * Jobs handed to the worker at once (default: all). Jobs past it wait on this side, where one
   * whose caller goes away can still be dropped: once posted, a job is the worker's, and its copy
   * of the job is held there until it runs. One keeps the worker busy at the cost of one
   * message's round trip between jobs.
   */
  readonly maxPosted?: number;
}

interface Waiting {
  job: unknown;
  transfer: readonly TransferListItem[] | undefined;
  resolve(v: unknown): void;
  reject(e: Error): void;
}

/**
 * One worker thread that runs jobs posted to it and answers each by id. It starts on first use,
 * is unref'd while idle (an idle worker never keeps the process alive), and is replaced on the
 * next job if it dies; a death fails the jobs it held, so a caller never waits forever.
 *
 * Protocol (see `serveJobs` for the worker's side): in `{id, job}`, out `{id, result}` or
 * `{id, error}`; `{close: true}` asks the worker to release what it holds and exit.
 */
export class JobWorker {
  readonly #url: URL;
  readonly #name: string;
  readonly #workerData: unknown;
  readonly #maxPosted: number;
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  /** Jobs not posted yet (past maxPosted), first come first served. */
  readonly #waiting: Waiting[] = [];
  #worker: Worker | null = null;
  #nextId = 1;
  #closed = false;

  /** `name` appears in errors ("the scan worker exited …"). */
  constructor(url: URL, name: string, opts: JobWorkerOptions = {}) {
    this.#url = url;
    this.#name = name;
    this.#workerData = opts.workerData;
    this.#maxPosted = opts.maxPosted ?? Number.POSITIVE_INFINITY;
  }

  /** Jobs asked for and not yet answered: waiting on this side, posted, or running. */
  get pending(): number {
    return this.#pending.size + this.#waiting.length;
  }

  /**
   * Runs one job; rejects if the worker answers with an error, dies, or the worker is closed.
   * With `cancel`, a job its caller leaves before the worker took it is dropped: it rejects with
   * JobDropped, and nothing holds the job any more. A job the worker took runs to its end.
   */
  run<T>(
    job: unknown,
    opts: { transfer?: readonly TransferListItem[]; cancel?: JobCancel } = {},
  ): Promise<T> {
    if (this.#closed) return Promise.reject(new Error(`the ${this.#name} worker is closed`));
    const cancel = opts.cancel;
    if (cancel?.aborted) return Promise.reject(this.#dropped());
    return new Promise<T>((resolve, reject) => {
      const w: Waiting = { job, transfer: opts.transfer, resolve: resolve as (v: unknown) => void, reject };
      if (this.#pending.size < this.#maxPosted) {
        this.#post(w);
        return;
      }
      this.#waiting.push(w);
      cancel?.onAbort(() => {
        const at = this.#waiting.indexOf(w);
        if (at === -1) return; // posted (or failed) meanwhile: the worker's now
        this.#waiting.splice(at, 1);
        w.reject(this.#dropped());
      });
    });
  }

  #dropped(): JobDropped {
    return new JobDropped(`the ${this.#name} job was dropped before it started: its caller went away`);
  }

  #post(w: Waiting): void {
    const worker = this.#worker ?? this.#spawn();
    const id = this.#nextId++;
    this.#pending.set(id, { resolve: w.resolve, reject: w.reject });
    if (this.#pending.size === 1) worker.ref();
    worker.postMessage({ id, job: w.job }, w.transfer);
    // The worker has its copy: an abort listener still holding `w` must not keep the job alive.
    w.job = undefined;
    w.transfer = undefined;
  }

  /** Posts waiting jobs while there is room (after an answer, or a worker's death). */
  #postWaiting(): void {
    if (this.#closed) return;
    while (this.#pending.size < this.#maxPosted) {
      const w = this.#waiting.shift();
      if (w === undefined) return;
      this.#post(w);
    }
  }

  #spawn(): Worker {
    const worker = new Worker(this.#url, { workerData: this.#workerData });
    this.#worker = worker;
    worker.unref();
    worker.on('message', (m: unknown) => {
      if (this.#worker !== worker || m === null || typeof m !== 'object') return;
      const { id, result, error } = m as { id?: unknown; result?: unknown; error?: unknown };
      const job = typeof id === 'number' ? this.#pending.get(id) : undefined;
      if (job === undefined) return;
      this.#pending.delete(id as number);
      this.#postWaiting();
      if (this.#pending.size === 0) worker.unref();
      if (error === undefined) job.resolve(result);
      else job.reject(new Error(`${this.#name} worker: ${typeof error === 'string' ? error : 'failed'}`));
    });
    const die = (err: Error): void => {
      if (this.#worker !== worker) return;
      this.#worker = null;
      this.#failAll(err);
      void worker.terminate();
      // The jobs still waiting never reached the dead worker: a new one takes them.
      this.#postWaiting();
    };
    worker.on('error', die);
    worker.on('exit', (code: number) => die(new Error(`the ${this.#name} worker exited (code ${code})`)));
    return worker;
  }

  /** Fails the jobs posted to the worker (`waiting` too: those not posted yet). */
  #failAll(err: Error, waiting = false): void {
    const jobs: { reject(e: Error): void }[] = [...this.#pending.values()];
    this.#pending.clear();
    if (waiting) jobs.push(...this.#waiting.splice(0));
    for (const j of jobs) j.reject(err);
  }

  /** Fails the pending jobs and stops the worker: asked to exit, terminated after `graceMs`. */
  async close(graceMs = 2_000): Promise<void> {
    this.#closed = true;
    const worker = this.#worker;
    this.#failAll(new Error(`the ${this.#name} worker is closed`), true);
    if (worker === null) return;
    this.#worker = null;
    const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
    worker.postMessage({ close: true });
    const timer = setTimeout(() => void worker.terminate(), graceMs);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * The worker's side of JobWorker: answers each `{id, job}` with `handle(job)` or its error, and
 * on `{close: true}` awaits `onClose` and exits. `handle` may return a promise.
 */
export function serveJobs(handle: (job: unknown) => unknown, onClose?: () => Promise<void> | void): void {
  const port = parentPort;
  if (port === null) throw new Error('serveJobs runs in a worker thread');
  port.on('message', (message: unknown) => {
    const m = message as { id?: unknown; job?: unknown; close?: unknown } | null;
    if (m === null || typeof m !== 'object') return;
    if (m.close === true) {
      void Promise.resolve(onClose?.()).finally(() => port.close());
      return;
    }
    if (typeof m.id !== 'number') return;
    const id = m.id;
    const fail = (err: unknown): void =>
      port.postMessage({ id, error: err instanceof Error ? err.message : String(err) });
    try {
      const out = handle(m.job);
      if (out instanceof Promise) out.then((result) => port.postMessage({ id, result }), fail);
      else port.postMessage({ id, result: out });
    } catch (err) {
      fail(err);
    }
  });
}
