import {
  buildReceipt,
  consistencyProof,
  isHash,
  type JsonValue,
  type Receipt,
  toHex,
} from '../core/chain/index.js';
import { ServiceError } from '../core/errors.js';
import type { Store } from '../store/db.js';
import { eventIdSeq } from '../util/ids.js';
import { type LogLine, sealLine } from './jsonl-log.js';
import { BRIDGE_KIND, ID_KIND, INDEX_VALUE_MAX, MAX_KEY, SEAL_KIND, SEAL_SIZE_KIND } from './layout.js';
import { compactRange, nodeReader } from './org-head.js';
import type { AuditEvent, ChainLine, StoredSeal } from './types.js';

/** Proof that the tree at one seal is a prefix of the tree at a later seal (RFC 6962 §2.1.2). */
export interface ConsistencyResult {
  from_size: number;
  to_size: number;
  /** The signed seal notes at both sizes (their roots are what the proof connects). */
  from_checkpoint: string;
  to_checkpoint: string;
  /** Hex node hashes, RFC 6962 PROOF order; check with `verifyConsistency`. */
  consistency_proof: string[];
}

export type SealRef = { readonly seq: number } | null;

/** Seq bounds [lo, hi] of the committed events of a range (lo > hi when empty). */
export interface SeqWindow {
  lo: number;
  hi: number;
}

const CHUNK = 1024;

/**
 * Reads the committed chain from the store: events, seals, seq windows of time ranges, receipts,
 * consistency proofs and the ordered lines of the export. Readers see only committed data (the
 * store); events are immutable once written and carry their seal only when read.
 */
export class ChainReader {
  constructor(readonly store: Store) {}

  /** The seq of the newest committed event (0 when none). */
  lastSeq(org: string): number {
    for (const key of this.store.auditEvents.getKeys({
      start: [org, MAX_KEY],
      end: [org],
      reverse: true,
      limit: 1,
    }))
      return (key as [string, number])[1];
    return 0;
  }

  /** The seq retention pruned the chain through (its `_chain_bridge`), 0 when none. */
  prunedThrough(org: string): number {
    const b = this.store.auditMeta.get([org, BRIDGE_KIND]) as { bridged_to_seq?: unknown } | undefined;
    return typeof b?.bridged_to_seq === 'number' ? b.bridged_to_seq : 0;
  }

  /** The JSONL line of the org's `_chain_bridge` (the first line of its export), if any. */
  bridgeLine(org: string): string | undefined {
    const stored: unknown = this.store.auditMeta.get([org, BRIDGE_KIND]);
    return stored === undefined ? undefined : JSON.stringify({ _chain_bridge: stored });
  }

  /**
   * The seq of the oldest stored event (0 when none). Events a retention run is still deleting
   * (seq ≤ its bridge's) are not part of the chain any more.
   */
  firstSeq(org: string): number {
    const from = this.prunedThrough(org) + 1;
    for (const key of this.store.auditEvents.getKeys({ start: [org, from], end: [org, MAX_KEY], limit: 1 }))
      return (key as [string, number])[1];
    return 0;
  }

  /**
   * The event with this id and its seq. An id that names its seq (see `eventId`) is found by
   * reading that event; other ids (older formats, seqs past `MAX_ID_SEQ`) through the id index.
   */
  locate(org: string, eventId: string): { seq: number; event: AuditEvent } | undefined {
    const named = eventIdSeq(eventId);
    if (named !== undefined) {
      const event = this.eventAt(org, named);
      if (event?.id === eventId) return { seq: named, event };
    }
    // No id govgate made is that long, and a key over LMDB's limit would throw.
    if (eventId.length > INDEX_VALUE_MAX) return undefined;
    const seq: unknown = this.store.auditIndex.get([org, ID_KIND, eventId]);
    if (typeof seq !== 'number') return undefined;
    const event = this.eventAt(org, seq);
    return event === undefined ? undefined : { seq, event };
  }

  seqOf(org: string, eventId: string): number | undefined {
    return this.locate(org, eventId)?.seq;
  }

