/**
 * Worker-thread entry of IntegrityPool: checks chunks of an org chain (`checkChunk`: parsing,
 * event hashes, personal commitments, seal signatures) straight from the shared LMDB store, so
 * the thread applying them in order does little more than link and Merkle work.
 * Protocol: `workerData = {dataDir}`. In: `{id, chunk, keys}` (`keys`: the signing-key document as
 * JSON), answered `{id, lines}` or `{id, error}`; `{close: true}` closes the store and exits.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { NoteVerifier } from '../core/chain/index.js';
import { openStore } from '../store/db.js';
import { lowerThreadPriority } from '../util/thread-priority.js';
import { ChainReader } from './chain-reader.js';
import { checkChunk, type ScanChunk, VerifiedSignatures, verifiersFor } from './integrity.js';
import type { SigningKeyDocument } from './types.js';

if (parentPort === null) throw new Error('integrity-worker runs as a worker thread');
const port = parentPort;

// A scan is background work: this thread (not the process) runs 10 steps nicer than the event
// loop, which wins the CPU whenever both want it.
lowerThreadPriority(10);
const store = openStore((workerData as { dataDir: string }).dataDir);
const reader = new ChainReader(store);
// Seal signatures verified here are remembered across scans, as on the main thread.
const memo = new VerifiedSignatures();
let keysText = '';
let verifiers: NoteVerifier[] = [];

port.on('message', (message: unknown) => {
  const m = message as { id?: unknown; chunk?: ScanChunk; keys?: unknown; close?: unknown } | null;
  if (m === null || typeof m !== 'object') return;
  if (m.close === true) {
    void store.close().finally(() => port.close());
    return;
  }
  if (typeof m.id !== 'number' || m.chunk === undefined || typeof m.keys !== 'string') return;
  try {
    if (m.keys !== keysText) {
      verifiers = verifiersFor(JSON.parse(m.keys) as SigningKeyDocument, memo);
      keysText = m.keys;
    }
    // Read what is committed now: this thread never writes, so lmdb would otherwise keep serving
    // the snapshot of its previous read.
    store.root.resetReadTxn();
    port.postMessage({ id: m.id, lines: checkChunk(reader, m.chunk, verifiers) });
  } catch (err) {
    port.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) });
  }
});
