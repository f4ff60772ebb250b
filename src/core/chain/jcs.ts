import { ChainError } from './errors.js';

/** A JSON value as JCS sees it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** Nesting deeper than this is refused (a typed error instead of a stack overflow). */
export const JCS_MAX_DEPTH = 512;

/**
 * RFC 8785 JSON Canonicalization Scheme.
 *
 * - Object members are sorted by their names compared as arrays of UTF-16 code units (what
 *   `Array.prototype.sort` does with no comparator); members whose value is `undefined` are
 *   omitted, as `JSON.stringify` omits them.
 * - Numbers are written as ECMAScript `Number.prototype.toString` writes them (so `-0` is `0`,
 *   `1e21` is `1e+21`, `0.000001` is `0.000001`, `1e-7` is `1e-7`); NaN and ±Infinity are refused.
 * - Strings are escaped as ECMAScript `JSON.stringify` escapes them: `"` and `\` and the controls
 *   U+0000..U+001F only (`\b \t \n \f \r`, others as lowercase `\u00xx`); everything else is
 *   written as is. One deliberate extension: RFC 8785 requires I-JSON input and so has no rule
 *   for a lone UTF-16 surrogate; here it is written as a lowercase `\udxxx` escape (again what
 *   `JSON.stringify` does), which keeps the encoding injective instead of failing the write path.
 * - No whitespace.
 *
 * Input is the JSON data model: plain objects, arrays, strings, finite numbers, booleans, null.
 * `toJSON` is not consulted (looking it up on every object costs more than the rest of the
 * walk); any other object is written as its own enumerable string-keyed properties, so convert
 * dates and class instances before they reach an event.
 *
 * Refused with a `ChainError`: non-finite numbers, `undefined` (or a function or symbol) as an
 * array element or as the top-level value, bigint, functions, symbols, typed arrays and nesting
 * beyond `JCS_MAX_DEPTH`.
 */
export function canonicalize(value: unknown): string {
  return write(value, 0, false);
}

/** Characters that need `JSON.stringify`'s escaping (or its lone-surrogate handling). */
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A JSON string literal; the common case (nothing to escape) skips the JSON.stringify call. */
export function writeString(s: string): string {
  return NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : `"${s}"`;
}

function write(value: unknown, depth: number, inArray: boolean): string {
  switch (typeof value) {
    case 'string':
      return writeString(value);
    case 'number':
      return writeNumber(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      if (value === null) return 'null';
      return Array.isArray(value) ? writeArray(value, depth) : writeObject(value, depth);
    case 'undefined':
      throw inArray
        ? new ChainError('jcs_undefined_in_array', 'JCS: undefined is not allowed in an array')
        : new ChainError('jcs_unsupported_type', 'JCS: undefined is not JSON');
    default:
      throw new ChainError('jcs_unsupported_type', `JCS: a ${typeof value} is not JSON`);
  }
}

export function writeNumber(n: number): string {
  if (!Number.isFinite(n)) throw new ChainError('jcs_non_finite_number', `JCS: ${n} is not a JSON number`);
  // Number#toString is the ECMAScript serialization RFC 8785 adopts; it already prints -0 as 0.
  return `${n}`;
}

function writeArray(value: unknown[], depth: number): string {
  if (depth >= JCS_MAX_DEPTH) throw new ChainError('jcs_too_deep', 'JCS: value nested too deeply');
  const n = value.length;
  if (n === 0) return '[]';
  let out = `[${write(value[0], depth + 1, true)}`;
  for (let i = 1; i < n; i++) out += `,${write(value[i], depth + 1, true)}`;
  return `${out}]`;
}

function writeObject(value: object, depth: number): string {
  if (depth >= JCS_MAX_DEPTH) throw new ChainError('jcs_too_deep', 'JCS: value nested too deeply');
  if (ArrayBuffer.isView(value)) {
    throw new ChainError('jcs_unsupported_type', 'JCS: binary data is not JSON; encode it first');
  }
  const rec = value as Record<string, unknown>;
  const keys = sortedKeys(Object.keys(rec));
  let out = '{';
  for (const key of keys) {
    const v = rec[key];
    if (v === undefined) continue;
    if (out.length > 1) out += ',';
    out += `${writeString(key)}:${write(v, depth + 1, false)}`;
  }
  return `${out}}`;
}

// Objects of one kind (events, usage blocks) share their key order, so the sorted order is
// memoised per shape: a match costs one pass of (mostly pointer-equal) string comparisons.
const SHAPE_SLOTS = 16;
const shapeKeys: string[][] = [];
const shapeSorted: string[][] = [];
let shapeNext = 0;

/**
 * `keys` sorted by UTF-16 code units (what `<` on strings compares), in place, by insertion:
 * for the few keys of most objects this is a few comparisons and allocates nothing, where
 * `Array.prototype.sort` allocated ~0.5 KB of sort state per call (six calls per audit event).
 */
function sortFew(keys: string[]): string[] {
  for (let i = 1; i < keys.length; i++) {
    const key = keys[i] as string;
    let j = i - 1;
    for (; j >= 0 && (keys[j] as string) > key; j--) keys[j + 1] = keys[j] as string;
    keys[j + 1] = key;
  }
  return keys;
}

/**
 * `keys` (a fresh array, e.g. from `Object.keys`) sorted by UTF-16 code units. The result may be
 * `keys` itself or shared: callers must not mutate it.
 */
export function sortedKeys(keys: string[]): readonly string[] {
  const n = keys.length;
  if (n < 8) return sortFew(keys);
  for (let s = 0; s < shapeKeys.length; s++) {
    const cached = shapeKeys[s] as string[];
    if (cached.length !== n) continue;
    let i = 0;
    while (i < n && cached[i] === keys[i]) i++;
    if (i === n) return shapeSorted[s] as string[];
  }
  const sorted = keys.slice().sort();
  shapeKeys[shapeNext] = keys;
  shapeSorted[shapeNext] = sorted;
  shapeNext = (shapeNext + 1) % SHAPE_SLOTS;
  return sorted;
}
