/**
 * Worker-thread entry of WorkerSealSigner: ML-DSA-65 signing (~7 ms in pure JS) off the event
 * loop. Protocol: `workerData = {seed}` (the 32-byte keygen seed); it answers `{ready: true}` once
 * the key is derived. In: `{seed}` (a rotated key; applies to every later request) or
 * `{id, msg}`. Out: `{id, sig}` or `{id, error}`, in request order.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import { lowerThreadPriority } from '../util/thread-priority.js';

if (parentPort === null) throw new Error('mldsa-worker runs as a worker thread');
const port = parentPort;

// A seal is background work with a 250 ms budget: on a contended core (a sidecar limited to one
// CPU) the event loop preempts the ~5 ms signature instead of queueing requests behind it. Five
// steps leave the signer about a quarter of a core the loop keeps busy, which covers the seals of
// ten orgs at four a second.
lowerThreadPriority(5);

function secretKeyOf(seed: unknown): Uint8Array {
  if (!(seed instanceof Uint8Array) || seed.length !== 32) {
    throw new Error('the ML-DSA worker needs a 32-byte seed');
  }
  return ml_dsa65.keygen(seed).secretKey;
}

let secretKey = secretKeyOf((workerData as { seed?: unknown } | null)?.seed);

port.on('message', (message: unknown) => {
  const m = message as { id?: unknown; msg?: unknown; seed?: unknown } | null;
  if (m === null || typeof m !== 'object') return;
  if (m.seed !== undefined) {
    secretKey = secretKeyOf(m.seed);
    return;
  }
  if (typeof m.id !== 'number') return;
  if (!(m.msg instanceof Uint8Array)) {
    port.postMessage({ id: m.id, error: 'msg is not bytes' });
    return;
  }
  try {
    port.postMessage({ id: m.id, sig: ml_dsa65.sign(m.msg, secretKey) });
  } catch (err) {
    port.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) });
  }
});

port.postMessage({ ready: true });
