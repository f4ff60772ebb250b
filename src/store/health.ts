import { constants } from 'node:os';
import { ServiceError } from '../core/errors.js';

/** LMDB's own codes for a store that cannot take more (`lmdb.h`). */
const MDB_CODES: Readonly<Record<number, string>> = { [-30792]: 'MDB_MAP_FULL', [-30795]: 'MDB_PANIC' };

/**
 * Errors of the file system under the store. A full disk mostly shows as EIO: LMDB writes its
 * pages with pwrite, and a write the disk can only take in part is reported as EIO.
 */
const STORAGE_ERRNOS = ['ENOSPC', 'EDQUOT', 'EFBIG', 'EIO', 'EROFS'] as const;

/**
 * The name of the storage failure `err` is (lmdb throws an Error whose `code` is an errno or an
 * MDB_ code; node's fs, one whose `code` is the errno's name), or undefined for anything else (a
 * bug, a ServiceError thrown inside a transaction).
 */
export function storageFailure(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string')
    return (STORAGE_ERRNOS as readonly string[]).includes(code) ? code : undefined;
  if (typeof code !== 'number') return undefined;
  const mdb = MDB_CODES[code];
  if (mdb !== undefined) return mdb;
  for (const name of STORAGE_ERRNOS) if (constants.errno[name] === code) return name;
  return undefined;
}

/** The free space the store keeps (SERVICE_STORE_MIN_FREE_MB): below it, commits are refused. */
export interface SpaceReserve {
  readonly minFreeBytes: number;
  /** Bytes free for the store's files (undefined when it cannot be read: nothing is refused). */
  readonly freeBytes: () => number | undefined;
}

/** A commit refused before LMDB was asked: less free space than the reserve. */
export class LowSpaceError extends Error {
  readonly code = constants.errno.ENOSPC;
  constructor(freeBytes: number, minFreeBytes: number) {
    super(
      `${mib(freeBytes)} MiB free for the data dir, below SERVICE_STORE_MIN_FREE_MB (${mib(minFreeBytes)})`,
    );
    this.name = 'LowSpaceError';
  }
}

const mib = (bytes: number): number => Math.floor(bytes / 1_048_576);

/**
 * How long a free-space reading is used. At this gateway's fastest append rate (~30,000 events/s
 * of ~2 KB stored each) the disk takes about 6 MB in that time, well inside the default reserve.
 */
const SPACE_READ_MS = 100;

export interface StoreHealthEvents {
  /** The first failed commit after a successful one (or after the start). */
  readonly failed?: (fields: { code: string; error: string }) => void;
  /** The first successful commit after a failure; `refused`: commits that failed meanwhile. */
  readonly recovered?: (fields: { code: string; failed_ms: number; refused: number }) => void;
}

interface Failure {
  readonly code: string;
  readonly message: string;
  readonly since: number;
  refused: number;
}

/**
 * Whether the store can commit. It refuses commits itself while the data dir has less free space
 * than its reserve (`SpaceReserve`, read at most every 100 ms, and before each commit while it
 * refuses), so a filling disk is met before LMDB's writes fail: lmdb-js 3.5.6 formats the error of
 * a page write that fails outright into a 100-byte heap buffer it can overrun (mdb.c,
 * `mdb_page_flush`), which can abort the process. A commit that fails anyway for want of storage
 * (a disk filled faster than that, a quota, an I/O error) also makes the store unwritable. It is
 * writable again once a commit succeeds; each change is reported once (`StoreHealthEvents`), not
 * per commit. While unwritable, `check` tries a small write (`probe`, one at a time), so readiness
 * and the requests that would write learn of free space without waiting for other traffic: a load
 * balancer sends none to an instance that is not ready.
 */
export class StoreHealth {
  #failure: Failure | undefined;
  #probing: Promise<void> | undefined;
  #free: number | undefined;
  #readAt = Number.NEGATIVE_INFINITY;
  readonly #probe: () => Promise<void>;
  readonly #events: StoreHealthEvents;
  readonly #reserve: SpaceReserve | undefined;
  readonly #now: () => number;

  constructor(
    probe: () => Promise<void>,
    opts: { events?: StoreHealthEvents; reserve?: SpaceReserve; now?: () => number } = {},
  ) {
    this.#probe = probe;
    this.#events = opts.events ?? {};
    this.#reserve = opts.reserve !== undefined && opts.reserve.minFreeBytes > 0 ? opts.reserve : undefined;
    this.#now = opts.now ?? (() => performance.now());
  }

  /** False from a commit that failed for want of storage until one succeeds. */
  get writable(): boolean {
    return this.#failure === undefined;
  }

  /** Before each commit: throws the store's 503 when the free space is below the reserve. */
  beforeCommit(): void {
    const reserve = this.#reserve;
    if (reserve === undefined) return;
    const now = this.#now();
    if (this.#failure !== undefined || now - this.#readAt >= SPACE_READ_MS) {
      this.#free = reserve.freeBytes();
      this.#readAt = now;
    }
    const free = this.#free;
    if (free !== undefined && free < reserve.minFreeBytes) {
      throw this.failed(new LowSpaceError(free, reserve.minFreeBytes));
    }
  }

  /**
   * A commit threw `err`: what its callers get instead. A storage failure becomes 503
   * `unavailable` (it is the store's state, not the caller's fault nor a bug, and the process
   * carries on); anything else is returned as it is.
   */
  failed(err: unknown): unknown {
    const code = storageFailure(err);
    if (code === undefined) return err;
    if (this.#failure === undefined) {
      const message = err instanceof Error ? err.message : String(err);
      this.#failure = { code, message, since: this.#now(), refused: 1 };
      this.#events.failed?.({ code, error: message });
    } else this.#failure.refused++;
    return new ServiceError(
      'unavailable',
      `govgate cannot record this request: its store cannot commit writes (${code}), so it is refused rather than answered unrecorded`,
      { cause: err },
    );
  }

  /** A commit succeeded. */
  committed(): void {
    const f = this.#failure;
    if (f === undefined) return;
    this.#failure = undefined;
    this.#events.recovered?.({
      code: f.code,
      failed_ms: Math.round(this.#now() - f.since),
      refused: f.refused,
    });
  }

  /**
   * Undefined when the store can take writes (nothing to wait for); else a probe write, shared by
   * the callers that come while it runs, which rejects with the store's 503 when it fails too.
   */
  check(): Promise<void> | undefined {
    if (this.#failure === undefined) {
      try {
        this.beforeCommit();
        return undefined;
      } catch (err) {
        return Promise.reject(err);
      }
    }
    this.#probing ??= this.#probe().finally(() => {
      this.#probing = undefined;
    });
    return this.#probing;
  }
}
