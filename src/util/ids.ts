import { hash, randomBytes } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const POOL_SIZE = 4096;
let pool = randomBytes(POOL_SIZE);
let offset = 0;

function nextByte(): number {
  if (offset === POOL_SIZE) {
    pool = randomBytes(POOL_SIZE);
    offset = 0;
  }
  return pool[offset++] as number;
}

/** `length` uniformly random base62 characters (rejection sampling keeps it unbiased). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    const b = nextByte();
    if (b < 248) out += BASE62[b % 62];
  }
  return out;
}

/** A random identifier with a type prefix, e.g. `apr_…` for approvals. */
export function newId(prefix: string, length = 20): string {
  return prefix + randomBase62(length);
}

const TIME_CHARS = 8; // 62^8 ms ≈ 6,900 years from 1970
const SORTABLE_RANDOM = 12; // ~71 bits

/**
 * A 20-character base62 id body that sorts by creation time: the epoch ms in 8 fixed-width
 * base62 digits (`0-9A-Za-z` is ASCII order, so text order is time order), then 12 random
 * characters. Ids that are LMDB index keys written on the request path (audit event ids, the
 * call ids govgate assigns) use it: consecutive ids land on the same B-tree page, where random
 * ids would dirty a different page per write (measured: ~10 µs of CPU per audit event).
 */
export function sortableBody(ms: number = Date.now()): string {
  return fixedBase62(ms, TIME_CHARS) + randomBase62(SORTABLE_RANDOM);
}

/** `prefix` + `sortableBody(ms)`, e.g. `pl_…` for the pipeline of a call. */
export function sortableId(prefix: string, ms?: number): string {
  return prefix + sortableBody(ms);
}

/** `v` (a non-negative integer, taken modulo 62^width) in `width` base62 digits, most significant first. */
function fixedBase62(v: number, width: number): string {
  let out = '';
  let rest = Math.max(0, Math.floor(v));
  for (let i = 0; i < width; i++) {
    out = (BASE62[rest % 62] as string) + out;
    rest = Math.floor(rest / 62);
  }
  return out;
}

const EVENT_PREFIX = 'ae_';
const SEQ_CHARS = 6;
const EVENT_RANDOM = 20 - TIME_CHARS - SEQ_CHARS;
/** The largest org-chain seq an audit event id can name (62^6 − 1 ≈ 5.7 × 10^10). */
export const MAX_ID_SEQ = 62 ** SEQ_CHARS - 1;
const EVENT_ID_RE = /^ae_[0-9A-Za-z]{20}$/;

/**
 * The id of the audit event at `seq` of its org's chain: `ae_` + the epoch ms (8 base62 digits,
 * so ids sort by time) + the seq (6 digits) + 6 random characters. An id names its event's place,
 * so finding an event by id is one read of the event, with no id index to write per event; the
 * reader still compares the whole id. Above `MAX_ID_SEQ` the id is a plain sortable one and is
 * indexed like ids written before this format.
 */
export function eventId(ms: number, seq: number): string {
  if (!Number.isSafeInteger(seq) || seq < 1 || seq > MAX_ID_SEQ) return sortableId(EVENT_PREFIX, ms);
  return (
    EVENT_PREFIX + fixedBase62(ms, TIME_CHARS) + fixedBase62(seq, SEQ_CHARS) + randomBase62(EVENT_RANDOM)
  );
}

/**
 * The seq an audit event id names, when it has the shape of one. Any id of that shape decodes
 * (older ids were random), so a caller must check the event found there carries this very id.
 */
export function eventIdSeq(id: string): number | undefined {
  if (!EVENT_ID_RE.test(id)) return undefined;
  let seq = 0;
  const end = EVENT_PREFIX.length + TIME_CHARS + SEQ_CHARS;
  for (let i = EVENT_PREFIX.length + TIME_CHARS; i < end; i++)
    seq = seq * 62 + BASE62.indexOf(id[i] as string);
  return seq > 0 ? seq : undefined;
}

export const AGENT_KEY_PREFIX = 'gk_agent_';
export const PAT_PREFIX = 'gk_pat_';
const CREDENTIAL_RE = /^gk_(agent|pat)_[A-Za-z0-9]{40}$/;

export function newAgentKey(): string {
  return AGENT_KEY_PREFIX + randomBase62(40);
}

export const SIDECAR_TOKEN_PREFIX = 'gk_sc_';

/** A sidecar's credential for the sync API (docs/sidecar.md). */
export function newSidecarToken(): string {
  return SIDECAR_TOKEN_PREFIX + randomBase62(40);
}

export function newPat(): string {
  return PAT_PREFIX + randomBase62(40);
}

export function looksLikeCredential(token: string): boolean {
  return CREDENTIAL_RE.test(token);
}

/** Credentials are stored as SHA-256 hashes only. */
export function hashCredential(token: string): string {
  return hash('sha256', token, 'hex');
}

export function sha256Hex(data: string | Uint8Array): string {
  return hash('sha256', data, 'hex');
}
