import {
  checkpointOrigin,
  GENESIS,
  isHash,
  leafHash,
  MerkleBuilder,
  type MerkleNode,
  type NodeReader,
  nodeHash,
} from '../core/chain/index.js';
import type { Store } from '../store/db.js';
import { BRIDGE_KIND, MAX_KEY, SEAL_KIND } from './layout.js';
import { PendingPostings } from './postings.js';
import { type Rollup, reviveRollup } from './rollups.js';
import type { AuditEvent, StoredSeal } from './types.js';

/** One minute or hour of overview counters being filled by the writer. */
export interface Bucket {
  readonly kind: string;
  readonly start: number;
  readonly rollup: Rollup;
  /** Bumped by every event counted: a write of an older version leaves the bucket dirty. */
  version: number;
}

/** The writes of one org gathered during one event-loop turn, committed in one transaction. */
export interface Batch {
  readonly events: AuditEvent[];
  /** The JSON text of each event (same order): the stored value and the JSONL line. */
  readonly json: string[];
  /** Newly complete Merkle nodes at `STORED_NODE_LEVEL` and above. */
  readonly nodes: MerkleNode[];
  promise: Promise<void>;
}

/**
 * The in-memory head of one org chain: the single writer's state. Everything the request path
 * needs to append (next seq, previous hash, Merkle compact range) is here, so an append does no
 * reads; it is loaded from the store the first time the org is seen.
 */
export interface OrgHead {
  readonly org: string;
  readonly origin: string;
  /** Last assigned seq (may be ahead of `committed`). */
  seq: number;
  hash: string;
  /** ts of the last event (ms); ts never goes backwards within a chain. */
  tsMs: number;
  readonly tree: MerkleBuilder;
  /** Last stored seal. */
  sealSeq: number;
  sealedSize: number;
  /** Size of the last cut seal, stored or in flight. */
  cutSize: number;
  /** Characters of the lines appended by this process, and their count at the last cut. */
  chars: number;
  cutChars: number;
  sealing: Promise<void> | undefined;
  timer: NodeJS.Timeout | undefined;
  /** After a failed seal, wait for the timer before cutting again. */
  backoff: boolean;
  batch: Batch | undefined;
  minute: Bucket | undefined;
  hour: Bucket | undefined;
  /** Buckets counting events the stored ones do not (written every `rollupFlushMs`). */
  readonly dirty: Set<Bucket>;
  /**
   * The org's rollup mark ([org, ROLLUP_MARK_KIND]: every event up to that seq is in the stored
   * buckets) when it is not stored yet; the org's next commit writes it.
   */
  markPending: number | undefined;
  /** Postings of the buffered indexes not stored yet (written with the rollups). */
  readonly pending: PendingPostings;
  /** Like `markPending`, for the postings mark ([org, POSTINGS_MARK_KIND]). */
  postingsMarkPending: number | undefined;
  /** Set when a commit failed: this head is dropped and reloaded from the store. */
  dead: boolean;
}

/**
 * Merkle nodes below this level are not stored: a node of level 1–3 covers at most 8 leaves and is
 * recomputed from its events' hashes (one short range read), which saves ~0.9 of a store write
 * per event at the cost of up to 15 extra event reads per proof.
 */
export const STORED_NODE_LEVEL = 4;

/** The event hash at the end of a stored event's JSON text (`…,"hash":"<64 hex>"}`), parsed only if not. */
function eventHashOf(raw: string): string | undefined {
  const tail = raw.slice(-75);
  if (tail.startsWith(',"hash":"') && tail.endsWith('"}')) {
    const h = tail.slice(9, 73);
    if (isHash(h)) return h;
  }
  const h = (JSON.parse(raw) as { hash?: unknown }).hash;
  return isHash(h) ? h : undefined;
}

/**
 * Reads Merkle nodes of an org from the store; low levels are recomputed from the events. Where
 * retention pruned a prefix (a `_chain_bridge` through seq K), the nodes of K's compact range are
 * stored at every level, and a low node starting in the pruned prefix is built from its children:
 * a proof for a kept event only needs nodes that are either one of those or straddle K.
 */
