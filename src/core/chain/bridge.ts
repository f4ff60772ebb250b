import { fromHex, isHash, toHex } from './bytes.js';
import { ChainError } from './errors.js';
import type { JsonValue } from './jcs.js';
import { popcount } from './merkle.js';

/** A seal as stored beside the chain: its number, the tree size it covers, the signed note. */
export interface SealRecord {
  seq: number;
  size: number;
  note: string;
}

/**
 * What retention leaves in place of a pruned prefix of an org chain (it prunes on seal
 * boundaries only). `bridged_to_seq` is the last pruned `seq` (= the tree size at the cut),
 * `bridged_hash` that event's hash (the first kept event's `prev_hash`), `subtree_hashes` the
 * compact range of the pruned leaves (hex RFC 6962 roots of the perfect subtrees covering
 * [0, bridged_to_seq), largest first: one per set bit of the size), `last_seal` the seal at
 * exactly that size (its root and head authenticate the bridge), `archive` where the pruned
 * events went (opaque to the verifier).
 */
export interface ChainBridge {
  bridged_from_seq: number;
  bridged_to_seq: number;
  bridged_hash: string;
  subtree_hashes: string[];
  last_seal: SealRecord | null;
  archive: JsonValue | null;
}

/** A JSONL line / stored record holding a bridge. */
export interface BridgeRecord {
  _chain_bridge: ChainBridge;
}

export function isBridgeRecord(x: unknown): x is BridgeRecord {
  return typeof x === 'object' && x !== null && '_chain_bridge' in x;
}

/** Builds a bridge record from the Merkle state at the cut (`MerkleBuilder.subtrees()`). */
export function bridgeRecord(opts: {
  fromSeq: number;
  toSeq: number;
  bridgedHash: string;
  subtrees: readonly Uint8Array[];
  lastSeal: SealRecord | null;
  archive: JsonValue | null;
}): BridgeRecord {
  const bridge: ChainBridge = {
    bridged_from_seq: opts.fromSeq,
    bridged_to_seq: opts.toSeq,
    bridged_hash: opts.bridgedHash,
    subtree_hashes: opts.subtrees.map(toHex),
    last_seal: opts.lastSeal,
    archive: opts.archive,
  };
  parseBridge(bridge);
  return { _chain_bridge: bridge };
}

/** Validates a bridge's shape; returns its subtree roots as bytes. Throws `ChainError`. */
export function parseBridge(b: unknown): { bridge: ChainBridge; subtrees: Uint8Array[] } {
  if (typeof b !== 'object' || b === null) throw new ChainError('invalid_bridge', 'a bridge is an object');
  const bridge = b as ChainBridge;
  const from = bridge.bridged_from_seq;
  const to = bridge.bridged_to_seq;
  if (!Number.isSafeInteger(from) || !Number.isSafeInteger(to) || from < 1 || to < from) {
    throw new ChainError('invalid_bridge', 'a bridge covers seq bridged_from_seq..bridged_to_seq (1-based)');
  }
  if (!isHash(bridge.bridged_hash)) throw new ChainError('invalid_bridge', 'bridged_hash is an event hash');
  const list = bridge.subtree_hashes;
  if (!Array.isArray(list) || list.length !== popcount(to)) {
    throw new ChainError('invalid_bridge', `a tree of size ${to} has ${popcount(to)} subtree hashes`);
  }
  const subtrees: Uint8Array[] = [];
  for (const h of list) {
    if (!isHash(h)) throw new ChainError('invalid_bridge', 'subtree hashes are hex SHA-256');
    subtrees.push(fromHex(h) as Uint8Array);
  }
  return { bridge, subtrees };
}
