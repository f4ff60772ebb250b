/**
 * Worker-thread entry of NoteVerifyPool: checks signed notes (a sidecar's seals: ML-DSA-65 takes
 * ~1.8 ms in pure JS) off the control plane's event loop. In: `{id, note, keys}` (`keys`: the
 * public keys `{name, alg, public_key}` a note must verify with, both algorithms). Out: `{id,
 * ok: true, body}` or `{id, ok: false, message}`, in request order.
 */
import { parentPort } from 'node:worker_threads';
import { fromBase64 } from '../core/chain/bytes.js';
import { type NoteVerifier, noteVerifier, type SignatureAlg, verifyNote } from '../core/chain/note.js';

if (parentPort === null) throw new Error('note-verify-worker runs as a worker thread');
const port = parentPort;

interface Key {
  readonly name: string;
  readonly alg: SignatureAlg;
  readonly public_key: string;
}

/** Verifiers per key set (by its JSON): a log's seals keep coming with the same keys. */
const cache = new Map<string, NoteVerifier[]>();

function verifiersOf(keys: readonly Key[]): NoteVerifier[] {
  const id = JSON.stringify(keys);
  let v = cache.get(id);
  if (v === undefined) {
    v = [];
    for (const k of keys) {
      const pk = fromBase64(k.public_key);
      if (pk !== undefined) v.push(noteVerifier(k.name, k.alg, pk));
    }
    if (cache.size >= 1024) cache.clear();
    cache.set(id, v);
  }
  return v;
}

port.on('message', (message: unknown) => {
  const m = message as { id?: unknown; note?: unknown; keys?: unknown } | null;
  if (m === null || typeof m !== 'object' || typeof m.id !== 'number') return;
  try {
    if (typeof m.note !== 'string' || !Array.isArray(m.keys)) throw new Error('note and keys are required');
    const r = verifyNote(m.note, verifiersOf(m.keys as Key[]));
    port.postMessage(
      r.ok ? { id: m.id, ok: true, body: r.body } : { id: m.id, ok: false, message: r.message },
    );
  } catch (err) {
    port.postMessage({ id: m.id, ok: false, message: err instanceof Error ? err.message : String(err) });
  }
});
