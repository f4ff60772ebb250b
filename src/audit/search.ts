import { ServiceError } from '../core/errors.js';
import type { ChainReader } from './chain-reader.js';
import { withSeal } from './chain-reader.js';
import {
  boundMs,
  decodeCursor,
  derivedPipeline,
  encodeCursor,
  type Filters,
  HOUR_KIND,
  INDEX_KINDS,
  INDEXED_FILTERS,
  MAX_KEY,
  MIN_KEY,
  MINUTE_KIND,
} from './layout.js';
import type { Bucket } from './org-head.js';
import { countSeqs, DerivedIdList, PostingList, type SeqIndex, SortedSeqs, UnionIndex } from './postings.js';
import { addEvent, emptyRollup, mergeRollup, planRange, type Rollup, toOverview } from './rollups.js';
import type { AuditEvent, AuditOverview, AuditPage, AuditQuery } from './types.js';

/**
 * Rows one search call examines at most (tens of ms of work); past it the page ends early, with
 * fewer results and a cursor to go on, instead of holding the event loop for a long scan.
 */
export const SCAN_BUDGET = 25_000;
/** Index entries counted per filter when choosing the most selective index. */
const PROBE_CAP = 512;
export const DEFAULT_LIMIT = 100;
export const MAX_LIMIT = 1000;

interface Plan {
  /** The driving index, or undefined to walk the events themselves. */
  readonly driver: SeqIndex | undefined;
  /** Other indexed filters, checked against their index before the event is read. */
  readonly checks: readonly SeqIndex[];
  /** Lower-cased `q`. */
  readonly needle: string | undefined;
}

interface Step {
  readonly events: AuditEvent[];
  /** Last seq examined (the next step continues past it), or undefined when nothing was. */
  readonly last: number | undefined;
  /** True when more rows may match past `last`. */
  readonly more: boolean;
}

const Q_FIELDS = ['event_type', 'reason', 'rule_id', 'model', 'provider', 'agent_id'] as const;

function has(s: unknown, needle: string): boolean {
  return typeof s === 'string' && s.toLowerCase().includes(needle);
}

/** `q`: a case-insensitive substring of event_type, reason, rule_id, model, provider, agent_id or tool. */
export function matchesText(e: AuditEvent, needle: string): boolean {
  for (const f of Q_FIELDS) if (has(e[f], needle)) return true;
  const d = e.details as { tool?: unknown; action?: { tool?: unknown } } | null | undefined;
  return d !== null && d !== undefined && (has(d.tool, needle) || has(d.action?.tool, needle));
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === '' ? undefined : v;
}

/** The query engine behind search, bySession/byTask/byPipeline and scanEvents. */
export class AuditSearch {
  constructor(
    private readonly reader: ChainReader,
    private readonly budget = SCAN_BUDGET,
    /** Seqs of a buffered index not stored yet (the writer's memory; see `PendingPostings`). */
    private readonly pending: (org: string, kind: string, value: string) => readonly number[] = () => [],
  ) {}

