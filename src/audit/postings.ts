import type { Store } from '../store/db.js';
import { indexKey, MAX_KEY } from './layout.js';

/**
 * Search indexes as posting lists: for each (kind, value) a write stores ONE entry
 * `[org, kind, value, last seq] → [seq, …]` (ascending) holding the seqs with that value since
 * the value's previous list, instead of one entry per event. Lists hold disjoint seq ranges
 * written in seq order, so lists ordered by their last seq are ordered by every seq they hold
 * (readers also tolerate a list that repeats an older one's seqs: see `PostingList.seqs`).
 *
 * `PendingPostings` holds the postings of one org not stored yet. They are collected as events
 * are appended and stored together, once a second with the org's rollups and its postings mark,
 * or sooner when many lists wait (ChainLog `#flushPostings`): one transaction that writes many
 * lists dirties each index page once, where a list per value per commit dirtied them per commit.
 * Search adds them to the stored lists (`UnionIndex`). After a crash the next start rebuilds them
 * from the events past the mark.
 */
export class PendingPostings {
  readonly #kinds = new Map<string, Map<string, number[]>>();
  #size = 0;

  /** Seqs held (0 when nothing waits). */
  get size(): number {
    return this.#size;
  }

  /**
   * Appends `seq` to the list of (kind, value); a value that is not a string has no entry. 1 when
   * this began a list (an entry the next `write` stores), else 0.
   */
  add(kind: string, value: string | null | undefined, seq: number): number {
    if (typeof value !== 'string') return 0;
    this.#size++;
    let byValue = this.#kinds.get(kind);
    if (byValue === undefined) this.#kinds.set(kind, (byValue = new Map()));
    const list = byValue.get(value);
    if (list !== undefined) {
      list.push(seq);
      return 0;
    }
    byValue.set(value, [seq]);
    return 1;
  }

  /** The seqs of (kind, value) not known to be stored, ascending. */
  seqs(kind: string, value: string): readonly number[] {
    return this.#kinds.get(kind)?.get(value) ?? NO_SEQS;
  }

  /**
   * Stores every list (inside the writer's transaction) and returns what it wrote, for `stored`
   * once the transaction has committed. Writing again before that (a second flush in the same
   * transaction) writes the same entries again. A list the store refuses is given to `refused`
   * and returned all the same, so `stored` drops it: retried, it would fail every flush.
   */
  write(store: Store, org: string, refused: (err: unknown) => void): PendingWrite[] {
    const written: PendingWrite[] = [];
    for (const [kind, byValue] of this.#kinds) {
      for (const [value, seqs] of byValue) {
        const last = seqs[seqs.length - 1] as number;
        const [k, v] = indexKey(kind, value);
        try {
          // Encoded by putSync (inside the transaction) before it returns: no copy needed.
          store.auditIndex.putSync([org, k, v, last], seqs);
        } catch (err) {
          refused(err);
        }
        written.push({ kind, value, last });
      }
    }
    return written;
  }

  /** After the commit of `written`: drops the seqs it stored (appends since then stay). */
  stored(written: readonly PendingWrite[]): void {
    for (const { kind, value, last } of written) {
      const byValue = this.#kinds.get(kind);
      const seqs = byValue?.get(value);
      if (byValue === undefined || seqs === undefined) continue;
      let n = 0;
      while (n < seqs.length && (seqs[n] as number) <= last) n++;
      this.#size -= n;
      if (n === seqs.length) byValue.delete(value);
      else seqs.splice(0, n);
    }
  }
}

export interface PendingWrite {
  readonly kind: string;
  readonly value: string;
  readonly last: number;
}

const NO_SEQS: readonly number[] = [];

type ListKey = [string, string, string, number];

function asSeqs(v: unknown): readonly number[] {
  return Array.isArray(v) ? (v as number[]) : [];
}

/** What search needs of an index: membership and ordered seqs in a range. */
export interface SeqIndex {
  has(seq: number): boolean;
  seqs(lo: number, hi: number, dir: 'asc' | 'desc'): Generator<number>;
}

