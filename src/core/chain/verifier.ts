import { type BridgeRecord, isBridgeRecord, parseBridge, type SealRecord } from './bridge.js';
import { bytesEqual, isHash, utf8 } from './bytes.js';
import { parseCheckpoint } from './checkpoint.js';
import { checkPersonalField } from './commitment.js';
import { ERASURE_EVENT_TYPE, type ErasureTarget, erasureTargets } from './erasure.js';
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
  | 'unauthorized_erasure'
  /** `govgate verify --org`: an event of another org's chain. */
  | 'org_mismatch';

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
  /**
   * False for a stream that can only hold a v2 org chain (an org's store): any legacy v1 line in
   * it is `chain_broken`. Default true: a legacy-only stream verifies as the v1 global chain.
   * Either way, a v1 line once the v2 chain has begun (an event or a bridge) is `chain_broken`.
   */
  legacy?: boolean;
}

type Rec = Record<string, unknown>;

/** The empty list of a verdict with no tombstones or grants (shared; never mutated). */
const NONE: never[] = [];

/**
 * What one stored line says on its own, apart from its place in the chain: its shape, the fields
 * the chain checks, and the outcome of its content checks (hash, personal commitments). Computed
 * by `checkLine`, possibly in another thread (it is plain, structured-cloneable data), and applied
 * in chain order by `ChainVerifier#pushChecked`.
 */
export type LineVerdict = { kind: 'invalid' } | { kind: 'bridge'; bridge: unknown } | EventVerdict;

/** `LineVerdict` of an event (v2, or legacy v1). */
export interface EventVerdict {
  kind: 'v2' | 'legacy';
  /** `seq` as stored when it is a safe integer, else null. */
  seq: number | null;
  id: string | null;
  /** `hash` and `prev_hash` as stored ('' when not strings). */
  hash: string;
  prev: string;
  hashOk: boolean;
  /** `personal` is malformed or a value no longer matches its commitment. */
  personalBad: boolean;
  /** Tombstoned personal fields (erased values), in field order. */
  erased: string[];
  /** What the event authorises when it is an intact erasure event. */
  grants: ErasureTarget[];
}

/** A seal's signature check, made apart from the chain: `body` undefined when the note is unparseable. */
export interface SealCheck {
  ok: boolean;
  body: string | undefined;
}

/**
 * The content checks of one stored line (parsed as `e` from `text`, when known): everything
 * `ChainVerifier` needs of it that does not depend on the lines before it.
 */
export function checkLine(e: unknown, text?: string): LineVerdict {
  try {
    return checkLineUnguarded(e, text);
  } catch {
    // Valid JSON the checks cannot walk (nested deeper than serialising it can go): its content
    // cannot be the event's, and it is reported as such, never thrown.
    return { kind: 'invalid' };
  }
}

function checkLineUnguarded(e: unknown, text?: string): LineVerdict {
  if (typeof e !== 'object' || e === null || Array.isArray(e)) return { kind: 'invalid' };
  if (isBridgeRecord(e)) return { kind: 'bridge', bridge: e._chain_bridge };
  const rec = e as Rec;
  const stored = typeof rec.hash === 'string' ? rec.hash : '';
  const prev = typeof rec.prev_hash === 'string' ? rec.prev_hash : '';
  let hashOk = text !== undefined && hashFromStoredText(prev, rec, text) === stored;
  // The stored text is not in the form the fast path reads (a line of an older layout): the
  // parsed event is hashed, but only when the line is exactly its serialization. JSON.parse keeps
  // the last of duplicate members and rounds a number's digits, so a line with an injected
  // `"outcome":"block",` ahead of the real member, or `"n":5.0000000000000001`, would hash as
  // the original while a reader taking the first member, or all the digits, sees another event.
  if (!hashOk && (text === undefined || JSON.stringify(e) === text)) {
    try {
      hashOk = hashEventUnchecked(prev, rec) === stored;
    } catch {
      hashOk = false;
    }
  }
  let personalBad = false;
  let erased: string[] = NONE;
  const personal = rec.personal;
  if (personal !== undefined && personal !== null) {
    if (typeof personal !== 'object' || Array.isArray(personal)) {
      personalBad = true;
    } else {
      const p = personal as Rec;
      for (const field of Object.keys(p)) {
        const status = checkPersonalField(field, p[field]);
        if (status === 'mismatch') personalBad = true;
        else if (status === 'erased') erased = [...erased, field];
      }
    }
  }
  return {
    kind: rec._chain_version === undefined ? 'legacy' : 'v2',
    seq: typeof rec.seq === 'number' && Number.isSafeInteger(rec.seq) ? rec.seq : null,
    id: typeof rec.id === 'string' ? rec.id : null,
    hash: stored,
    prev,
    hashOk,
    personalBad,
    erased,
    grants: hashOk && rec.event_type === ERASURE_EVENT_TYPE ? erasureTargets(rec) : NONE,
  };
}