  /** The stored event at `seq` (without `seal`). */
  eventAt(org: string, seq: number): AuditEvent | undefined {
    const raw: unknown = this.store.auditEvents.get([org, seq]);
    return typeof raw === 'string' ? (JSON.parse(raw) as AuditEvent) : undefined;
  }

  get(org: string, eventId: string): AuditEvent | undefined {
    const found = this.locate(org, eventId);
    return found === undefined ? undefined : withSeal(found.event, this.sealResolver(org)(found.seq));
  }

  sealBySeq(org: string, sealSeq: number): StoredSeal | undefined {
    return this.store.auditMeta.get([org, SEAL_KIND, sealSeq]) as StoredSeal | undefined;
  }

  /** The seal whose tree size is exactly `size`. */
  sealAtSize(org: string, size: number): StoredSeal | undefined {
    const sealSeq: unknown = this.store.auditMeta.get([org, SEAL_SIZE_KIND, size]);
    return typeof sealSeq === 'number' ? this.sealBySeq(org, sealSeq) : undefined;
  }

  /** The first seal whose size ≥ seq (the seal that covers event `seq`). */
  coveringSeal(org: string, seq: number): StoredSeal | undefined {
    for (const { value } of this.store.auditMeta.getRange({
      start: [org, SEAL_SIZE_KIND, seq],
      end: [org, SEAL_SIZE_KIND, MAX_KEY],
      limit: 1,
    })) {
      return this.sealBySeq(org, value as number);
    }
    return undefined;
  }

  /** The newest seal whose size ≤ seq. */
  sealAtOrBefore(org: string, seq: number): StoredSeal | undefined {
    for (const { value } of this.store.auditMeta.getRange({
      start: [org, SEAL_SIZE_KIND, seq],
      end: [org, SEAL_SIZE_KIND, 0],
      reverse: true,
      limit: 1,
    })) {
      return this.sealBySeq(org, value as number);
    }
    return undefined;
  }

  /**
   * `seq → {seq of its seal} | null`, remembering the seal interval last found so that a page
   * of neighbouring events costs one or two lookups, not one per event.
   */
  sealResolver(org: string): (seq: number) => SealRef {
    let lo = 1;
    let hi = 0;
    let ref: SealRef = null;
    const { auditMeta } = this.store;
    return (seq) => {
      if (seq >= lo && seq <= hi) return ref;
      ref = null;
      hi = MAX_KEY;
      for (const { key, value } of auditMeta.getRange({
        start: [org, SEAL_SIZE_KIND, seq],
        end: [org, SEAL_SIZE_KIND, MAX_KEY],
        limit: 1,
      })) {
        hi = (key as [string, string, number])[2];
        ref = { seq: value as number };
      }
      lo = 1;
      for (const key of auditMeta.getKeys({
        start: [org, SEAL_SIZE_KIND, seq - 1],
        end: [org, SEAL_SIZE_KIND, 0],
        reverse: true,
        limit: 1,
      })) {
        lo = (key as [string, string, number])[2] + 1;
      }
      return ref;
    };
  }

  /** The smallest seq in [lo, hi] whose ts ≥ ms (hi + 1 when none): ts grows with seq. */
  seqAtOrAfter(org: string, ms: number, lo: number, hi: number): number {
    if (ms === Number.NEGATIVE_INFINITY) return lo;
    if (ms === Number.POSITIVE_INFINITY) return hi + 1;
    let a = lo;
    let b = hi + 1;
    while (a < b) {
      const mid = Math.floor((a + b) / 2);
      const probe = this.#firstAtOrAfter(org, mid, hi);
      if (probe === undefined || probe.ms >= ms) b = mid;
      else a = probe.seq + 1;
    }
    return a;
  }

