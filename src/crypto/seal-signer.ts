import { sign as edSign } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import type { SealSigner, SigningKeyDocument } from '../audit/types.js';
import { assembleNote } from '../core/chain/index.js';
import type { AuditKeys } from './audit-keys.js';

const DEFAULT_WORKER_URL = new URL('./mldsa-worker.js', import.meta.url);
const MAX_THREADS = 16;
const encoder = new TextEncoder();

export interface SealSignerOptions {
  /** ML-DSA worker threads (default 1, ~140 signatures/s each); requests go to the least busy. */
  readonly threads?: number;
  /** The worker script (default: mldsa-worker.js beside this module); for tests and bundlers. */
  readonly workerUrl?: URL;
}

interface Pending {
  readonly resolve: (sig: Uint8Array) => void;
  readonly reject: (err: Error) => void;
}

interface Slot {
  worker: Worker | null;
  /** The AuditKeys generation the worker holds. */
  gen: number;
  readonly pending: Map<number, Pending>;
}

/**
 * Signs seal notes with the active audit keys: Ed25519 in-process (node:crypto, tens of µs),
 * ML-DSA-65 in worker threads so the ~7 ms of pure-JS lattice arithmetic never blocks the event
 * loop. Requests are pipelined and answered by id. A worker that dies fails its pending requests;
 * the next sign() starts a new one. A key rotation is picked up on the next sign().
 */
export class WorkerSealSigner implements SealSigner {
  private readonly slots: Slot[];
  private nextId = 1;
  private closed = false;

  private constructor(
    private readonly keys: AuditKeys,
    private readonly workerUrl: URL,
    threads: number,
  ) {
    this.slots = Array.from({ length: threads }, () => ({ worker: null, gen: -1, pending: new Map() }));
  }

  /** Starts the worker threads; resolves once each has derived its key. */
  static async start(keys: AuditKeys, opts: SealSignerOptions = {}): Promise<WorkerSealSigner> {
    const threads = opts.threads ?? 1;
    if (!Number.isInteger(threads) || threads < 1 || threads > MAX_THREADS) {
      throw new RangeError(`threads is an integer from 1 to ${MAX_THREADS}`);
    }
    const signer = new WorkerSealSigner(keys, opts.workerUrl ?? DEFAULT_WORKER_URL, threads);
    try {
      await Promise.all(signer.slots.map((slot) => whenReady(signer.spawn(slot))));
    } catch (err) {
      await signer.close();
      throw new Error(`the ML-DSA signing worker did not start: ${(err as Error).message}`, { cause: err });
    }
    return signer;
  }

  /** Signs `body` (a note text ending in a newline) and returns the complete signed note. */
  async sign(body: string): Promise<string> {
    if (this.closed) throw new Error('the seal signer is closed');
    const k = this.keys.active();
    const msg = encoder.encode(body);
    const edSig = edSign(null, msg, k.ed25519.privateKey);
    const mlSig = await this.requestMlDsa(msg);
    return assembleNote(body, [
      { name: k.ed25519.name, keyId: k.ed25519.keyId, signature: edSig },
      { name: k.mldsa.name, keyId: k.mldsa.keyId, signature: mlSig },
    ]);
  }

  publicDocument(): SigningKeyDocument {
    return this.keys.publicDocument();
  }

  /** Terminates the workers; pending sign() calls reject. */
  async close(): Promise<void> {
    this.closed = true;
    const stopping: Promise<number>[] = [];
    for (const slot of this.slots) {
      const worker = slot.worker;
      slot.worker = null;
      failAll(slot, new Error('the seal signer is closed'));
      if (worker !== null) stopping.push(worker.terminate());
    }
    await Promise.all(stopping);
  }

  /** Requests outstanding across the workers (for metrics). */
  get inFlight(): number {
    let n = 0;
    for (const slot of this.slots) n += slot.pending.size;
    return n;
  }

  private requestMlDsa(msg: Uint8Array): Promise<Uint8Array> {
    let slot = this.slots[0] as Slot;
    for (const s of this.slots) if (s.pending.size < slot.pending.size) slot = s;
    const worker = slot.worker ?? this.spawn(slot);
    const gen = this.keys.generation;
    if (slot.gen !== gen) {
      // Messages are handled in order: every request after this one uses the new key.
      worker.postMessage({ seed: this.keys.active().mldsa.seed });
      slot.gen = gen;
    }
    const id = this.nextId++;
    return new Promise<Uint8Array>((resolve, reject) => {
      slot.pending.set(id, { resolve, reject });
      if (slot.pending.size === 1) worker.ref();
      worker.postMessage({ id, msg });
    });
  }

  private spawn(slot: Slot): Worker {
    const worker = new Worker(this.workerUrl, { workerData: { seed: this.keys.active().mldsa.seed } });
    slot.worker = worker;
    slot.gen = this.keys.generation;
    worker.on('message', (m: unknown) => this.onMessage(slot, worker, m));
    worker.on('error', (err: Error) => this.onDeath(slot, worker, err));
    worker.on('exit', (code: number) =>
      this.onDeath(slot, worker, new Error(`the ML-DSA signing worker exited (code ${code})`)),
    );
    return worker;
  }

  private onMessage(slot: Slot, worker: Worker, message: unknown): void {
    if (slot.worker !== worker || message === null || typeof message !== 'object') return;
    const m = message as { id?: unknown; sig?: unknown; error?: unknown };
    if (typeof m.id !== 'number') return;
    const p = slot.pending.get(m.id);
    if (p === undefined) return;
    slot.pending.delete(m.id);
    if (slot.pending.size === 0) worker.unref();
    if (m.sig instanceof Uint8Array) p.resolve(m.sig);
    else
      p.reject(new Error(`ML-DSA signing failed: ${typeof m.error === 'string' ? m.error : 'no signature'}`));
  }

  private onDeath(slot: Slot, worker: Worker, err: Error): void {
    if (slot.worker !== worker) return;
    slot.worker = null;
    failAll(slot, err);
    void worker.terminate();
  }
}

function failAll(slot: Slot, err: Error): void {
  const pending = [...slot.pending.values()];
  slot.pending.clear();
  for (const p of pending) p.reject(err);
}

/** Resolves on the worker's `{ready: true}`; rejects if it fails or exits first. */
function whenReady(worker: Worker): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const done = (): void => {
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
      worker.unref();
    };
    const onMessage = (m: unknown): void => {
      if (m !== null && typeof m === 'object' && (m as { ready?: unknown }).ready === true) {
        done();
        resolve();
      }
    };
    const onError = (err: Error): void => {
      done();
      reject(err);
    };
    const onExit = (code: number): void => {
      done();
      reject(new Error(`exited with code ${code}`));
    };
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
  });
}