/** The signature check of a seal note against trusted keys (both algorithms must verify). */
export function checkSeal(seal: SealRecord, verifiers: readonly NoteVerifier[]): SealCheck {
  const note = typeof seal.note === 'string' ? seal.note : '';
  const verdict = verifyNote(note, verifiers);
  if (verdict.ok) return { ok: true, body: verdict.body };
  try {
    return { ok: false, body: parseNote(note).body };
  } catch {
    return { ok: false, body: undefined };
  }
}

/**
 * What the seals of a verified stream prove (`ChainVerifier.coverage`). Hashes and links can be
 * recomputed by anyone; only a seal (both signatures, its checkpoint matching the events before
 * it) shows the events up to its size are the ones the service wrote.
 */
export interface SealCoverage {
  /** The largest `seq` covered by a valid seal (or a bridge's valid `last_seal`); 0 when none. */
  sealed_through: number;
  /** Events no valid seal covers: the v2 events after `sealed_through`, and every legacy event. */
  unsealed: number;
}

/** The "seq" of an erasure authority proven by other means (a receipt): sealed by definition. */
const PROVEN = 0;
/** The "seq" of an erasure authority no seal can cover (a legacy v1 event). */
const UNSEALED = Number.POSITIVE_INFINITY;

interface PendingSeal {
  seal: SealRecord;
  check: SealCheck | null;
}

interface PendingTombstone {
  line: number;
  ordinal: number;
  fields: Set<string>;
  /** In a v2 event (its line is a seq a seal may cover); a legacy event is never proven. */
  v2: boolean;
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
  /** The largest size a valid seal (or an anchoring bridge's seal) confirmed. */
  #sealedThrough = 0;
  /** The seq the bridge the stream starts with stands for; 0 without one. */
  #bridgedThrough = 0;

  readonly #pendingSeals = new Map<number, PendingSeal[]>();
  /** Per tombstoned event id: each field granted, and the seq of the erasure event granting it. */
  readonly #authorised = new Map<string, Map<string, number>>();
  readonly #pendingTombstones = new Map<string, PendingTombstone>();
  /**
   * The least line of a tombstone whose authority is an erasure event not yet known to be sealed,
   * with that event's seq: per erasure seq, the least tombstone line it authorised. A seal proves
   * a tombstone only once it also covers the erasure event naming it (coverage()).
   */
  readonly #tombstonesBy = new Map<number, number>();

  constructor(opts: ChainVerifierOptions) {
    this.#opts = opts;
  }

  /**
   * One stored line: a `ChainEvent`, a `LegacyEvent` or a `BridgeRecord`. Typed `unknown` on
   * purpose: it is untrusted data, and anything malformed is reported, never thrown. `text`, the
   * line `e` was parsed from, lets an intact event's hash be checked without re-serialising it.
   * `storedAt`, the seq the line is stored under (a store scan), must be the event's own `seq`.
   */
  pushEvent(e: ChainEvent | LegacyEvent | BridgeRecord | unknown, text?: string, storedAt?: number): void {
    this.pushChecked(checkLine(e, text), e, storedAt);
  }

  /**
   * The next stored line, already checked by `checkLine` (e.g. in a worker thread). `e`, the
   * line itself when at hand, is what the `erasures` option is asked about; `storedAt` as in
   * `pushEvent`.
   */
  pushChecked(v: LineVerdict, e?: unknown, storedAt?: number): void {
    if (v.kind === 'invalid') {
      const ordinal = ++this.#events;
      this.#report(this.#lastSeq + 1, null, 'content_modified', ordinal);
    } else if (v.kind === 'bridge') {
      this.#bridge(v.bridge);
    } else if (v.kind === 'legacy') {
      this.#legacy(v, e, storedAt);
    } else {
      this.#v2(v, e, storedAt);
    }
  }

