import { createHash, randomBytes } from 'node:crypto';

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
  let t = '';
  let v = Math.max(0, Math.floor(ms));
  for (let i = 0; i < TIME_CHARS; i++) {
    t = (BASE62[v % 62] as string) + t;
    v = Math.floor(v / 62);
  }
  return t + randomBase62(SORTABLE_RANDOM);
}

/** `prefix` + `sortableBody(ms)`, e.g. `ae_…` for audit events. */
export function sortableId(prefix: string, ms?: number): string {
  return prefix + sortableBody(ms);
}

export const AGENT_KEY_PREFIX = 'gk_agent_';
export const PAT_PREFIX = 'gk_pat_';
const CREDENTIAL_RE = /^gk_(agent|pat)_[A-Za-z0-9]{40}$/;

export function newAgentKey(): string {
  return AGENT_KEY_PREFIX + randomBase62(40);
}

export function newPat(): string {
  return PAT_PREFIX + randomBase62(40);
}

export function looksLikeCredential(token: string): boolean {
  return CREDENTIAL_RE.test(token);
}

/** Credentials are stored as SHA-256 hashes only. */
export function hashCredential(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}