  #firstAtOrAfter(org: string, seq: number, hi: number): { seq: number; ms: number } | undefined {
    for (const { key, value } of this.store.auditEvents.getRange({
      start: [org, seq],
      end: [org, hi + 1],
      limit: 1,
    })) {
      const ts = (JSON.parse(value as string) as { ts?: unknown }).ts;
      return { seq: (key as [string, number])[1], ms: typeof ts === 'string' ? Date.parse(ts) : Number.NaN };
    }
    return undefined;
  }

  /** Seq bounds of the committed events with since ≤ ts ≤ until (ms; undefined = open). */
  window(org: string, sinceMs: number | undefined, untilMs: number | undefined): SeqWindow {
    const last = this.lastSeq(org);
    if (last === 0) return { lo: 1, hi: 0 };
    let lo = this.firstSeq(org);
    let hi = last;
    if (sinceMs !== undefined) lo = this.seqAtOrAfter(org, sinceMs, lo, hi);
    if (untilMs !== undefined) hi = this.seqAtOrAfter(org, untilMs + 1, lo, hi) - 1;
    return { lo, hi };
  }

  /** Events with lo ≤ seq ≤ hi as stored JSON text, oldest first, read a chunk at a time. */
  *eventTexts(org: string, lo: number, hi: number): Generator<{ seq: number; json: string }> {
    let start = lo;
    let after = Number.NEGATIVE_INFINITY;
    for (;;) {
      const rows: Array<{ seq: number; json: string }> = [];
      let read = 0;
      for (const { key, value } of this.store.auditEvents.getRange({
        start: [org, start],
        end: [org, MAX_KEY],
        limit: CHUNK,
      })) {
        read++;
        const seq = (key as [string, number])[1];
        if (seq > hi) break;
        if (seq > after) rows.push({ seq, json: value as string });
      }
      yield* rows;
      const last = rows[rows.length - 1];
      if (read < CHUNK || last === undefined) return;
      start = last.seq;
      after = last.seq;
    }
  }

  /** Seals with from ≤ size ≤ to, in size order. */
  *sealsBetween(org: string, from: number, to: number): Generator<StoredSeal> {
    let start = from;
    let after = Number.NEGATIVE_INFINITY;
    for (;;) {
      const seqs: number[] = [];
      let read = 0;
      let lastSize = after;
      for (const { key, value } of this.store.auditMeta.getRange({
        start: [org, SEAL_SIZE_KIND, start],
        end: [org, SEAL_SIZE_KIND, MAX_KEY],
        limit: CHUNK,
      })) {
        read++;
        const size = (key as [string, string, number])[2];
        if (size > to) break;
        if (size <= after) continue;
        lastSize = size;
        seqs.push(value as number);
      }
      for (const s of seqs) {
        const seal = this.sealBySeq(org, s);
        if (seal !== undefined) yield seal;
      }
      if (read < CHUNK || seqs.length === 0) return;
      start = lastSize;
      after = lastSize;
    }
  }

  /**
   * The lines of the chain in store order: events with lo ≤ seq ≤ hi, and the seals with
   * sealAfter < size ≤ sealHi (default hi), each right after the event it ends at (or first,
   * when it ends before `lo`). A seal whose event is missing comes before the next event present.
   */
  *lines(org: string, lo: number, hi: number, sealAfter: number, sealHi = hi): Generator<LogLine> {
    yield* this.linesBetween(org, lo, hi, nextKey(sealAfter), sealHi);
  }

  /** `lines` with the seals' lower bound inclusive: sealFrom ≤ size ≤ sealHi. */
  *linesBetween(org: string, lo: number, hi: number, sealFrom: number, sealHi: number): Generator<LogLine> {
    const seals = this.sealsBetween(org, sealFrom, sealHi);
    let seal = seals.next();
    for (const { seq, json } of this.eventTexts(org, lo, hi)) {
      while (!seal.done && seal.value.size < seq) {
        yield { seal: seal.value, line: sealLine(seal.value) };
        seal = seals.next();
      }
      yield { seq, line: json };
      while (!seal.done && seal.value.size === seq) {
        yield { seal: seal.value, line: sealLine(seal.value) };
        seal = seals.next();
      }
    }
    while (!seal.done) {
      yield { seal: seal.value, line: sealLine(seal.value) };
      seal = seals.next();
    }
  }

  /**
   * The export: every line of the chain with since ≤ ts ≤ until, as JSON text. A bounded export
   * that starts after the beginning of the chain starts at the seal boundary at or before
   * `since` with a `_chain_bridge` record anchored on that seal, and one that ends before the
   * end of the chain ends at the seal boundary at or after `until` (when that seal exists yet),
   * so it verifies on its own with every event covered by a seal.
   */
  *exportTexts(org: string, sinceMs?: number, untilMs?: number): Generator<string> {
    const { lo, hi: last } = this.window(org, sinceMs, untilMs);
    if (lo > last) return;
    const hi = this.exportEnd(org, last, untilMs);
    let start = this.firstSeq(org);
    const stored = this.store.auditMeta.get([org, BRIDGE_KIND]) as Record<string, unknown> | undefined;
    if (stored !== undefined && lo <= start) yield this.bridgeLine(org) as string;
    if (lo > start) {
      const anchor = this.sealAtOrBefore(org, lo - 1);
      if (anchor !== undefined && anchor.size >= start) {
        yield JSON.stringify(this.#bridgeAt(org, anchor));
        start = anchor.size + 1;
      } else if (stored !== undefined) {
        yield JSON.stringify({ _chain_bridge: stored });
      }
    }
    for (const l of this.lines(org, start, hi, start - 1)) yield l.line;
  }

  /**
   * The last seq of an export whose window ends at `last`: with `until`, the seal boundary at or
   * after it (when that seal exists yet), else `last`.
   */
  exportEnd(org: string, last: number, untilMs: number | undefined): number {
    return untilMs === undefined ? last : (this.coveringSeal(org, last)?.size ?? last);
  }

  /** `exportTexts` as parsed lines. */
  *exportLines(org: string, sinceMs?: number, untilMs?: number): Generator<ChainLine> {
    for (const text of this.exportTexts(org, sinceMs, untilMs)) yield JSON.parse(text) as ChainLine;
  }

  #bridgeAt(org: string, seal: StoredSeal): { _chain_bridge: Record<string, JsonValue> } {
    const read = nodeReader(this.store, org);
    const head = this.eventAt(org, seal.size);
    return {
      _chain_bridge: {
        bridged_from_seq: 1,
        bridged_to_seq: seal.size,
        bridged_hash: head?.hash ?? '',
        subtree_hashes: compactRange(seal.size, read).map(toHex),
        last_seal: { seq: seal.seq, size: seal.size, note: seal.note },
        archive: { omitted: 'outside the export range' },
      },
    };
  }

  /** Receipt of an event: undefined when there is no such event, null while it is unsealed. */
  receipt(org: string, eventId: string): { receipt: Receipt; seal: StoredSeal } | null | undefined {
    const found = this.locate(org, eventId);
    if (found === undefined) return undefined;
    const { seq, event: e } = found;
    if (!isHash(e.hash)) return undefined;
    const seal = this.coveringSeal(org, seq);
    if (seal === undefined) return null;
    const receipt = buildReceipt({ id: e.id, seq, hash: e.hash }, seal, nodeReader(this.store, org));
    return { receipt, seal };
  }

  /** Consistency proof between two seal sizes; undefined when either size has no seal. */
  consistency(org: string, fromSize: number, toSize: number): ConsistencyResult | undefined {
    for (const [name, v] of [
      ['from', fromSize],
      ['to', toSize],
    ] as const) {
      if (!Number.isSafeInteger(v) || v < 1) {
        throw new ServiceError('invalid_request', `${name} must be a positive integer (a seal's tree size)`, {
          param: name,
        });
      }
    }
    if (fromSize > toSize)
      throw new ServiceError('invalid_request', 'from must not exceed to', { param: 'from' });
    const a = this.sealAtSize(org, fromSize);
    const b = this.sealAtSize(org, toSize);
    if (a === undefined || b === undefined) return undefined;
    const proof = consistencyProof(fromSize, toSize, nodeReader(this.store, org));
    return {
      from_size: fromSize,
      to_size: toSize,
      from_checkpoint: a.note,
      to_checkpoint: b.note,
      consistency_proof: proof.map(toHex),
    };
  }
}

export function withSeal(e: AuditEvent, seal: SealRef): AuditEvent {
  (e as { seal?: SealRef }).seal = seal;
  return e;
}

/** The smallest integer key after `seq`. */
function nextKey(seq: number): number {
  return Math.floor(seq) + 1;
}
