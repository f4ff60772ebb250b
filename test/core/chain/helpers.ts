import * as ed from '@noble/ed25519';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import {
  type ChainEvent,
  checkpointOrigin,
  ERASURE_EVENT_TYPE,
  type EventDraft,
  erasePersonal,
  erasureDetails,
  formatCheckpoint,
  GENESIS,
  keyIdFor,
  leafHash,
  linkEvent,
  MerkleBuilder,
  type NoteSigner,
  type NoteVerifier,
  personalField,
  type SealRecord,
  signNote,
} from '../../../src/core/chain/index.js';

export interface TestKeys {
  signers: NoteSigner[];
  verifiers: NoteVerifier[];
}

/** Deterministic Ed25519 + ML-DSA-65 key pairs named `name`, from a one-byte seed. */
export function makeKeys(name: string, seed: number): TestKeys {
  const edSecret = new Uint8Array(32).fill(seed);
  const edPublic = ed.getPublicKey(edSecret);
  const pq = ml_dsa65.keygen(new Uint8Array(32).fill(seed + 1));
  const edId = keyIdFor(name, 'ed25519', edPublic);
  const pqId = keyIdFor(name, 'ml-dsa-65', pq.publicKey);
  return {
    signers: [
      { name, keyId: edId, sign: (m) => ed.sign(m, edSecret) },
      { name, keyId: pqId, sign: (m) => ml_dsa65.sign(m, pq.secretKey, { extraEntropy: false }) },
    ],
    verifiers: [
      { name, keyId: edId, alg: 'ed25519', publicKey: edPublic },
      { name, keyId: pqId, alg: 'ml-dsa-65', publicKey: pq.publicKey },
    ],
  };
}

let cachedKeys: TestKeys | undefined;
/** The org key pair every chain test uses (ML-DSA key generation is not free). */
export function orgKeys(): TestKeys {
  cachedKeys ??= makeKeys('govgate/org_test', 7);
  return cachedKeys;
}

export const ORG = 'org_test';
export const ORIGIN = checkpointOrigin(ORG);

export type Line = { kind: 'event'; event: ChainEvent } | { kind: 'seal'; seal: SealRecord };

export function draft(seq: number, extra: Partial<EventDraft> = {}): EventDraft {
  return {
    id: `ae_${seq.toString().padStart(6, '0')}`,
    org_id: ORG,
    seq,
    ts: new Date(Date.UTC(2025, 0, 1, 0, 0, seq)).toISOString(),
    event_type: 'llm.call',
    agent_id: 'agent-7',
    session_id: 'sess-1',
    task_id: null,
    pipeline_id: `pl_${seq}`,
    behavior_type: 'LLM_CALL',
    outcome: 'allow',
    reason: null,
    rule_id: null,
    provider: 'mock',
    model: 'mock-echo',
    usage: { prompt_tokens: 12, completion_tokens: 30, total_tokens: 42 },
    cost: 0.00042,
    detections: [],
    details: { latency_ms: 12 + seq },
    personal: null,
    origin: null,
    ...extra,
  };
}

const sealCache = new WeakMap<TestKeys, Map<string, string>>();
/** Signs a checkpoint body with both keys (memoised: ML-DSA signing costs milliseconds). */
export function sealNote(body: string, keys: TestKeys = orgKeys()): string {
  let cache = sealCache.get(keys);
  if (cache === undefined) {
    cache = new Map();
    sealCache.set(keys, cache);
  }
  const hit = cache.get(body);
  if (hit !== undefined) return hit;
  const note = signNote(body, keys.signers);
  cache.set(body, note);
  return note;
}

export interface ChainSpec {
  n: number;
  /** Cut a seal after these seqs. */
  sealAt: readonly number[];
  /** Seqs whose events carry personal fields. */
  personalAt?: readonly number[];
  /** Seqs whose personal fields were erased (an erasure event is appended after `n`). */
  erasedAt?: readonly number[];
  /** Seal after the erasure event too. */
  sealTail?: boolean;
}

export interface BuiltChain {
  lines: Line[];
  events: ChainEvent[];
  seals: SealRecord[];
  tree: MerkleBuilder;
}

/** Builds an honest chain (with seals inline right after the event they end at). */
export function buildChain(spec: ChainSpec): BuiltChain {
  const tree = new MerkleBuilder();
  const lines: Line[] = [];
  const events: ChainEvent[] = [];
  const seals: SealRecord[] = [];
  const personalAt = new Set(spec.personalAt ?? []);
  const sealAt = new Set(spec.sealAt);
  let prev = GENESIS;
  let saltN = 0;
  const erased = (spec.erasedAt ?? []).filter((s) => personalAt.has(s));
  const total = spec.n + (erased.length > 0 ? 1 : 0);
  for (let seq = 1; seq <= total; seq++) {
    let d: EventDraft;
    if (seq > spec.n) {
      d = draft(seq, {
        event_type: ERASURE_EVENT_TYPE,
        details: erasureDetails(
          'er_1',
          erased.map((s) => ({ event_id: draft(s).id, fields: ['end_user', 'prompt'] })),
        ),
      });
    } else if (personalAt.has(seq)) {
      d = draft(seq, {
        personal: {
          end_user: personalField('end_user', `user-${seq}@example.com`, `salt-${saltN++}`),
          prompt: personalField('prompt', { text: `hello ${seq}`, n: seq }, `salt-${saltN++}`),
        },
      });
    } else {
      d = draft(seq);
    }
    const e = linkEvent(prev, d);
    prev = e.hash;
    tree.push(leafHash(e.hash));
    events.push(e);
    lines.push({ kind: 'event', event: e });
    if (sealAt.has(seq) || (seq === total && spec.sealTail === true)) {
      const body = formatCheckpoint({ origin: ORIGIN, size: seq, rootHash: tree.root(), head: e.hash });
      const seal: SealRecord = { seq: seals.length + 1, size: seq, note: sealNote(body) };
      seals.push(seal);
      lines.push({ kind: 'seal', seal });
    }
  }
  // Erasure happens after the fact: tombstone in place; hashes (and seals) stay valid.
  for (const line of lines) {
    if (line.kind === 'event' && line.event.personal !== null && erased.includes(line.event.seq)) {
      line.event.personal = erasePersonal(line.event.personal);
    }
  }
  return { lines, events, seals, tree };
}

export function clone<T>(x: T): T {
  return JSON.parse(JSON.stringify(x)) as T;
}

/** Feeds lines to a fresh verifier via a JSON round trip (as the CLI reads a JSONL file). */
export function feed(
  verifier: { pushEvent(e: unknown): void; pushSeal(s: SealRecord): void },
  lines: readonly Line[],
): void {
  for (const line of lines) {
    const copy = clone(line);
    if (copy.kind === 'event') verifier.pushEvent(copy.event);
    else verifier.pushSeal(copy.seal);
  }
}