  search(org: string, q: AuditQuery): AuditPage {
    const limit = q.limit ?? DEFAULT_LIMIT;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
      throw new ServiceError('invalid_request', `limit must be an integer from 1 to ${MAX_LIMIT}`, {
        param: 'limit',
      });
    }
    const cursor = q.cursor === undefined || q.cursor === '' ? undefined : decodeCursor(q.cursor);
    const w = this.#window(org, q);
    if (cursor !== undefined) w.hi = Math.min(w.hi, cursor - 1);
    const step = this.#step(org, this.#plan(org, q, w.lo, w.hi), w.lo, w.hi, 'desc', limit, this.budget);
    const resolve = this.reader.sealResolver(org);
    for (const e of step.events) withSeal(e, resolve(e.seq));
    return {
      data: step.events,
      next_cursor: step.more && step.last !== undefined ? encodeCursor(step.last) : null,
    };
  }

  /** Events matching the filters, oldest first, at most `limit`, from seq `fromSeq` on. */
  *scan(org: string, filters: Filters, limit: number, fromSeq = 1): Generator<AuditEvent> {
    const w = this.#window(org, filters);
    w.lo = Math.max(w.lo, fromSeq);
    const plan = this.#plan(org, filters, w.lo, w.hi);
    const resolve = this.reader.sealResolver(org);
    let left = limit;
    while (left > 0 && w.lo <= w.hi) {
      const step = this.#step(org, plan, w.lo, w.hi, 'asc', Math.min(left, MAX_LIMIT), this.budget);
      for (const e of step.events) yield withSeal(e, resolve(e.seq));
      left -= step.events.length;
      if (!step.more || step.last === undefined) return;
      w.lo = Math.floor(step.last) + 1;
    }
  }

  /**
   * One indexed filter, oldest first, a page at a time: `cursor` is the `next_cursor` of the page
   * before (the last seq it covered), as in `search`.
   */
  view(
    org: string,
    filter: 'pipeline_id' | 'session_id' | 'task_id',
    value: string,
    limit: number,
    cursor?: string,
  ): AuditPage {
    const w = this.#window(org, {});
    if (cursor !== undefined && cursor !== '') w.lo = Math.max(w.lo, Math.floor(decodeCursor(cursor)) + 1);
    const plan = this.#plan(org, { [filter]: value }, w.lo, w.hi);
    const step = this.#step(org, plan, w.lo, w.hi, 'asc', limit, this.budget);
    const resolve = this.reader.sealResolver(org);
    for (const e of step.events) withSeal(e, resolve(e.seq));
    return {
      data: step.events,
      next_cursor: step.more && step.last !== undefined ? encodeCursor(step.last) : null,
    };
  }

  /** One indexed filter, oldest first. */
  byFilter(
    org: string,
    filter: 'pipeline_id' | 'session_id' | 'task_id',
    value: string,
    limit: number,
  ): AuditEvent[] {
    return [...this.scan(org, { [filter]: value }, limit)];
  }

  /** `unwritten`: buckets whose counts are ahead of the stored ones (the writer's memory). */
  overview(
    org: string,
    range: { since?: string; until?: string },
    unwritten?: ReadonlySet<Bucket>,
  ): AuditOverview {
    return toOverview(this.rollup(org, range, unwritten));
  }

  /** The counts of a time range: stored rollups for whole minutes and hours, events at the edges. */
  rollup(org: string, range: { since?: string; until?: string }, unwritten?: ReadonlySet<Bucket>): Rollup {
    const a = boundMs(range.since, 'since') ?? Number.NEGATIVE_INFINITY;
    const until = boundMs(range.until, 'until');
    const b = until === undefined ? Number.POSITIVE_INFINITY : until + 1;
    const acc = emptyRollup();
    const plan = planRange(a, b);
    for (const [x, y] of plan.hours) this.#buckets(org, HOUR_KIND, x, y, acc, unwritten);
    for (const [x, y] of plan.minutes) this.#buckets(org, MINUTE_KIND, x, y, acc, unwritten);
    if (plan.scans.length > 0) {
      const lo0 = this.reader.firstSeq(org);
      const hi0 = this.reader.lastSeq(org);
      for (const [x, y] of plan.scans) {
        if (hi0 === 0) break;
        const lo = this.reader.seqAtOrAfter(org, x, lo0, hi0);
        const hi = this.reader.seqAtOrAfter(org, y, lo, hi0) - 1;
        for (const { json } of this.reader.eventTexts(org, lo, hi))
          addEvent(acc, JSON.parse(json) as AuditEvent);
      }
    }
    return acc;
  }

  #buckets(
    org: string,
    kind: string,
    x: number,
    y: number,
    acc: Rollup,
    unwritten: ReadonlySet<Bucket> | undefined,
  ): void {
    const start = Number.isFinite(x) ? x : MIN_KEY;
    const end = Number.isFinite(y) ? y : MAX_KEY;
    // Buckets with counts not stored yet replace their stored version.
    const fresh = new Set<number>();
    for (const b of unwritten ?? []) {
      if (b.kind !== kind || b.start < x || b.start >= y) continue;
      fresh.add(b.start);
      mergeRollup(acc, b.rollup);
    }
    for (const { key, value } of this.reader.store.auditMeta.getRange({
      start: [org, kind, start],
      end: [org, kind, end],
    })) {
      if (fresh.has((key as [string, string, number])[2])) continue;
      if (typeof value === 'string') mergeRollup(acc, JSON.parse(value) as Rollup);
    }
  }

  #window(org: string, f: Filters): { lo: number; hi: number } {
    return this.reader.window(org, boundMs(f.since, 'since'), boundMs(f.until, 'until'));
  }

  /** The index of (kind, value): its stored lists and the postings the writer holds in memory. */
  #index(org: string, kind: string, value: string): SeqIndex {
    const stored = new PostingList(this.reader.store, org, kind, value);
    const unstored = this.pending(org, kind, value);
    // A copy: the writer appends to (and trims) its list while a search pages through it.
    return unstored.length === 0 ? stored : new UnionIndex(stored, new SortedSeqs(unstored.slice()));
  }

  /** Picks the most selective index among the filters given: the fewest entries in the window. */
  #plan(org: string, f: Filters, lo: number, hi: number): Plan {
    const given: SeqIndex[] = [];
    const store = this.reader.store;
    for (const name of INDEXED_FILTERS) {
      const v = nonEmpty(f[name]);
      if (v === undefined) continue;
      const derived = name === 'session_id' || name === 'task_id' ? name : undefined;
      const pipeline = derived === undefined ? undefined : derivedPipeline(derived, v);
      const own = this.#index(org, INDEX_KINDS[name], v);
      given.push(
        derived !== undefined && pipeline !== undefined
          ? new DerivedIdList(
              store,
              org,
              derived,
              v,
              own,
              this.#index(org, INDEX_KINDS.pipeline_id, pipeline),
            )
          : own,
      );
    }
    const q = nonEmpty(f.q);
    const needle = q?.toLowerCase();
    if (given.length <= 1) return { driver: given[0], checks: [], needle };
    let best = 0;
    let bestCount = Number.POSITIVE_INFINITY;
    for (let i = 0; i < given.length; i++) {
      const n = countSeqs(given[i] as SeqIndex, lo, hi, PROBE_CAP);
      if (n < bestCount) {
        best = i;
        bestCount = n;
      }
      if (n === 0) break;
    }
    return { driver: given[best], checks: given.filter((_, i) => i !== best), needle };
  }

  /** Walks [lo, hi] in `dir` until `limit` matches or `budget` rows examined. */
  #step(
    org: string,
    plan: Plan,
    lo: number,
    hi: number,
    dir: 'asc' | 'desc',
    limit: number,
    budget: number,
  ): Step {
    const events: AuditEvent[] = [];
    if (lo > hi) return { events, last: undefined, more: false };
    const { auditEvents } = this.reader.store;
    let last: number | undefined;
    let examined = 0;
    const accept = (seq: number, json: string | undefined): void => {
      for (const check of plan.checks) if (!check.has(seq)) return;
      const raw = json ?? (auditEvents.get([org, seq]) as string | undefined);
      if (typeof raw !== 'string') return;
      const e = JSON.parse(raw) as AuditEvent;
      if (plan.needle !== undefined && !matchesText(e, plan.needle)) return;
      events.push(e);
    };
    if (plan.driver !== undefined) {
      for (const seq of plan.driver.seqs(lo, hi, dir)) {
        if (events.length === limit || examined === budget) return { events, last, more: true };
        examined++;
        last = seq;
        accept(seq, undefined);
      }
      return { events, last, more: false };
    }
    const range =
      dir === 'desc'
        ? { start: [org, hi], end: [org, lo - 1], reverse: true }
        : { start: [org, lo], end: [org, hi + 1] };
    for (const { key, value } of auditEvents.getRange(range)) {
      if (events.length === limit || examined === budget) return { events, last, more: true };
      const seq = (key as [string, number])[1];
      examined++;
      last = seq;
      accept(seq, value as string);
    }
    return { events, last, more: false };
  }
}
