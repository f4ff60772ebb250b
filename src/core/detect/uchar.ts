// Unicode properties of single code points, computed once per code point with `\p{…}` regexes and
// String.prototype.normalize, then kept (a byte per code point of planes 0 and 1, which hold every
// script in common use, the emoji and the math alphanumerics; a map for the rest), so the scans over
// non-ASCII text read one table entry per character instead of running property regexes.

/** Default_Ignorable_Code_Point or general category Cf: invisible and format characters. */
export const INVISIBLE = 1;
/** NFKC changes it, or it is INVISIBLE (removed from the normalized view). */
export const CHANGES = 2;
/** Letter, mark, or INVISIBLE: part of a word (an invisible character must not split one). */
export const WORD = 4;
export const LATIN = 8;
/** Cyrillic or Greek script. */
export const CYRILLIC_GREEK = 16;
const KNOWN = 128;

const RE_INVISIBLE = /^[\p{Default_Ignorable_Code_Point}\p{Cf}]$/u;
const RE_WORD = /^[\p{L}\p{M}]$/u;
const RE_LATIN = /^\p{sc=Latin}$/u;
const RE_CYRILLIC_GREEK = /^[\p{sc=Cyrillic}\p{sc=Greek}]$/u;

const TABLE_END = 0x20000;
const table = new Uint8Array(TABLE_END);
const astral = new Map<number, number>();
/** NFKC forms of the characters that have one ('' for INVISIBLE ones). */
const forms = new Map<number, string>();

function compute(cp: number): number {
  const ch = String.fromCodePoint(cp);
  let f = KNOWN;
  if (RE_INVISIBLE.test(ch)) f |= INVISIBLE | CHANGES | WORD;
  else if (ch.normalize('NFKC') !== ch) f |= CHANGES;
  if (RE_WORD.test(ch)) f |= WORD;
  if (RE_LATIN.test(ch)) f |= LATIN;
  if (RE_CYRILLIC_GREEK.test(ch)) f |= CYRILLIC_GREEK;
  if (f & CHANGES) forms.set(cp, f & INVISIBLE ? '' : ch.normalize('NFKC'));
  return f;
}

/** The flags of a code point (a lone surrogate has none). Small, so that the scans' loops inline it. */
export function flagsOf(cp: number): number {
  if (cp < TABLE_END) {
    const f = table[cp]!;
    if (f !== 0) return f;
  }
  return flagsOfNew(cp);
}

/** flagsOf() of a code point not in the table yet or past it. */
function flagsOfNew(cp: number): number {
  if (cp < TABLE_END) return cp >= 0xd800 && cp <= 0xdfff ? 0 : (table[cp] = compute(cp));
  let f = astral.get(cp);
  if (f === undefined) {
    f = compute(cp);
    astral.set(cp, f);
  }
  return f;
}

/**
 * The flags of every character of `text` OR-ed together (ASCII letters bring WORD | LATIN): which
 * kinds of character occur at all, so that a scan for a kind that does not occur is skipped. One
 * table read per code unit. (A regex class of the code units of a kind would be faster only while it
 * stayed small: on Node 20, V8 scans a class of a few ranges about five times faster than this loop,
 * and one of some twenty ranges about five times slower.)
 */
export function flagsIn(text: string): number {
  let all = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff) {
      all |= flagsOf(c);
      continue;
    }
    const cp = codePointAt(text, i);
    all |= flagsOf(cp);
    if (cp > 0xffff) i++;
  }
  return all;
}

/** The NFKC form of a CHANGES code point ('' for an invisible one). */
export function formOf(cp: number): string {
  return forms.get(cp) ?? String.fromCodePoint(cp);
}

/** The code point at `i` (a lone surrogate is its own code unit). */
export function codePointAt(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c >= 0xd800 && c <= 0xdbff) {
    const lo = text.charCodeAt(i + 1);
    if (lo >= 0xdc00 && lo <= 0xdfff) return (c - 0xd800) * 0x400 + (lo - 0xdc00) + 0x10000;
  }
  return c;
}