/** How many seqs of `index` lie in [lo, hi], counting up to `cap`. */
export function countSeqs(index: SeqIndex, lo: number, hi: number, cap: number): number {
  let n = 0;
  for (const _ of index.seqs(lo, hi, 'asc')) if (++n >= cap) break;
  return n;
}

/** Reads the posting lists of one (kind, value) of an org. */
export class PostingList implements SeqIndex {
  readonly #store: Store;
  readonly #org: string;
  readonly #kind: string;
  readonly #value: string;
  // The list last read by `has` (candidates arrive in order, so it is usually the next hit).
  #first = 1;
  #last = 0;
  #cached: readonly number[] = [];

  /** `kind` and `value` as filtered on: keyed through `indexKey` like the writer's lists. */
  constructor(store: Store, org: string, kind: string, value: string) {
    this.#store = store;
    this.#org = org;
    [this.#kind, this.#value] = indexKey(kind, value);
  }

  #key(seq: number): ListKey {
    return [this.#org, this.#kind, this.#value, seq];
  }

  /** The first list whose last seq ≥ seq. */
  #listFrom(seq: number): { last: number; seqs: readonly number[] } | undefined {
    for (const { key, value } of this.#store.auditIndex.getRange({
      start: this.#key(seq),
      end: this.#key(MAX_KEY),
      limit: 1,
    })) {
      return { last: (key as ListKey)[3], seqs: asSeqs(value) };
    }
    return undefined;
  }

  /** Is `seq` in this index? */
  has(seq: number): boolean {
    if (seq < this.#first || seq > this.#last) {
      const list = this.#listFrom(seq);
      if (list === undefined) return false;
      this.#cached = list.seqs;
      this.#first = list.seqs[0] ?? list.last;
      this.#last = list.last;
    }
    return binarySearch(this.#cached, seq);
  }

  /** The seqs in [lo, hi], in `dir` order. Reads one list at a time. */
  *seqs(lo: number, hi: number, dir: 'asc' | 'desc'): Generator<number> {
    if (lo > hi) return;
    if (dir === 'asc') {
      let from = lo;
      for (;;) {
        const list = this.#listFrom(from);
        if (list === undefined) return;
        for (const s of list.seqs) {
          if (s > hi) return;
          // `from`, not `lo`: a list that repeats seqs of an earlier one yields them once (an
          // older version that stored lists per commit and then crashed leaves such lists).
          if (s >= from) yield s;
        }
        if (list.last >= hi) return;
        from = list.last + 1;
      }
    }
    let upTo = hi;
    const top = this.#listFrom(hi);
    if (top !== undefined) {
      yield* descending(top.seqs, lo, hi);
      upTo = (top.seqs[0] ?? top.last) - 1;
    }
    while (upTo >= lo) {
      let found: { last: number; seqs: readonly number[] } | undefined;
      for (const { key, value } of this.#store.auditIndex.getRange({
        start: this.#key(upTo),
        end: this.#key(lo - 1),
        reverse: true,
        limit: 1,
      })) {
        found = { last: (key as ListKey)[3], seqs: asSeqs(value) };
      }
      if (found === undefined) return;
      yield* descending(found.seqs, lo, hi);
      upTo = (found.seqs[0] ?? found.last) - 1;
    }
  }
}

function* descending(seqs: readonly number[], lo: number, hi: number): Generator<number> {
  for (let i = seqs.length - 1; i >= 0; i--) {
    const s = seqs[i] as number;
    if (s < lo) return;
    if (s <= hi) yield s;
  }
}

function binarySearch(sorted: readonly number[], x: number): boolean {
  let a = 0;
  let b = sorted.length - 1;
  while (a <= b) {
    const mid = (a + b) >> 1;
    const v = sorted[mid] as number;
    if (v === x) return true;
    if (v < x) a = mid + 1;
    else b = mid - 1;
  }
  return false;
}

