/**
 * Worker-thread entry of IntegrityPool: checks chunks of an org chain (`checkChunk`: parsing,
 * event hashes, personal commitments, seal signatures) straight from the shared LMDB store, so
 * the thread applying them in order does little more than link and Merkle work.
 * Protocol (serveJobs): `workerData = {dataDir}`; a job is `{chunk, keys}` (`keys`: the signing-key
 * document as JSON), answered with the chunk's checked lines; closing closes the store.
 */
import { isMainThread, workerData } from 'node:worker_threads';
import type { NoteVerifier } from '../core/chain/index.js';
import { openStore } from '../store/db.js';
import { serveJobs } from '../util/job-worker.js';
import { lowerThreadPriority } from '../util/thread-priority.js';
import { ChainReader } from './chain-reader.js';
import { checkChunk, type ScanChunk, VerifiedSignatures, verifiersFor } from './integrity.js';
import type { SigningKeyDocument } from './types.js';

if (isMainThread) throw new Error('integrity-worker runs as a worker thread');

// A scan is background work: this thread (not the process) runs 10 steps nicer than the event
// loop, which wins the CPU whenever both want it.
lowerThreadPriority(10);
const store = openStore((workerData as { dataDir: string }).dataDir);
const reader = new ChainReader(store);
// Seal signatures verified here are remembered across scans, as on the main thread.
const memo = new VerifiedSignatures();
let keysText = '';
let verifiers: NoteVerifier[] = [];

serveJobs(
  (job) => {
    const { chunk, keys } = job as { chunk: ScanChunk; keys: string };
    if (keys !== keysText) {
      verifiers = verifiersFor(JSON.parse(keys) as SigningKeyDocument, memo);
      keysText = keys;
    }
    // Read what is committed now: this thread never writes, so lmdb would otherwise keep serving
    // the snapshot of its previous read.
    store.root.resetReadTxn();
    return checkChunk(reader, chunk, verifiers);
  },
  () => store.close(),
);
