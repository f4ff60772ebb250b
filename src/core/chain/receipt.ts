import { fromHex, isHash, toHex } from './bytes.js';
import { parseCheckpoint } from './checkpoint.js';
import { checkPersonalField } from './commitment.js';
import { hashEventUnchecked } from './event.js';
import { inclusionProof, leafHash, type NodeReader, verifyInclusion } from './merkle.js';
import { type NoteVerifier, parseNote, verifyNote } from './note.js';

/**
 * Proof that one event is in a sealed tree: the RFC 6962 inclusion proof of its leaf
 * (`leaf_index = seq - 1`) in the tree of `tree_size` leaves, and the signed seal note of that
 * size. O(log n) hashes; checkable offline with the public keys alone.
 */
export interface Receipt {
  event_id: string;
  seq: number;
  event_hash: string;
  tree_size: number;
  /** Hex sibling hashes, leaf level first (RFC 6962 PATH order). */
  inclusion_proof: string[];
  /** The signed seal note (C2SP checkpoint) whose tree size is `tree_size`. */
  checkpoint: string;
}

export type ReceiptVerification =
  | { ok: true }
  | { ok: false; reason: 'content_modified' | 'signature_invalid' | 'checkpoint_mismatch' | 'not_included' };

/** Builds a receipt from stored Merkle nodes and the seal covering the event (`size ≥ seq`). */
export function buildReceipt(
  event: { id: string; seq: number; hash: string },
  seal: { size: number; note: string },
  reader: NodeReader,
): Receipt {
  return {
    event_id: event.id,
    seq: event.seq,
    event_hash: event.hash,
    tree_size: seal.size,
    inclusion_proof: inclusionProof(event.seq - 1, seal.size, reader).map(toHex),
    checkpoint: seal.note,
  };
}

/**
 * Checks a receipt: both seal signatures, the checkpoint's size, then the inclusion proof against
 * the checkpoint's root. With `event`, also recomputes the event hash from the event itself.
 */
/** The origin line of a receipt's seal (`govgate/<org_id>`); undefined when it is no signed note. */
export function receiptOrigin(receipt: Pick<Receipt, 'checkpoint'>): string | undefined {
  try {
    return parseNote(String(receipt.checkpoint)).body.split('\n', 1)[0];
  } catch {
    return undefined;
  }
}

/** Whether every personal field of `event` holds its committed value or a tombstone (shape included). */
function personalFieldsMatch(event: object): boolean {
  const personal = (event as { personal?: unknown }).personal;
  if (personal === undefined || personal === null) return true;
  if (typeof personal !== 'object' || Array.isArray(personal)) return false;
  for (const [path, field] of Object.entries(personal))
    if (checkPersonalField(path, field) === 'mismatch') return false;
  return true;
}

export function verifyReceipt(
  receipt: Receipt,
  verifiers: readonly NoteVerifier[],
  event?: object,
): ReceiptVerification {
  if (event !== undefined) {
    const e = event as { prev_hash?: unknown; hash?: unknown };
    const prev = typeof e.prev_hash === 'string' ? e.prev_hash : '';
    let recomputed = '';
    try {
      recomputed = hashEventUnchecked(prev, event);
    } catch {
      recomputed = '';
    }
    if (recomputed !== receipt.event_hash || e.hash !== receipt.event_hash) {
      return { ok: false, reason: 'content_modified' };
    }
    // Only the commitments are hashed: each personal value must still match its commitment.
    if (!personalFieldsMatch(event)) return { ok: false, reason: 'content_modified' };
  }
  const verdict = verifyNote(receipt.checkpoint, verifiers);
  if (!verdict.ok) return { ok: false, reason: 'signature_invalid' };
  let root: Uint8Array;
  try {
    const cp = parseCheckpoint(verdict.body);
    if (cp.size !== receipt.tree_size) return { ok: false, reason: 'checkpoint_mismatch' };
    root = cp.rootHash;
  } catch {
    return { ok: false, reason: 'checkpoint_mismatch' };
  }
  if (!isHash(receipt.event_hash) || !Array.isArray(receipt.inclusion_proof)) {
    return { ok: false, reason: 'not_included' };
  }
  const proof: Uint8Array[] = [];
  for (const h of receipt.inclusion_proof) {
    const bytes = typeof h === 'string' && isHash(h) ? fromHex(h) : undefined;
    if (bytes === undefined) return { ok: false, reason: 'not_included' };
    proof.push(bytes);
  }
  const ok = verifyInclusion(leafHash(receipt.event_hash), receipt.seq - 1, receipt.tree_size, proof, root);
  return ok ? { ok: true } : { ok: false, reason: 'not_included' };
}
