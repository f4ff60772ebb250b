import { type BridgeRecord, isBridgeRecord, parseBridge, type SealRecord } from './bridge.js';
import { bytesEqual, isHash, utf8 } from './bytes.js';
import { parseCheckpoint } from './checkpoint.js';
import { checkPersonalField } from './commitment.js';
import { erasureTargets } from './erasure.js';
import {
  type ChainEvent,
  GENESIS,
  hashEventUnchecked,
  hashFromStoredText,
  type LegacyEvent,
} from './event.js';
import { leafHashOf, leafHashUnchecked, MerkleBuilder } from './merkle.js';
import { type NoteVerifier, parseNote, verifyNote } from './note.js';

export type IntegrityReason =
  | 'content_modified'
  | 'chain_broken'
  | 'checkpoint_mismatch'
  | 'signature_invalid'
  | 'unauthorized_erasure';

export interface BrokenEvent {
  /** The `seq` of the event (legacy events without `seq`: their 1-based position). */
  line: number;
  /** The event's id; null when the finding belongs to no event present (a missing event, a bridge). */
  event_id: string | null;
  reason: IntegrityReason;
}

/** Spec 2.6. */
export interface IntegrityResult {
  status: 'intact' | 'compromised' | 'empty';
  events: number;
  valid: number;
  broken: number;
  broken_events: BrokenEvent[];
  chain_length: number;
  current_head: string;
}

export interface ChainVerifierOptions {
  /** Trusted seal keys (rotated keys included). Each seal needs Ed25519 and ML-DSA-65. */
  verifiers: readonly NoteVerifier[];
  /** Expected checkpoint origin, e.g. `govgate/<org_id>`; unchecked when omitted. */
  origin?: string;
  /**
   * Extra authority for tombstones, for erasure events the stream does not contain (a partial
   * export). Erasure events in the stream are collected as it goes and need no callback.
   */
  erasures?: (event: Readonly<Record<string, unknown>>, field: string) => boolean;
  /** Cap on `broken_events` (lowest lines kept); counts stay exact. Default 10,000. */
  maxBrokenEvents?: number;
}

type Rec = Record<string, unknown>;

interface PendingTombstone {
  line: number;
  ordinal: number;
  fields: Set<string>;
}

/**
 * Streaming integrity check of one exported chain: push events (v2, legacy v1, or a
 * `_chain_bridge` record) in stored order and seals as they come, then read `result()`.
 *
 * Memory stays O(log n) in the chain length: the Merkle state is a compact range, links need only
 * the predecessor. What grows is proportional to findings (broken events) and to erasures (each
 * tombstone seen before its erasure event, and each authorised pair).
 *
 * Seals are checked when the event with `seq === seal.size` is pushed (or at once, if it was the
 * last event pushed), so push each seal no later than right after the event it ends at. A seal for
 * a `seq` that never arrives (deleted or truncated events) is `checkpoint_mismatch` in `result()`.
 */
export class ChainVerifier {
  readonly #opts: ChainVerifierOptions;
  readonly #findings: Array<BrokenEvent & { ordinal: number | null }> = [];
  readonly #seen = new Set<string>();
  readonly #brokenOrdinals = new Set<number>();
  #events = 0;

  #tree = new MerkleBuilder();
  #started = false;
  #lastSeq = 0;
  #lastHash = GENESIS;
  #lastId: string | null = null;
  #lastOrdinal: number | null = null;

  #legacyHash = GENESIS;
  #legacyCount = 0;

  readonly #pendingSeals = new Map<number, SealRecord[]>();
  readonly #authorised = new Map<string, Set<string>>();
  readonly #pendingTombstones = new Map<string, PendingTombstone>();

  constructor(opts: ChainVerifierOptions) {
    this.#opts = opts;
  }

  /**
   * One stored line: a `ChainEvent`, a `LegacyEvent` or a `BridgeRecord`. Typed `unknown` on
   * purpose: it is untrusted data, and anything malformed is reported, never thrown. `text`, the
   * line `e` was parsed from, lets an intact event's hash be checked without re-serialising it.
   */
  pushEvent(e: ChainEvent | LegacyEvent | BridgeRecord | unknown, text?: string): void {
    if (typeof e !== 'object' || e === null || Array.isArray(e)) {
      const ordinal = ++this.#events;
      this.#report(this.#lastSeq + 1, null, 'content_modified', ordinal);
      return;
    }
    if (isBridgeRecord(e)) {
      this.#bridge(e._chain_bridge);
      return;
    }
    const rec = e as Rec;
    if (rec._chain_version === undefined) this.#legacy(rec);
    else this.#v2(rec, text);
  }

