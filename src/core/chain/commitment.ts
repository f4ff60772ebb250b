import { hash } from 'node:crypto';
import { isHash } from './bytes.js';
import { canonicalize } from './jcs.js';

/** The literal that replaces an erased personal value (spec 2.8). */
export const ERASED = '[ERASED:GDPR-Art17]';

/**
 * One personal field of an event. The event hash covers only `c`; `value` and `salt` can be
 * erased without touching the hash. After erasure: `value === ERASED`, no `salt`, same `c`.
 */
export interface PersonalField {
  value: unknown;
  salt?: string;
  c: string;
}

/** `personal: {field: {value, salt, c}}` of an event; the key is the field path. */
export type Personal = Record<string, PersonalField>;

/** `ok`: value matches `c`; `erased`: a tombstone; `mismatch`: anything else. */
export type PersonalStatus = 'ok' | 'erased' | 'mismatch';

/**
 * Commitment to one personal value, hex SHA-256 over this exact byte string:
 *
 *     u32be(len(S)) ‖ S ‖ u32be(len(P)) ‖ P ‖ J
 *
 * where S is the UTF-8 of `salt`, P the UTF-8 of the field `path` (the key in `personal`),
 * J the UTF-8 of `canonicalize(value)` (RFC 8785), and `u32be(n)` the byte length as a 4-byte
 * big-endian unsigned integer. The length prefixes make the framing unambiguous (salt "ab" with
 * path "c" never collides with salt "a" with path "bc"); J needs none because it comes last.
 */
export function commit(salt: string, path: string, value: unknown): string {
  const json = canonicalize(value);
  const saltLen = Buffer.byteLength(salt, 'utf8');
  const pathLen = Buffer.byteLength(path, 'utf8');
  const input = Buffer.allocUnsafe(8 + saltLen + pathLen + Buffer.byteLength(json, 'utf8'));
  let off = input.writeUInt32BE(saltLen, 0);
  off += input.write(salt, off, 'utf8');
  off = input.writeUInt32BE(pathLen, off);
  off += input.write(path, off, 'utf8');
  input.write(json, off, 'utf8');
  return hash('sha256', input, 'hex');
}

/** A personal field for `path` holding `value`, committed with `salt`. */
export function personalField(path: string, value: unknown, salt: string): PersonalField {
  return { value, salt, c: commit(salt, path, value) };
}

/**
 * Builds `personal` from plain values (fields whose value is `undefined` are left out).
 * `randomSalt` supplies a fresh unpredictable salt per field (e.g. 16 random bytes, base64url);
 * randomness is the caller's I/O.
 */
export function buildPersonal(values: Readonly<Record<string, unknown>>, randomSalt: () => string): Personal {
  const out: Personal = {};
  for (const path of Object.keys(values)) {
    const value = values[path];
    if (value === undefined) continue;
    out[path] = personalField(path, value, randomSalt());
  }
  return out;
}

/** A tombstone: `value` is `ERASED` and there is no salt (a real value that happens to equal the
 * marker still has its salt, so it is never mistaken for a tombstone). */
export function isTombstone(field: unknown): boolean {
  if (typeof field !== 'object' || field === null) return false;
  const f = field as Partial<PersonalField>;
  return f.value === ERASED && f.salt === undefined;
}

/**
 * Erases `fields` (every field when omitted) of `personal`: value → `ERASED`, salt deleted, `c`
 * kept. Returns a new object; fields that are absent are ignored; the event hash is unchanged.
 */
export function erasePersonal(personal: Readonly<Personal>, fields?: readonly string[]): Personal {
  const out: Personal = {};
  const targets = fields === undefined ? undefined : new Set(fields);
  for (const path of Object.keys(personal)) {
    const f = personal[path] as PersonalField;
    out[path] = targets === undefined || targets.has(path) ? { value: ERASED, c: f.c } : { ...f };
  }
  return out;
}

/** Checks one stored personal field (shape included, since stored data is untrusted). */
export function checkPersonalField(path: string, field: unknown): PersonalStatus {
  if (typeof field !== 'object' || field === null) return 'mismatch';
  const f = field as Partial<PersonalField>;
  if (!isHash(f.c)) return 'mismatch';
  // Only the commitment `c` is hashed: a member beside value, salt and c would be bytes govgate
  // never wrote, read by whoever reads the field (`"Value":"mallory"`, `"erased":true`).
  for (const k in f) if (k !== 'value' && k !== 'salt' && k !== 'c') return 'mismatch';
  if (f.salt === undefined) return f.value === ERASED ? 'erased' : 'mismatch';
  if (typeof f.salt !== 'string') return 'mismatch';
  try {
    return commit(f.salt, path, f.value) === f.c ? 'ok' : 'mismatch';
  } catch {
    return 'mismatch';
  }
}
