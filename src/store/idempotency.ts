import { ServiceError } from '../core/errors.js';
import type { Store } from './db.js';

export interface StoredResponse {
  readonly status: number;
  readonly content_type: string;
  readonly body: string;
  readonly pipeline_id: string;
}

interface StoredRecord extends StoredResponse {
  readonly body_hash: string;
  readonly created_ms: number;
  /** The answer was not kept (its org's replays were at their quota): a replay is refused. */
  readonly not_kept?: true;
}

type Key = [string, string, string];

/**
 * Idempotency-Key replays, per org and agent, kept `ttlMs`. A key in use by a call still running
 * is refused (409); a key reused with a different body is refused (409); only successful
 * responses are kept, so a failed call can be retried with the same key.
 *
 * The answers an org's replays keep are capped at `maxBytesPerOrg` (UTF-8 bytes of the bodies):
 * an answer past it is not kept, only that it was not, and the key's replay is refused (409
 * `idempotency_not_kept`) rather than made again upstream. One org's agents cannot fill the disk
 * every org writes to. The count is kept in memory: `keep` adds to it, and every sweep
 * (at a start, then hourly) counts the records again, so a start counts what earlier processes
 * kept and an answer replaced under its key is counted once again.
 */
export class IdempotencyStore {
  private readonly running = new Set<string>();
  /** Bytes of the answers kept per org (see the class comment). */
  private readonly kept = new Map<string, number>();
  /** While a sweep counts: when it started, and the bytes kept since (it does not count them). */
  private sweeping: { readonly since: number; readonly added: Map<string, number> } | undefined;

  constructor(
    private readonly store: Store,
    private readonly ttlMs: number,
    private readonly maxBytesPerOrg = Number.POSITIVE_INFINITY,
  ) {}

  /** Bytes of the answers kept for `orgId`'s replays, as counted. */
  keptBytes(orgId: string): number {
    return this.kept.get(orgId) ?? 0;
  }

  private count(counts: Map<string, number>, orgId: string, bytes: number): void {
    counts.set(orgId, (counts.get(orgId) ?? 0) + bytes);
  }

  /** A stored response to replay, or undefined after reserving the key for this call. */
  begin(
    orgId: string,
    agentUuid: string,
    key: string,
    bodyHash: string,
    legacyHash?: () => string,
    now = Date.now(),
  ): StoredResponse | undefined {
    const id = `${orgId}\0${agentUuid}\0${key}`;
    if (this.running.has(id)) {
      throw new ServiceError(
        'idempotency_in_progress',
        'a request with this Idempotency-Key is still running',
      );
    }
    const k: Key = [orgId, agentUuid, key];
    const rec = this.store.idempotency.get(k) as StoredRecord | undefined;
    if (rec !== undefined && rec.created_ms + this.ttlMs > now) {
      // Records kept before keys bound the canonical body hash its bytes; they still match those
      // bytes (they live one TTL at most).
      if (rec.body_hash !== bodyHash && rec.body_hash !== legacyHash?.()) {
        throw new ServiceError(
          'idempotency_mismatch',
          'this Idempotency-Key was used with a different request body',
          {
            param: 'Idempotency-Key',
          },
        );
      }
      if (rec.not_kept === true) {
        throw new ServiceError(
          'idempotency_not_kept',
          `the answer to this Idempotency-Key was not kept for a replay (the org's replays were at their quota); the call was pipeline ${rec.pipeline_id}`,
          { param: 'Idempotency-Key' },
        );
      }
      return rec;
    }
    this.running.add(id);
    return undefined;
  }

  /** Lets the key go: the call under it is over (its answer kept or not). */
  release(orgId: string, agentUuid: string, key: string): void {
    this.running.delete(`${orgId}\0${agentUuid}\0${key}`);
  }

  /**
   * Keeps `response` for the key's replays; resolves once the record is committed. The gateway
   * sends the answer only then, so a crash after the answer cannot lose the replay and let the
   * retry call the provider again. A write that fails (the store closing) resolves too: the
   * answer is sent, without a replay.
   */
  keep(
    orgId: string,
    agentUuid: string,
    key: string,
    bodyHash: string,
    response: StoredResponse,
  ): Promise<void> {
    const bytes = Buffer.byteLength(response.body, 'utf8');
    const rec: StoredRecord =
      this.keptBytes(orgId) + bytes <= this.maxBytesPerOrg
        ? { ...response, body_hash: bodyHash, created_ms: Date.now() }
        : {
            status: response.status,
            content_type: response.content_type,
            body: '',
            pipeline_id: response.pipeline_id,
            body_hash: bodyHash,
            created_ms: Date.now(),
            not_kept: true,
          };
    if (rec.body !== '') {
      this.count(this.kept, orgId, bytes);
      if (this.sweeping !== undefined) this.count(this.sweeping.added, orgId, bytes);
    }
    return this.store.writer
      .enqueue(() => this.store.idempotency.putSync([orgId, agentUuid, key] as Key, rec))
      .catch(() => {
        /* store closing: the replay record is lost, the call itself is answered */
      });
  }