/** A SeqIndex over an ascending array held in memory (pending postings). */
export class SortedSeqs implements SeqIndex {
  constructor(private readonly sorted: readonly number[]) {}

  has(seq: number): boolean {
    return binarySearch(this.sorted, seq);
  }

  *seqs(lo: number, hi: number, dir: 'asc' | 'desc'): Generator<number> {
    if (dir === 'desc') {
      yield* descending(this.sorted, lo, hi);
      return;
    }
    for (const s of this.sorted) {
      if (s > hi) return;
      if (s >= lo) yield s;
    }
  }
}

/** Both indexes as one: ordered, each seq once (a seq may be in both for a moment). */
export class UnionIndex implements SeqIndex {
  constructor(
    private readonly a: SeqIndex,
    private readonly b: SeqIndex,
  ) {}

  has(seq: number): boolean {
    return this.a.has(seq) || this.b.has(seq);
  }

  seqs(lo: number, hi: number, dir: 'asc' | 'desc'): Generator<number> {
    return mergeSeqs(this.a.seqs(lo, hi, dir), this.b.seqs(lo, hi, dir), dir);
  }
}

/** Two ordered seq streams merged in `dir` order, a seq found in both given once. */
function* mergeSeqs(a: Iterator<number>, b: Iterator<number>, dir: 'asc' | 'desc'): Generator<number> {
  let x = a.next();
  let y = b.next();
  const before = dir === 'asc' ? (p: number, q: number) => p < q : (p: number, q: number) => p > q;
  while (x.done !== true || y.done !== true) {
    if (y.done === true || (x.done !== true && before(x.value, y.value))) {
      yield x.value as number;
      x = a.next();
    } else if (x.done === true || before(y.value, x.value)) {
      yield y.value;
      y = b.next();
    } else {
      yield x.value; // in both: once
      x = a.next();
      y = b.next();
    }
  }
}

/**
 * The events of a session or task id of the derived form (`ses_X`, `tsk_X`; see layout.ts): those
 * indexed under the id itself (the caller named it, or data written before derived ids), merged
 * with the events of pipeline `pl_X` whose field holds the id (govgate assigned it; no entry of
 * its own). A pipeline holds the few events of one call, so checking them costs a few reads.
 */
export class DerivedIdList implements SeqIndex {
  readonly #own: SeqIndex;
  readonly #via: SeqIndex;
  readonly #store: Store;
  readonly #org: string;
  readonly #field: 'session_id' | 'task_id';
  readonly #value: string;
  readonly #checked = new Map<number, boolean>();

  /** `own`: the id's own index; `via`: the index of pipeline `pl_X`. */
  constructor(
    store: Store,
    org: string,
    field: 'session_id' | 'task_id',
    value: string,
    own: SeqIndex,
    via: SeqIndex,
  ) {
    this.#store = store;
    this.#org = org;
    this.#field = field;
    this.#value = value;
    this.#own = own;
    this.#via = via;
  }

  /** Does the event at `seq` (in the pipeline's list) carry this id? */
  #holds(seq: number): boolean {
    let ok = this.#checked.get(seq);
    if (ok === undefined) {
      const raw: unknown = this.#store.auditEvents.get([this.#org, seq]);
      ok =
        typeof raw === 'string' && (JSON.parse(raw) as Record<string, unknown>)[this.#field] === this.#value;
      this.#checked.set(seq, ok);
    }
    return ok;
  }

  has(seq: number): boolean {
    return this.#own.has(seq) || (this.#via.has(seq) && this.#holds(seq));
  }

  seqs(lo: number, hi: number, dir: 'asc' | 'desc'): Generator<number> {
    // A seq in both (indexed twice by an older writer) comes once.
    return mergeSeqs(this.#own.seqs(lo, hi, dir), this.#viaSeqs(lo, hi, dir), dir);
  }

  *#viaSeqs(lo: number, hi: number, dir: 'asc' | 'desc'): Generator<number> {
    for (const seq of this.#via.seqs(lo, hi, dir)) if (this.#holds(seq)) yield seq;
  }
}
