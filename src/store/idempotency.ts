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
}

type Key = [string, string, string];

/**
 * Idempotency-Key replays, per org and agent, kept `ttlMs`. A key in use by a call still running
 * is refused (409); a key reused with a different body is refused (409); only successful
 * responses are kept, so a failed call can be retried with the same key.
 */
export class IdempotencyStore {
  private readonly running = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly ttlMs: number,
  ) {}

  /** A stored response to replay, or undefined after reserving the key for this call. */
  begin(
    orgId: string,
    agentUuid: string,
    key: string,
    bodyHash: string,
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
      if (rec.body_hash !== bodyHash) {
        throw new ServiceError(
          'idempotency_mismatch',
          'this Idempotency-Key was used with a different request body',
          {
            param: 'Idempotency-Key',
          },
        );
      }
      return rec;
    }
    this.running.add(id);
    return undefined;
  }

  complete(
    orgId: string,
    agentUuid: string,
    key: string,
    bodyHash: string,
    response: StoredResponse | undefined,
  ): void {
    this.running.delete(`${orgId}\0${agentUuid}\0${key}`);
    if (response === undefined) return;
    const rec: StoredRecord = { ...response, body_hash: bodyHash, created_ms: Date.now() };
    this.store.writer
      .enqueue(() => this.store.idempotency.putSync([orgId, agentUuid, key] as Key, rec))
      .catch(() => {
        /* store closing: the replay record is lost, the call itself was answered */
      });
  }

  /**
   * Deletes expired records; returns how many. Commits only when there are some: an empty sweep
   * must not fail for want of free space (it runs at the start, and hourly).
   */
  sweep(now = Date.now()): number {
    const expired = (value: unknown): boolean => (value as StoredRecord).created_ms + this.ttlMs <= now;
    const keys: unknown[] = [];
    for (const { key, value } of this.store.idempotency.getRange()) if (expired(value)) keys.push(key);
    if (keys.length === 0) return 0;
    let n = 0;
    this.store.root.transactionSync(() => {
      for (const key of keys) {
        const value: unknown = this.store.idempotency.get(key as Key);
        if (value !== undefined && expired(value)) {
          this.store.idempotency.removeSync(key as Key);
          n++;
        }
      }
    });
    return n;
  }
}