  /**
   * Deletes the org's kept answers that hold a data subject's data (GDPR erasure): those of the
   * calls `pipelineIds` names (the calls whose events the erasure tombstones: an end user's
   * exchanges) and those whose body `holds` finds them in. Their keys are then answered as new
   * calls. Read `batch` at a time, each batch on its own turn; returns how many it deleted.
   */
  async eraseWhere(
    orgId: string,
    pipelineIds: ReadonlySet<string>,
    holds: (body: string) => boolean,
    batch = 64,
  ): Promise<number> {
    return this.#removeWhere(
      orgId,
      (rec) => pipelineIds.has(rec.pipeline_id) || (rec.body !== '' && holds(rec.body)),
      batch,
    );
  }

  /**
   * The org is being deleted: every answer kept for its replays goes (read `batch` at a time, as
   * `eraseWhere` reads). Returns how many.
   */
  async dropOrg(orgId: string, batch = 64): Promise<number> {
    const n = await this.#removeWhere(orgId, () => true, batch);
    this.kept.delete(orgId);
    return n;
  }

  /**
   * Deletes the org's kept answers that `matches`, `batch` read at a time; returns how many. A
   * batch is read outside the writer, so each record is read again inside the write and deleted
   * only if it is still the one that matched (`sameRecord`): a new answer kept under its key in
   * between stays, and a record another removal deleted first is not deleted (nor subtracted from
   * the count) twice. The count is lowered by the bytes of the records this write deleted.
   */
  async #removeWhere(orgId: string, matches: (rec: StoredRecord) => boolean, batch: number): Promise<number> {
    let n = 0;
    let after: Key | undefined;
    for (;;) {
      const gone: { key: Key; rec: StoredRecord }[] = [];
      let read = 0;
      for (const { key, value } of this.store.idempotency.getRange({
        start: after ?? [orgId],
        end: [orgId, '\uffff'],
        ...(after === undefined ? {} : { exclusiveStart: true }),
        limit: batch,
      })) {
        read++;
        after = key as Key;
        const rec = value as StoredRecord;
        if (matches(rec)) gone.push({ key: after, rec });
      }
      if (gone.length > 0) {
        let deleted = 0;
        let bytes = 0;
        await this.store.writer.enqueue(() => {
          deleted = 0;
          bytes = 0;
          for (const { key, rec } of gone) {
            const current = this.store.idempotency.get(key) as StoredRecord | undefined;
            if (current === undefined || !sameRecord(current, rec)) continue;
            this.store.idempotency.removeSync(key);
            deleted++;
            bytes += Buffer.byteLength(current.body, 'utf8');
          }
        });
        // Counted once committed (a write that failed deleted nothing).
        n += deleted;
        if (bytes > 0) this.count(this.kept, orgId, -bytes);
      }
      if (read < batch) return n;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /**
   * Deletes expired records; resolves to how many, or to 0 while another sweep runs. Replays hold
   * whole answers (up to 64 MiB), so the records are read `batch` at a time, each batch on its own
   * turn of the event loop: a sweep of many large ones must not hold it for all of them at once.
   * The bytes of the answers left are counted again on the way (see the class comment).
   */
  async sweep(now = Date.now(), batch = 64): Promise<number> {
    if (this.sweeping !== undefined) return 0;
    const sweep = { since: Date.now(), added: new Map<string, number>() };
    this.sweeping = sweep;
    const counts = new Map<string, number>();
    try {
      let n = 0;
      let after: Key | undefined;
      for (;;) {
        const expired: Key[] = [];
        let read = 0;
        for (const { key, value } of this.store.idempotency.getRange({
          ...(after === undefined ? {} : { start: after, exclusiveStart: true }),
          limit: batch,
        })) {
          read++;
          after = key as Key;
          const rec = value as StoredRecord;
          if (rec.created_ms + this.ttlMs <= now) expired.push(after);
          else if (rec.created_ms < sweep.since)
            this.count(counts, after[0] as string, Buffer.byteLength(rec.body, 'utf8'));
        }
        if (expired.length > 0) {
          this.store.root.transactionSync(() => {
            for (const key of expired) this.store.idempotency.removeSync(key);
          });
          n += expired.length;
        }
        if (read < batch) {
          for (const [org, bytes] of sweep.added) this.count(counts, org, bytes);
          this.kept.clear();
          for (const [org, bytes] of counts) if (bytes > 0) this.kept.set(org, bytes);
          return n;
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      this.sweeping = undefined;
    }
  }
}

/** Whether `a` is the record `b` was (each call has its own pipeline id; a key's new answer is a new call). */
function sameRecord(a: StoredRecord, b: StoredRecord): boolean {
  return a.pipeline_id === b.pipeline_id && a.created_ms === b.created_ms && a.body_hash === b.body_hash;
}
