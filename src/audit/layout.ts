import { hash as digest } from 'node:crypto';
import { ServiceError } from '../core/errors.js';
import type { AuditQuery } from './types.js';

/**
 * The LMDB layout of the audit chain (see `Store`):
 *
 * - `auditEvents`  [org, seq] → the event as JSON text (without `seal`): exactly what was hashed,
 *                  and exactly the line of the JSONL log, so reads and exports never re-encode.
 * - `auditIndex`   [org, 'i', event id] → seq for ids that do not name their seq (older ids; see
 *                  `eventId`), and for each search index (`INDEX_KINDS`) posting
 *                  lists [org, kind, value, last seq] → [seq, …], one per value per postings
 *                  flush (see postings.ts); a value longer than `INDEX_VALUE_MAX` is keyed
 *                  by its digest under the kind + `HASHED_SUFFIX` (see `indexKey`). Seq order is time order, so no ts index is needed: a ts bound
 *                  becomes a seq bound by binary search.
 * - `auditNodes`   [org, level, index] → 32-byte hash: the perfect Merkle subtrees of 16 leaves
 *                  and more (level ≥ STORED_NODE_LEVEL); smaller ones and the leaves are
 *                  recomputed from the events' `hash` (see org-head.ts `nodeReader`).
 * - `auditMeta`    [org, 's', seal seq] → StoredSeal; [org, 'z', size] → seal seq;
 *                  [org, 'm' | 'h', bucket start ms] → overview rollup of that minute / hour;
 *                  [org, 'r'] → seq: the stored rollups count every event up to it (they are
 *                  written every second, not per commit; see ChainLog `rollupFlushMs`);
 *                  [org, 'q'] → seq: the same for the posting lists (collected in memory
 *                  and stored every second or sooner; see postings.ts `PendingPostings`);
 *                  [org, 'b'] → the `_chain_bridge` record left by retention, if any.
 */
export const MAX_KEY = Number.MAX_SAFE_INTEGER;
export const MIN_KEY = Number.MIN_SAFE_INTEGER;

export const ID_KIND = 'i';
export const SEAL_KIND = 's';
export const SEAL_SIZE_KIND = 'z';
export const BRIDGE_KIND = 'b';
export const MINUTE_KIND = 'm';
export const HOUR_KIND = 'h';
export const ROLLUP_MARK_KIND = 'r';
export const POSTINGS_MARK_KIND = 'q';

/** Search indexes: one short kind per filter that has an index. */
export const INDEX_KINDS = {
  pipeline_id: 'p',
  session_id: 's',
  task_id: 't',
  agent_id: 'a',
  event_type: 'e',
  action: 'o',
  category: 'f',
} as const;

export type IndexedFilter = keyof typeof INDEX_KINDS;

/**
 * The longest value (UTF-16 code units) an index key holds as is. LMDB refuses keys over 1,978
 * bytes, and a key [org, kind, value, last seq] encodes each code unit in at most 3 bytes, so a
 * value of any length would otherwise be able to make every write of its transaction fail.
 */
export const INDEX_VALUE_MAX = 256;
/** Appended to the kind of an index whose values are keyed by digest. */
export const HASHED_SUFFIX = '#';
/** The longest org id the audit log accepts (org ids are made by govgate, a few dozen chars). */
export const ORG_ID_MAX = 128;

/**
 * The [kind, value] part of the index key of (kind, value): the value itself, or for a value
 * longer than `INDEX_VALUE_MAX`, SHA-256 of it (base64url) under kind + `HASHED_SUFFIX`, a kind of
 * its own so that no value kept as is can be mistaken for a digest. Writers and searches both key
 * through here, so a search by a long value finds its events.
 */
export function indexKey(kind: string, value: string): [string, string] {
  return value.length <= INDEX_VALUE_MAX
    ? [kind, value]
    : [kind + HASHED_SUFFIX, digest('sha256', value, 'base64url')];
}

/** Filter names in the order used to break ties (most selective by nature first). */
export const INDEXED_FILTERS: readonly IndexedFilter[] = [
  'pipeline_id',
  'task_id',
  'session_id',
  'agent_id',
  'event_type',
  'action',
  'category',
];

/**
 * Call ids that share one random body: a call govgate assigns ids to gets `pl_X`, and (when the
 * caller named none) `ses_X` and `tsk_X` with the same X. Such a session or task id is not given
 * its own index entry (it would be one write per event for a value used by one call); its events
 * are found through the pipeline index of `pl_X` instead (see `DerivedIdList`).
 */
export const DERIVED_PREFIX = { session_id: 'ses_', task_id: 'tsk_' } as const;
export const PIPELINE_PREFIX = 'pl_';

/** The pipeline id a session or task id of the derived form would come from, or undefined. */
export function derivedPipeline(field: 'session_id' | 'task_id', value: string): string | undefined {
  const prefix = DERIVED_PREFIX[field];
  return value.startsWith(prefix) && value.length > prefix.length
    ? PIPELINE_PREFIX + value.slice(prefix.length)
    : undefined;
}

/** Is `value` of `field` the id derived from the event's own pipeline id? */
export function isDerivedId(
  field: 'session_id' | 'task_id',
  value: string,
  pipelineId: string | null,
): boolean {
  return pipelineId !== null && derivedPipeline(field, value) === pipelineId;
}

/** The event family: `event_type` up to its first '.' (`admin.user_created` → `admin`). */
export function familyOf(eventType: string): string {
  const dot = eventType.indexOf('.');
  return dot < 0 ? eventType : eventType.slice(0, dot);
}

// ---------------------------------------------------------------------------------------------
// Cursors: base64url of "s<seq>"; the next page continues strictly below (or above) that seq.

const CURSOR_TEXT = /^s([1-9][0-9]{0,15})$/;

export function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`, 'utf8').toString('base64url');
}

export function decodeCursor(cursor: string): number {
  const m = CURSOR_TEXT.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  const seq = m === null ? Number.NaN : Number(m[1]);
  if (!Number.isSafeInteger(seq)) {
    throw new ServiceError('invalid_request', 'cursor is not a cursor returned by this endpoint', {
      param: 'cursor',
    });
  }
  return seq;
}

/** An ISO 8601 bound → epoch ms (400 when it does not parse). */
export function boundMs(value: string | undefined, param: string): number | undefined {
  if (value === undefined || value === '') return undefined;
  const ms = Date.parse(value);
  if (!Number.isFinite(ms)) {
    throw new ServiceError('invalid_request', `${param} must be an ISO 8601 timestamp`, { param });
  }
  return ms;
}

/** The filters of a query that are set (empty strings count as absent). */
export type Filters = Omit<AuditQuery, 'cursor' | 'limit'>;
