import { parentPort, type TransferListItem, Worker } from 'node:worker_threads';

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
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  #worker: Worker | null = null;
  #nextId = 1;
  #closed = false;

  /** `name` appears in errors ("the scan worker exited …"). */
  constructor(url: URL, name: string, workerData?: unknown) {
    this.#url = url;
    this.#name = name;
    this.#workerData = workerData;
  }

  /** Jobs posted and not yet answered. */
  get pending(): number {
    return this.#pending.size;
  }

  /** Runs one job; rejects if the worker answers with an error, dies, or the worker is closed. */
  run<T>(job: unknown, transfer?: readonly TransferListItem[]): Promise<T> {
    if (this.#closed) return Promise.reject(new Error(`the ${this.#name} worker is closed`));
    const worker = this.#worker ?? this.#spawn();
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      if (this.#pending.size === 1) worker.ref();
      worker.postMessage({ id, job }, transfer);
    });
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
      if (this.#pending.size === 0) worker.unref();
      if (error === undefined) job.resolve(result);
      else job.reject(new Error(`${this.#name} worker: ${typeof error === 'string' ? error : 'failed'}`));
    });
    const die = (err: Error): void => {
      if (this.#worker !== worker) return;
      this.#worker = null;
      this.#failAll(err);
      void worker.terminate();
    };
    worker.on('error', die);
    worker.on('exit', (code: number) => die(new Error(`the ${this.#name} worker exited (code ${code})`)));
    return worker;
  }

  #failAll(err: Error): void {
    const jobs = [...this.#pending.values()];
    this.#pending.clear();
    for (const j of jobs) j.reject(err);
  }

  /** Fails the pending jobs and stops the worker: asked to exit, terminated after `graceMs`. */
  async close(graceMs = 2_000): Promise<void> {
    this.#closed = true;
    const worker = this.#worker;
    if (worker === null) return;
    this.#worker = null;
    this.#failAll(new Error(`the ${this.#name} worker is closed`));
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
