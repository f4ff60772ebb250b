import { createHash } from 'node:crypto';

/** One revocation held by the list: its time and its item of the public list, serialised once. */
export interface ListedRevocation {
  readonly jti: string;
  /** The org whose mandate it revokes (a mandate's `org` claim must match). */
  readonly org: string;
  /** `revoked_at` in ms. */
  readonly at: number;
  /** `{"jti":…,"org_sha256":…,"revoked_at":…}`, as the public list shows it. */
  readonly item: string;
  /** The org of a revocation by bare jti (counted against that org's allowance), else undefined. */
  readonly unprovenOrg: string | undefined;
}

/**
 * Every row of the revocation table, in memory, ordered by `revoked_at`, with the public list's
 * items joined once and reused: a GET costs a string concatenation, not a scan of the table.
 *
 * A new revocation is appended to the joined text. Expired items are dropped from its front when
 * it is rebuilt, which happens at most once per `refreshMs` (unless a revocation lands out of
 * order or a sweep removes items still shown), so an item may be shown up to `refreshMs` past
 * retention. The rows themselves leave the list when the sweep deletes them from the table.
 */
export class RevocationList {
  /** Sorted by `at` (stable: equal times keep their arrival order). */
  private entries: ListedRevocation[] = [];
  /** `entries[shown..]` are listed. */
  private shown = 0;
  /** The items of `entries[shown..]` joined by commas; undefined when it must be rebuilt. */
  private items: string | undefined = '';
  private builtAt = Number.NEGATIVE_INFINITY;
  private readonly unproven = new Map<string, number>();
  /** How many times the joined text was rebuilt from the entries (for tests and metrics). */
  builds = 0;

  constructor(
    private readonly retentionMs: number,
    private readonly refreshMs: number,
  ) {}

  get size(): number {
    return this.entries.length;
  }

  /** Replaces the contents with `rows` (in any order): the load at start. */
  load(rows: readonly { jti: string; org: string; revoked_at: string; unprovenOrg?: string }[]): void {
    const entries = rows.map((r) => listed(r.jti, r.org, r.revoked_at, r.unprovenOrg));
    entries.sort((a, b) => a.at - b.at);
    this.entries = entries;
    this.unproven.clear();
    for (const e of entries) if (e.unprovenOrg !== undefined) this.count(e.unprovenOrg, 1);
    this.shown = 0;
    this.items = undefined;
  }

  /**
   * Adds a committed revocation. `reserved` says its org's allowance was already taken with
   * `reserve` (a revocation by bare jti on its way to the store).
   */
  add(jti: string, org: string, revokedAt: string, unprovenOrg?: string, reserved = false): void {
    const e = listed(jti, org, revokedAt, unprovenOrg);
    if (unprovenOrg !== undefined && !reserved) this.count(unprovenOrg, 1);
    const n = this.entries.length;
    if (n === 0 || (this.entries[n - 1] as ListedRevocation).at <= e.at) {
      this.entries.push(e);
      if (this.items !== undefined) this.items = this.items === '' ? e.item : `${this.items},${e.item}`;
      return;
    }
    // Out of order (an earlier stamp committed later): in place, and the text rebuilt next time.
    const i = upperBound(this.entries, e.at);
    this.entries.splice(i, 0, e);
    this.items = undefined;
  }

  /** The joined items of the revocations live at `now` (and some expired up to `refreshMs` ago). */
  text(now: number): string {
    const front = this.entries[this.shown];
    if (
      this.items === undefined ||
      now < this.builtAt ||
      (front !== undefined && front.at <= now - this.retentionMs && now - this.builtAt >= this.refreshMs)
    ) {
      this.rebuild(now);
    }
    return this.items as string;
  }

  private rebuild(now: number): void {
    this.shown = upperBound(this.entries, now - this.retentionMs);
    const parts = new Array<string>(this.entries.length - this.shown);
    for (let i = this.shown; i < this.entries.length; i++)
      parts[i - this.shown] = (this.entries[i] as ListedRevocation).item;
    this.items = parts.join(',');
    this.builtAt = now;
    this.builds++;
  }

  /** Up to `max` of the oldest revocations made at or before `cutoff`. */
  stale(cutoff: number, max: number): ListedRevocation[] {
    const end = Math.min(upperBound(this.entries, cutoff), max);
    return this.entries.slice(0, end);
  }

  /** Forgets revocations deleted from the store (a batch `stale` gave). */
  removed(batch: readonly ListedRevocation[]): void {
    if (batch.length === 0) return;
    const gone = new Set(batch);
    let last = Number.NEGATIVE_INFINITY;
    for (const e of batch) if (e.at > last) last = e.at;
    const kept: ListedRevocation[] = [];
    let i = 0;
    // They were the front; a revocation stamped as early may have been added among them since.
    for (; i < this.entries.length && gone.size > 0; i++) {
      const e = this.entries[i] as ListedRevocation;
      if (e.at > last) break;
      if (gone.delete(e)) {
        if (e.unprovenOrg !== undefined) this.count(e.unprovenOrg, -1);
      } else kept.push(e);
    }
    this.entries.splice(0, i, ...kept);
    if (i <= this.shown) this.shown -= i - kept.length;
    else {
      this.shown = 0;
      this.items = undefined;
    }
  }

  /** Live revocations by bare jti of `org` (listed or reserved). */
  unprovenCount(org: string): number {
    return this.unproven.get(org) ?? 0;
  }

  /** Takes one of `org`'s allowance of `cap` revocations by bare jti; false when none is left. */
  reserve(org: string, cap: number): boolean {
    if (this.unprovenCount(org) >= cap) return false;
    this.count(org, 1);
    return true;
  }

  /** Gives back a reservation whose revocation was not recorded. */
  release(org: string): void {
    this.count(org, -1);
  }

  private count(org: string, delta: number): void {
    const n = (this.unproven.get(org) ?? 0) + delta;
    if (n > 0) this.unproven.set(org, n);
    else this.unproven.delete(org);
  }
}

/**
 * How the public list names a revocation's org: the SHA-256 (hex) of its id. A verifier holding
 * the mandate compares it with its `org` claim; the list itself spells no tenant's name.
 */
export function orgDigest(org: string): string {
  return createHash('sha256').update(org, 'utf8').digest('hex');
}

function listed(
  jti: string,
  org: string,
  revokedAt: string,
  unprovenOrg: string | undefined,
): ListedRevocation {
  return {
    jti,
    org,
    at: Date.parse(revokedAt),
    item: JSON.stringify({ jti, org_sha256: orgDigest(org), revoked_at: revokedAt }),
    unprovenOrg,
  };
}

/** The index of the first entry whose `at` is after `t`. */
function upperBound(entries: readonly ListedRevocation[], t: number): number {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((entries[mid] as ListedRevocation).at <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
