// Unicode properties of single code points, computed once per code point with `\p{…}` regexes and
// String.prototype.normalize, then kept (a byte per code point of planes 0 and 1, which hold every
// script in common use, the emoji and the math alphanumerics; a map of bounded size for the rest),
// so the scans over non-ASCII text read one table entry per character instead of running property
// regexes.

import { LOOKALIKES } from './lookalikes.js';

/** Default_Ignorable_Code_Point or general category Cf: invisible and format characters. */
export const INVISIBLE = 1;
/** NFKC changes it, or it is INVISIBLE (removed from the normalized view). */
export const CHANGES = 2;
/** Letter, mark, or INVISIBLE: part of a word (an invisible character must not split one). */
export const WORD = 4;
export const LATIN = 8;
/** Cyrillic or Greek script. */
export const CYRILLIC_GREEK = 16;
/**
 * The injection scan's view changes (a character of) its normalized form: a look-alike of a Latin
 * letter, a letter with accents, a combining mark (see foldOf).
 */
export const FOLDS = 32;
const KNOWN = 128;

/**
 * The code points past the tables whose flags and folds are kept (each cache). Text can name about a
 * million distinct ones (planes 1 to 16), and kept for good each was a map entry for the life of the
 * process: a few requests built of fresh code points held ~200 MB, per thread. Text in use needs a
 * few hundred (emoji, the CJK extensions, historic scripts), so a cache that reaches this many is
 * emptied: ordinary text fills it again at once, and text that only brings fresh code points pays
 * the property regexes per character, as it did the first time each was seen. A map of 4,096
 * numbers is ~130 KB.
 */
export const ASTRAL_CACHE_MAX = 4_096;

const RE_INVISIBLE = /^[\p{Default_Ignorable_Code_Point}\p{Cf}]$/u;
const RE_WORD = /^[\p{L}\p{M}]$/u;
const RE_LATIN = /^\p{sc=Latin}$/u;
const RE_CYRILLIC_GREEK = /^[\p{sc=Cyrillic}\p{sc=Greek}]$/u;
const RE_MARK = /^[\p{Mn}\p{Me}]$/u;

const TABLE_END = 0x20000;
const table = new Uint8Array(TABLE_END);
/** The flags of code points past the table (planes 2 to 16), at most ASTRAL_CACHE_MAX of them. */
const astral = new Map<number, number>();
/**
 * NFKC forms of the characters that have one ('' for INVISIBLE ones). Not emptied with the cache of
 * flags: it holds only CHANGES code points, which Unicode bounds (9,169 on Node 20, 4,638 of them
 * past plane 1, mostly the default-ignorable block of plane 14), and formOf() reads it for a code
 * point whose flags were computed, however long ago.
 */
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
  const form = f & CHANGES ? forms.get(cp)! : ch;
  for (const c of form) if (foldOf(c.codePointAt(0)!) !== KEEP) f |= FOLDS;
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
    if (astral.size >= ASTRAL_CACHE_MAX) astral.clear();
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

// ---- the injection fold

/** foldOf(): the character stays. */
export const KEEP = 1;
/** foldOf(): a combining mark (Mn, Me), removed after an ASCII character. */
export const STRIP = 2;

const LOOKALIKE = new Map<number, number>();
for (const [from, to] of Object.entries(LOOKALIKES)) LOOKALIKE.set(from.codePointAt(0)!, to.charCodeAt(0));
/** foldOf() per BMP code point, 0 until computed (read directly by the fold's loop); the rest in a map. */
export const FOLD_TABLE = new Uint16Array(0x10000);
const folds = FOLD_TABLE;
/** foldOf() of code points past the BMP, at most ASTRAL_CACHE_MAX of them. */
const astralFolds = new Map<number, number>();

/**
 * How the injection view treats a character of the normalized view: KEEP, STRIP, or the code unit of
 * the Latin letter it folds to: a look-alike (lookalikes.ts), or a letter with accents whose
 * canonical decomposition is a Latin letter or a look-alike followed by combining marks (`ó`, `ё`,
 * `ά`, `İ`). Digits are KEEP: leet is read word by word (leet.ts).
 */
export function foldOf(cp: number): number {
  if (cp < 0x10000) {
    const f = folds[cp]!;
    return f !== 0 ? f : (folds[cp] = computeFold(cp));
  }
  return astralFolds.get(cp) ?? foldOfNew(cp);
}

/** foldOf() of a code point past the BMP not in its cache (apart, so that foldOf stays small). */
function foldOfNew(cp: number): number {
  const f = computeFold(cp);
  if (astralFolds.size >= ASTRAL_CACHE_MAX) astralFolds.clear();
  astralFolds.set(cp, f);
  return f;
}

/** Whether foldOf() takes an accent off the character (not a look-alike): a mark, or a letter with marks. */
export function isAccented(cp: number): boolean {
  const f = foldOf(cp);
  return f === STRIP || (f > STRIP && !LOOKALIKE.has(cp));
}

function computeFold(cp: number): number {
  const ch = String.fromCodePoint(cp);
  if (RE_MARK.test(ch)) return STRIP;
  const direct = LOOKALIKE.get(cp);
  if (direct !== undefined) return direct;
  const d = ch.normalize('NFD');
  if (d === ch) return KEEP;
  const base = d.codePointAt(0)!;
  for (const c of d.slice(base > 0xffff ? 2 : 1)) if (!RE_MARK.test(c)) return KEEP;
  if ((base >= 65 && base <= 90) || (base >= 97 && base <= 122)) return base;
  return LOOKALIKE.get(base) ?? KEEP;
}

/** How many code points past the tables the caches hold (`flags`: flagsOf(), `folds`: foldOf()); for tests. */
export function astralCacheSizes(): { flags: number; folds: number } {
  return { flags: astral.size, folds: astralFolds.size };
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
