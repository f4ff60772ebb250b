import { Worker } from 'node:worker_threads';

const WORKER_URL = new URL('./note-verify-worker.js', import.meta.url);

export type NoteCheck =
  | { readonly ok: true; readonly body: string }
  | { readonly ok: false; readonly message: string };

/** A public key a note must verify with (a registered sidecar log key). */
export interface NoteKey {
  readonly name: string;
  readonly alg: 'ed25519' | 'ml-dsa-65';
  readonly public_key: string;
}

interface Pending {
  readonly resolve: (r: NoteCheck) => void;
  readonly reject: (e: unknown) => void;
}

/**
 * Verifies signed notes (both signatures, Ed25519 and ML-DSA-65) in one worker thread, so the
 * control plane's event loop does not spend ~1.8 ms per sidecar seal. The worker starts on first
 * use and again after it dies (the requests it held are rejected); it does not keep the process
 * alive.
 */
export class NoteVerifyPool {
  #worker: Worker | undefined;
  #next = 1;
  readonly #pending = new Map<number, Pending>();
  #closed = false;

  verify(note: string, keys: readonly NoteKey[]): Promise<NoteCheck> {
    if (this.#closed) return Promise.reject(new Error('the note verifier is closed'));
    const worker = this.#start();
    const id = this.#next++;
    return new Promise<NoteCheck>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      if (this.#pending.size === 1) worker.ref();
      worker.postMessage({ id, note, keys });
    });
  }

  #start(): Worker {
    if (this.#worker !== undefined) return this.#worker;
    const worker = new Worker(WORKER_URL);
    worker.unref();
    worker.on('message', (m: { id: number; ok: boolean; body?: string; message?: string }) => {
      const p = this.#pending.get(m.id);
      if (p === undefined) return;
      this.#pending.delete(m.id);
      if (this.#pending.size === 0) worker.unref();
      p.resolve(
        m.ok ? { ok: true, body: m.body as string } : { ok: false, message: m.message ?? 'invalid note' },
      );
    });
    const died = (err: Error): void => {
      if (this.#worker !== worker) return;
      this.#worker = undefined;
      for (const p of this.#pending.values()) p.reject(err);
      this.#pending.clear();
    };
    worker.on('error', died);
    worker.on('exit', (code) => died(new Error(`the note verifier exited (code ${code})`)));
    this.#worker = worker;
    return worker;
  }

  async close(): Promise<void> {
    this.#closed = true;
    const w = this.#worker;
    this.#worker = undefined;
    for (const p of this.#pending.values()) p.reject(new Error('the note verifier is closed'));
    this.#pending.clear();
    await w?.terminate();
  }
}
