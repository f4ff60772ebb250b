import { sign as cryptoSign, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFileSync, realpathSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import { ChainLog, type ChainLogOptions } from '../../src/audit/chain-log.js';
import type { SealSigner, SigningKeyDocument } from '../../src/audit/types.js';
import {
  keyIdFor,
  type NoteSigner,
  type NoteVerifier,
  noteVerifier,
  signNote,
  toBase64,
  toHex,
} from '../../src/core/chain/index.js';
import { openStore, type Store } from '../../src/store/db.js';

/** A seal signer for tests: Ed25519 from node:crypto, ML-DSA-65 from @noble, both in-process. */
export class TestSigner implements SealSigner {
  readonly name: string;
  readonly signers: NoteSigner[];
  readonly verifiers: NoteVerifier[];
  readonly #doc: SigningKeyDocument;
  /** Every body signed, in order. */
  readonly signed: string[] = [];
  /** Makes the next `sign` calls fail (a dead worker). */
  failing = false;
  /** Simulated signing latency (a worker thread answering later). */
  delayMs = 0;

  constructor(name = 'govgate-audit-test') {
    this.name = name;
    const ed = generateKeyPairSync('ed25519');
    const edPublic = rawEd25519(ed.publicKey);
    const pq = ml_dsa65.keygen();
    const edId = keyIdFor(name, 'ed25519', edPublic);
    const pqId = keyIdFor(name, 'ml-dsa-65', pq.publicKey);
    this.signers = [
      { name, keyId: edId, sign: (m) => new Uint8Array(cryptoSign(null, m, ed.privateKey)) },
      { name, keyId: pqId, sign: (m) => ml_dsa65.sign(m, pq.secretKey) },
    ];
    this.verifiers = [noteVerifier(name, 'ed25519', edPublic), noteVerifier(name, 'ml-dsa-65', pq.publicKey)];
    const created_at = new Date().toISOString();
    this.#doc = {
      algorithms: ['ed25519', 'ml-dsa-65'],
      keys: [
        {
          name,
          alg: 'ed25519',
          key_id: toHex(edId),
          public_key: toBase64(edPublic),
          status: 'active',
          created_at,
          retired_at: null,
        },
        {
          name,
          alg: 'ml-dsa-65',
          key_id: toHex(pqId),
          public_key: toBase64(pq.publicKey),
          status: 'active',
          created_at,
          retired_at: null,
        },
      ],
      instructions: ['test keys'],
    };
  }

  async sign(body: string): Promise<string> {
    if (this.delayMs > 0) await sleep(this.delayMs);
    if (this.failing) throw new Error('signer unavailable');
    this.signed.push(body);
    return signNote(body, this.signers);
  }

  publicDocument(): SigningKeyDocument {
    return this.#doc;
  }

  async close(): Promise<void> {}
}

function rawEd25519(key: KeyObject): Uint8Array {
  const jwk = key.export({ format: 'jwk' });
  return new Uint8Array(Buffer.from(jwk.x as string, 'base64url'));
}

let shared: TestSigner | undefined;
/** One signer per test process (ML-DSA key generation is not free). */
export function testSigner(): TestSigner {
  shared ??= new TestSigner();
  return shared;
}

export interface TempLog {
  readonly dir: string;
  store: Store;
  log: ChainLog;
  /** Closes log and store and opens both again on the same directory. */
  reopen(opts?: Partial<ChainLogOptions>): Promise<void>;
  close(): Promise<void>;
}

/** A ChainLog on a fresh store in a temp directory. */
export function tempLog(opts: Partial<ChainLogOptions> = {}, signer: SealSigner = testSigner()): TempLog {
  const dir = tempDir('govgate-audit-');
  const make = (o: Partial<ChainLogOptions>): { store: Store; log: ChainLog } => {
    const store = openStore(join(dir, 'data'));
    const log = new ChainLog(store, signer, { dataDir: join(dir, 'data'), rotationMaxMb: 100, ...o });
    return { store, log };
  };
  const first = make(opts);
  const h: TempLog = {
    dir,
    store: first.store,
    log: first.log,
    async reopen(o = opts) {
      await h.log.close();
      await h.store.close();
      const next = make(o);
      h.store = next.store;
      h.log = next.log;
    },
    async close() {
      await h.log.close();
      await h.store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return h;
}

import { orgLogFiles } from '../helpers/service.js';
import { tempDir } from '../helpers/tmp.js';

export { waitFor } from '../helpers/wait.js';

/** The stored seals of an org, oldest first (read straight from the store). */
export function storedSeals(
  store: Store,
  org: string,
): Array<{ seq: number; size: number; note: string; ts: string }> {
  const out: Array<{ seq: number; size: number; note: string; ts: string }> = [];
  for (const { value } of store.auditMeta.getRange({
    start: [org, 's', 0],
    end: [org, 's', Number.MAX_SAFE_INTEGER],
  }))
    out.push(value as { seq: number; size: number; note: string; ts: string });
  return out;
}

/** The chain files of an org, rotated ones oldest first, then the live one. */
export function chainFiles(h: TempLog, org: string): string[] {
  return orgLogFiles({ dataDir: realpathSync(h.dir) }, org);
}

/** What an org's JSONL files hold, concatenated. */
export const logText = (h: TempLog, org: string): string =>
  chainFiles(h, org)
    .map((f) => readFileSync(f, 'utf8'))
    .join('');

/** The org chain as the export writes it: what its JSONL files must hold. */
export const exportedText = (h: TempLog, org: string): string =>
  [...h.log.exportText(org)].map((l) => `${l}\n`).join('');