  pushSeal(seal: SealRecord): void {
    const size = (seal as { size?: unknown } | null)?.size;
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
      this.#report(this.#lastSeq, null, 'checkpoint_mismatch', null);
      return;
    }
    if (size === this.#lastSeq) {
      this.#checkSeal(seal, size, this.#lastId, this.#lastOrdinal);
    } else if (size > this.#lastSeq) {
      const list = this.#pendingSeals.get(size);
      if (list === undefined) this.#pendingSeals.set(size, [seal]);
      else list.push(seal);
    } else {
      // Too late to recompute that root from O(log n) state: it cannot be confirmed.
      this.#report(size, null, 'checkpoint_mismatch', null);
    }
  }

  result(): IntegrityResult {
    const findings: BrokenEvent[] = [];
    const broken = new Set(this.#brokenOrdinals);
    for (const f of this.#findings) findings.push({ line: f.line, event_id: f.event_id, reason: f.reason });
    for (const [id, t] of this.#pendingTombstones) {
      findings.push({ line: t.line, event_id: id, reason: 'unauthorized_erasure' });
      broken.add(t.ordinal);
    }
    for (const size of this.#pendingSeals.keys()) {
      findings.push({ line: size, event_id: null, reason: 'checkpoint_mismatch' });
    }
    findings.sort((a, b) => a.line - b.line);
    const max = this.#opts.maxBrokenEvents ?? 10_000;
    const status =
      findings.length > 0 ? 'compromised' : this.#events === 0 && !this.#started ? 'empty' : 'intact';
    let head = GENESIS;
    if (this.#started) head = this.#lastHash;
    else if (this.#legacyCount > 0) head = this.#legacyHash;
    return {
      status,
      events: this.#events,
      valid: this.#events - broken.size,
      broken: broken.size,
      broken_events: findings.length > max ? findings.slice(0, max) : findings,
      chain_length: this.#tree.size + this.#legacyCount,
      current_head: head,
    };
  }

  #report(line: number, eventId: string | null, reason: IntegrityReason, ordinal: number | null): void {
    const key = ordinal === null ? `l${line}:${reason}` : `o${ordinal}:${reason}`;
    if (this.#seen.has(key)) return;
    this.#seen.add(key);
    this.#findings.push({ line, event_id: eventId, reason, ordinal });
    if (ordinal !== null) this.#brokenOrdinals.add(ordinal);
  }

  #v2(e: Rec, text: string | undefined): void {
    const ordinal = ++this.#events;
    const expected = this.#lastSeq + 1;
    const seqOk = typeof e.seq === 'number' && Number.isSafeInteger(e.seq) && e.seq >= 1;
    const seq = seqOk ? (e.seq as number) : expected;
    const id = typeof e.id === 'string' ? e.id : null;
    const stored = typeof e.hash === 'string' ? e.hash : '';
    const prev = typeof e.prev_hash === 'string' ? e.prev_hash : '';

    this.#checkContent(e, prev, stored, seq, id, ordinal, text);
    if (seq !== expected || !seqOk || prev !== this.#lastHash) this.#report(seq, id, 'chain_broken', ordinal);

    this.#tree.push(isHash(stored) ? leafHashUnchecked(stored) : leafHashOf(utf8.encode(stored)));
    this.#started = true;
    this.#lastSeq = seq;
    this.#lastHash = stored;
    this.#lastId = id;
    this.#lastOrdinal = ordinal;

    const seals = this.#pendingSeals.get(seq);
    if (seals !== undefined) {
      this.#pendingSeals.delete(seq);
      for (const s of seals) this.#checkSeal(s, seq, id, ordinal);
    }
  }

  #legacy(e: Rec): void {
    const ordinal = ++this.#events;
    const position = ++this.#legacyCount;
    const line = typeof e.seq === 'number' && Number.isSafeInteger(e.seq) ? e.seq : position;
    const id = typeof e.id === 'string' ? e.id : null;
    const stored = typeof e.hash === 'string' ? e.hash : '';
    const prev = typeof e.prev_hash === 'string' ? e.prev_hash : '';
    this.#checkContent(e, prev, stored, line, id, ordinal);
    if (prev !== this.#legacyHash) this.#report(line, id, 'chain_broken', ordinal);
    this.#legacyHash = stored;
  }

  /** Hash, personal commitments, tombstone authority; collects an intact erasure event's grants. */
  #checkContent(
    e: Rec,
    prev: string,
    stored: string,
    line: number,
    id: string | null,
    ordinal: number,
    text?: string,
  ): void {
    let hashOk = text !== undefined && hashFromStoredText(prev, e, text) === stored;
    if (!hashOk) {
      try {
        hashOk = hashEventUnchecked(prev, e) === stored;
      } catch {
        hashOk = false;
      }
    }
    if (!hashOk) this.#report(line, id, 'content_modified', ordinal);

    const personal = e.personal;
    if (personal !== undefined && personal !== null) {
      if (typeof personal !== 'object' || Array.isArray(personal)) {
        this.#report(line, id, 'content_modified', ordinal);
      } else {
        const p = personal as Rec;
        for (const field of Object.keys(p)) {
          const status = checkPersonalField(field, p[field]);
          if (status === 'mismatch') this.#report(line, id, 'content_modified', ordinal);
          else if (status === 'erased') this.#tombstone(e, field, line, id, ordinal);
        }
      }
    }

    if (hashOk) {
      for (const t of erasureTargets(e)) this.#grant(t.event_id, t.fields);
    }
  }

  #tombstone(e: Rec, field: string, line: number, id: string | null, ordinal: number): void {
    if (id !== null && this.#authorised.get(id)?.has(field)) return;
    if (this.#opts.erasures?.(e, field)) return;
    if (id === null) {
      this.#report(line, id, 'unauthorized_erasure', ordinal);
      return;
    }
    const pending = this.#pendingTombstones.get(id);
    if (pending === undefined) this.#pendingTombstones.set(id, { line, ordinal, fields: new Set([field]) });
    else pending.fields.add(field);
  }

  #grant(eventId: string, fields: readonly string[]): void {
    let set = this.#authorised.get(eventId);
    if (set === undefined) {
      set = new Set();
      this.#authorised.set(eventId, set);
    }
    const pending = this.#pendingTombstones.get(eventId);
    for (const f of fields) {
      set.add(f);
      pending?.fields.delete(f);
    }
    if (pending !== undefined && pending.fields.size === 0) this.#pendingTombstones.delete(eventId);
  }

  #checkSeal(seal: SealRecord, line: number, eventId: string | null, ordinal: number | null): void {
    const note = typeof seal.note === 'string' ? seal.note : '';
    const verdict = verifyNote(note, this.#opts.verifiers);
    if (!verdict.ok) this.#report(line, eventId, 'signature_invalid', ordinal);
    let body: string;
    try {
      body = verdict.ok ? verdict.body : parseNote(note).body;
    } catch {
      return; // unparseable: already reported as signature_invalid
    }
    if (!this.#checkpointMatches(body, seal.size, this.#tree, this.#lastHash)) {
      this.#report(line, eventId, 'checkpoint_mismatch', ordinal);
    }
  }

  #checkpointMatches(body: string, size: number, tree: MerkleBuilder, head: string): boolean {
    try {
      const cp = parseCheckpoint(body);
      if (this.#opts.origin !== undefined && cp.origin !== this.#opts.origin) return false;
      return (
        cp.size === size && cp.size === tree.size && cp.head === head && bytesEqual(cp.rootHash, tree.root())
      );
    } catch {
      return false;
    }
  }

  #bridge(raw: unknown): void {
    let parsed: ReturnType<typeof parseBridge>;
    try {
      parsed = parseBridge(raw);
    } catch {
      this.#report(this.#lastSeq, null, 'checkpoint_mismatch', null);
      return;
    }
    const { bridge, subtrees } = parsed;
    const line = bridge.bridged_to_seq;
    const tree = MerkleBuilder.fromSubtrees(line, subtrees);
    if (this.#started) {
      // Mid-stream, a bridge must describe exactly the state reached so far.
      const same = this.#lastSeq === line && this.#lastHash === bridge.bridged_hash;
      if (!same || !bytesEqual(tree.root(), this.#tree.root()))
        this.#report(line, null, 'chain_broken', null);
      return;
    }
    const seal = bridge.last_seal;
    if (seal === null || typeof seal !== 'object') {
      this.#report(line, null, 'checkpoint_mismatch', null);
    } else {
      const note = typeof seal.note === 'string' ? seal.note : '';
      const verdict = verifyNote(note, this.#opts.verifiers);
      if (!verdict.ok) this.#report(line, null, 'signature_invalid', null);
      let body: string | undefined;
      try {
        body = verdict.ok ? verdict.body : parseNote(note).body;
      } catch {
        body = undefined;
      }
      if (body !== undefined && !this.#checkpointMatches(body, line, tree, bridge.bridged_hash)) {
        this.#report(line, null, 'checkpoint_mismatch', null);
      }
    }
    this.#tree = tree;
    this.#started = true;
    this.#lastSeq = line;
    this.#lastHash = bridge.bridged_hash;
    this.#lastId = null;
    this.#lastOrdinal = null;
  }
}