  /** A line stored under a key other than its own `seq` (a store key that is not a whole number). */
  #misplaced(storedAt: number | undefined, v: EventVerdict, line: number, ordinal: number): void {
    if (storedAt !== undefined && storedAt !== v.seq) this.#report(line, v.id, 'chain_broken', ordinal);
  }

  /** A seal line; `check`, its signature check made ahead (`checkSeal`), saves verifying it here. */
  pushSeal(seal: SealRecord, check?: SealCheck): void {
    const size = (seal as { size?: unknown } | null)?.size;
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
      this.#report(this.#lastSeq, null, 'checkpoint_mismatch', null);
      return;
    }
    const pending: PendingSeal = { seal, check: check ?? null };
    if (size === this.#lastSeq) {
      this.#checkSeal(pending, size, this.#lastId, this.#lastOrdinal);
    } else if (size > this.#lastSeq) {
      const list = this.#pendingSeals.get(size);
      if (list === undefined) this.#pendingSeals.set(size, [pending]);
      else list.push(pending);
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
    // A stream of no event is empty, a bridge alone included: it holds nothing to be intact.
    const status = findings.length > 0 ? 'compromised' : this.#events === 0 ? 'empty' : 'intact';
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

  /**
   * How much of the stream its valid seals cover. `result()` judges hashes, links and the seals
   * present; a stream with no seal, or with events after its last seal, has nothing wrong in it
   * and yet proves nothing about those events (anyone can recompute hashes and links). A live
   * chain's tail is unsealed for up to `sealIntervalMs`; an exported file's should not be.
   */
  /** The seq the `_chain_bridge` the stream starts with stands for; 0 when it starts with an event. */
  get bridgedThrough(): number {
    return this.#bridgedThrough;
  }

  coverage(): SealCoverage {
    let through = this.#sealedThrough;
    // A tombstone is proven only when the erasure event authorising it is sealed too: anyone
    // can append a well-hashed erasure event after the last seal.
    for (const [erasureSeq, line] of this.#tombstonesBy)
      if (erasureSeq > this.#sealedThrough && line <= through) through = line - 1;
    const tail = this.#started ? Math.max(0, this.#lastSeq - through) : 0;
    return { sealed_through: through, unsealed: tail + this.#legacyCount };
  }

  #report(line: number, eventId: string | null, reason: IntegrityReason, ordinal: number | null): void {
    const key = ordinal === null ? `l${line}:${reason}` : `o${ordinal}:${reason}`;
    if (this.#seen.has(key)) return;
    this.#seen.add(key);
    this.#findings.push({ line, event_id: eventId, reason, ordinal });
    if (ordinal !== null) this.#brokenOrdinals.add(ordinal);
  }

  #v2(v: EventVerdict, e: unknown, storedAt: number | undefined): void {
    const ordinal = ++this.#events;
    const expected = this.#lastSeq + 1;
    const seqOk = v.seq !== null && v.seq >= 1;
    const seq = seqOk ? (v.seq as number) : expected;
    const { id, hash: stored } = v;

    this.#misplaced(storedAt, v, seq, ordinal);
    this.#applyContent(v, seq, ordinal, e, seq);
    if (seq !== expected || !seqOk || v.prev !== this.#lastHash)
      this.#report(seq, id, 'chain_broken', ordinal);

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

  /**
   * A legacy v1 line. Inside (or after the start of) a v2 chain, or in a stream that holds only a
   * v2 org chain (`legacy: false`), it has no place: `chain_broken` at the position it holds (the
   * seq after the previous event), and it leaves the v2 state alone, so the lines around it still
   * link. Else it links to the previous legacy line.
   */
  #legacy(v: EventVerdict, e: unknown, storedAt: number | undefined): void {
    const ordinal = ++this.#events;
    if (this.#started || this.#opts.legacy === false) {
      const line = this.#lastSeq + 1;
      this.#report(line, v.id, 'chain_broken', ordinal);
      // Its content is checked, but an erasure it claims to be authorises nothing.
      this.#applyContent(v.grants.length === 0 ? v : { ...v, grants: NONE }, line, ordinal, e, UNSEALED);
      return;
    }
    const position = ++this.#legacyCount;
    const line = v.seq ?? position;
    this.#misplaced(storedAt, v, line, ordinal);
    // A legacy event is never sealed: the tombstones it authorises are not proven by any seal.
    this.#applyContent(v, line, ordinal, e, UNSEALED);
    if (v.prev !== this.#legacyHash) this.#report(line, v.id, 'chain_broken', ordinal);
    this.#legacyHash = v.hash;
  }

  /**
   * Reports a line's content findings; records an intact erasure event's grants, as of `seq` (the
   * erasure event's own seq: what a seal must cover for its tombstones to be proven).
   */
  #applyContent(v: EventVerdict, line: number, ordinal: number, e: unknown, seq: number): void {
    if (!v.hashOk) this.#report(line, v.id, 'content_modified', ordinal);
    if (v.personalBad) this.#report(line, v.id, 'content_modified', ordinal);
    const v2 = seq !== UNSEALED;
    for (const field of v.erased)
      this.#tombstone(e ?? { id: v.id, seq: v.seq }, field, line, v.id, ordinal, v2);
    for (const t of v.grants) this.#grant(t.event_id, t.fields, seq);
  }

  /** The tombstone at `line` rests on the erasure event at `erasureSeq`. */
  #restsOn(erasureSeq: number, line: number): void {
    if (erasureSeq === PROVEN) return;
    const least = this.#tombstonesBy.get(erasureSeq);
    if (least === undefined || line < least) this.#tombstonesBy.set(erasureSeq, line);
  }

  #tombstone(e: unknown, field: string, line: number, id: string | null, ordinal: number, v2: boolean): void {
    const grantedBy = id === null ? undefined : this.#authorised.get(id)?.get(field);
    if (grantedBy !== undefined) {
      if (v2) this.#restsOn(grantedBy, line);
      return;
    }
    if (this.#opts.erasures?.(e as Readonly<Rec>, field)) return;
    if (id === null) {
      this.#report(line, id, 'unauthorized_erasure', ordinal);
      return;
    }
    const pending = this.#pendingTombstones.get(id);
    if (pending === undefined)
      this.#pendingTombstones.set(id, { line, ordinal, fields: new Set([field]), v2 });
    else pending.fields.add(field);
  }

  /**
   * Grants from an erasure event proven to be in this chain some other way than by reading it
   * here (an export's `_erasure_authority`: the event and its receipt, checked by the caller).
   */
  authorize(targets: readonly ErasureTarget[]): void {
    for (const t of targets) this.#grant(t.event_id, t.fields, PROVEN);
  }

  #grant(eventId: string, fields: readonly string[], erasureSeq: number): void {
    let granted = this.#authorised.get(eventId);
    if (granted === undefined) {
      granted = new Map();
      this.#authorised.set(eventId, granted);
    }
    const pending = this.#pendingTombstones.get(eventId);
    for (const f of fields) {
      // Two erasures naming one field: the one proven sooner (the lower seq) is its authority.
      const before = granted.get(f);
      if (before === undefined || erasureSeq < before) granted.set(f, erasureSeq);
      if (pending?.fields.delete(f) && pending.v2) this.#restsOn(erasureSeq, pending.line);
    }
    if (pending !== undefined && pending.fields.size === 0) this.#pendingTombstones.delete(eventId);
  }

  #checkSeal(p: PendingSeal, line: number, eventId: string | null, ordinal: number | null): void {
    const { ok, body } = p.check ?? checkSeal(p.seal, this.#opts.verifiers);
    if (!ok) this.#report(line, eventId, 'signature_invalid', ordinal);
    if (body === undefined) return; // unparseable: already reported as signature_invalid
    if (!this.#checkpointMatches(body, p.seal.size, this.#tree, this.#lastHash)) {
      this.#report(line, eventId, 'checkpoint_mismatch', ordinal);
    } else if (ok && line > this.#sealedThrough) {
      this.#sealedThrough = line;
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
      } else if (verdict.ok && body !== undefined) {
        this.#sealedThrough = line; // the pruned prefix and the bridge's state are sealed
      }
    }
    this.#tree = tree;
    this.#started = true;
    this.#bridgedThrough = line;
    this.#lastSeq = line;
    this.#lastHash = bridge.bridged_hash;
    this.#lastId = null;
    this.#lastOrdinal = null;
    // A seal at the bridge's size (a checkpoint saved then) is checked against its state now.
    const seals = this.#pendingSeals.get(line);
    if (seals !== undefined) {
      this.#pendingSeals.delete(line);
      for (const s of seals) this.#checkSeal(s, line, null, null);
    }
  }
}