export function nodeReader(store: Store, org: string): NodeReader {
  const bridge = store.auditMeta.get([org, BRIDGE_KIND]) as { bridged_to_seq?: unknown } | undefined;
  const pruned = typeof bridge?.bridged_to_seq === 'number' ? bridge.bridged_to_seq : 0;
  const read = (level: number, index: number): Uint8Array | undefined => {
    const width = 2 ** level;
    const first = index * width + 1;
    if (level >= STORED_NODE_LEVEL || first <= pruned) {
      const v: unknown = store.auditNodes.get([org, level, index]);
      if (v instanceof Uint8Array) return v;
      if (level >= STORED_NODE_LEVEL || level === 0) return undefined;
      const left = read(level - 1, 2 * index);
      const right = left === undefined ? undefined : read(level - 1, 2 * index + 1);
      return left === undefined || right === undefined ? undefined : nodeHash(left, right);
    }
    let layer: Uint8Array[] = [];
    for (const { key, value } of store.auditEvents.getRange({
      start: [org, first],
      end: [org, first + width],
    })) {
      if ((key as [string, number])[1] !== first + layer.length || typeof value !== 'string')
        return undefined;
      const h = eventHashOf(value);
      if (h === undefined) return undefined;
      layer.push(leafHash(h));
    }
    if (layer.length !== width) return undefined;
    while (layer.length > 1) {
      const up: Uint8Array[] = [];
      for (let i = 0; i < layer.length; i += 2)
        up.push(nodeHash(layer[i] as Uint8Array, layer[i + 1] as Uint8Array));
      layer = up;
    }
    return layer[0];
  };
  return read;
}

/** The (level, index) of each perfect subtree of a tree of `size` leaves, largest first. */
export function compactNodes(size: number): Array<{ level: number; index: number }> {
  const out: Array<{ level: number; index: number }> = [];
  let offset = 0;
  for (let level = 52; level >= 0; level--) {
    const width = 2 ** level;
    if (size - offset < width) continue;
    out.push({ level, index: offset / width });
    offset += width;
  }
  return out;
}

/** The compact range of a tree of `size` leaves: its perfect subtree roots, largest first. */
export function compactRange(size: number, read: NodeReader): Uint8Array[] {
  return compactNodes(size).map(({ level, index }) => {
    const node = read(level, index);
    if (node === undefined) throw new Error(`Merkle node (${level}, ${index}) is missing`);
    return node;
  });
}

/** The last seal stored for an org, if any. */
export function lastSeal(store: Store, org: string): StoredSeal | undefined {
  for (const { value } of store.auditMeta.getRange({
    start: [org, SEAL_KIND, MAX_KEY],
    end: [org, SEAL_KIND],
    reverse: true,
    limit: 1,
  })) {
    return value as StoredSeal;
  }
  return undefined;
}

/** The newest stored event of an org: its seq and JSON text. */
export function lastEvent(store: Store, org: string): { seq: number; json: string } | undefined {
  for (const { key, value } of store.auditEvents.getRange({
    start: [org, MAX_KEY],
    end: [org],
    reverse: true,
    limit: 1,
  })) {
    return { seq: (key as [string, number])[1], json: value as string };
  }
  return undefined;
}

/** Loads an org head from the store (a new org starts empty). */
export function loadHead(store: Store, org: string): OrgHead {
  let seq = 0;
  let hash = GENESIS;
  let tsMs = Number.NEGATIVE_INFINITY;
  let tree = new MerkleBuilder();
  const last = lastEvent(store, org);
  if (last !== undefined) {
    const e = JSON.parse(last.json) as { hash?: unknown; ts?: unknown };
    if (!isHash(e.hash)) throw new Error(`the last audit event of ${org} has no valid hash`);
    seq = last.seq;
    hash = e.hash;
    const ts = typeof e.ts === 'string' ? Date.parse(e.ts) : Number.NaN;
    if (Number.isFinite(ts)) tsMs = ts;
    tree = MerkleBuilder.fromSubtrees(seq, compactRange(seq, nodeReader(store, org)));
  }
  const seal = lastSeal(store, org);
  return {
    org,
    origin: checkpointOrigin(org),
    seq,
    hash,
    tsMs,
    tree,
    sealSeq: seal?.seq ?? 0,
    sealedSize: seal?.size ?? 0,
    cutSize: seal?.size ?? 0,
    chars: 0,
    cutChars: 0,
    sealing: undefined,
    timer: undefined,
    backoff: false,
    batch: undefined,
    minute: undefined,
    hour: undefined,
    dirty: new Set(),
    markPending: undefined,
    pending: new PendingPostings(),
    postingsMarkPending: undefined,
    dead: false,
  };
}

/** The overview bucket stored at [org, kind, start], or a fresh one. */
export function loadBucket(store: Store, org: string, kind: string, start: number): Bucket {
  const raw: unknown = store.auditMeta.get([org, kind, start]);
  return {
    kind,
    start,
    rollup: reviveRollup(typeof raw === 'string' ? JSON.parse(raw) : undefined),
    version: 0,
  };
}

/** Every org that has an audit chain (one key lookup per org). */
export function* chainOrgs(store: Store): Generator<string> {
  let start: string[] = [];
  for (;;) {
    let next: string | undefined;
    for (const key of store.auditEvents.getKeys({ start, limit: 1 })) next = (key as [string])[0];
    if (next === undefined) return;
    yield next;
    // `org\0` sorts after every [org, seq] and before any other org.
    start = [`${next}\u0000`];
  }
}
