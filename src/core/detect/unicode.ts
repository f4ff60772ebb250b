// Hidden-unicode tricks. `invisible`: every default-ignorable code point and every format character
// (Unicode properties Default_Ignorable_Code_Point and Cf: zero-width space/joiners, soft hyphen,
// combining grapheme joiner, word joiner and invisible operators, Hangul fillers, variation
// selectors, a BOM anywhere but at the start, tag characters U+E0000–U+E007F, …); `bidi`: the
// bidirectional controls among them (LRM/RLM/ALM, embeddings and overrides U+202A–U+202E, isolates
// U+2066–U+2069). Consecutive characters of one type form one finding. `mixed_script`: a word that
// mixes Latin letters with Cyrillic or Greek ones (`Ignоre` with a Cyrillic о).
//
// Legitimate uses are not findings: ZWJ inside emoji sequences, ZWNJ/ZWJ between letters of Arabic
// and Indic scripts (where they shape words, also at a word edge), tag sequences of subdivision
// flags (U+1F3F4 … U+E007F), variation selectors after emoji, symbols, ideographs and Mongolian
// letters (and in keycaps), the visible Arabic/Syriac number signs (prepended concatenation marks),
// and micro units (`μs`, `μm`).
//
// Only called on text with a character outside ASCII (detect() checks): printable ASCII holds none.

import type { Finding } from './types.js';
import { CYRILLIC_GREEK, codePointAt, flagsIn, flagsOf, INVISIBLE, LATIN, WORD } from './uchar.js';

const ZWNJ = 0x200c;
const ZWJ = 0x200d;
const MICRO = 0x03bc;

/** `present`: the flags of the text's characters OR-ed together (uchar.ts flagsIn), if known. */
export function scanUnicode(text: string, out: Finding[], present = flagsIn(text)): void {
  if ((present & INVISIBLE) !== 0) scanInvisible(text, out);
  // A mixed-script word needs a Latin letter and a Cyrillic or Greek one somewhere in the text.
  if ((present & LATIN) !== 0 && (present & CYRILLIC_GREEK) !== 0) scanMixedScript(text, out);
}

/** Runs of invisible/format characters. */
function scanInvisible(text: string, out: Finding[]): void {
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    const cp = c >= 0xd800 && c <= 0xdbff ? codePointAt(text, i) : c;
    if ((flagsOf(cp) & INVISIBLE) === 0) {
      if (cp > 0xffff) i++;
      continue;
    }
    // A run of invisible/format characters: [i, e).
    let e = i + (cp > 0xffff ? 2 : 1);
    while (e < n) {
      const next = codePointAt(text, e);
      if ((flagsOf(next) & INVISIBLE) === 0) break;
      e += next > 0xffff ? 2 : 1;
    }
    scanInvisibleRun(text, i, e, out);
    i = e - 1; // the character at e is not invisible, but may be one of a pair: read it next
  }
}

/**
 * Splits a run of invisible/format characters [s, e) into findings of one type, minus exemptions
 * (exported for the reference walk of test/core/detect/walk-reference.ts).
 */
export function scanInvisibleRun(text: string, s: number, e: number, out: Finding[]): void {
  let type = 0; // 0 none, 1 invisible, 2 bidi
  let from = s;
  let i = s;
  while (i < e) {
    const cp = text.codePointAt(i)!;
    let next = i + (cp > 0xffff ? 2 : 1);
    let t: number;
    if (cp >= 0xe0000 && cp <= 0xe007f) {
      // Tag characters: the whole run of them is one flag sequence, or not.
      while (next < e && isTag(text.codePointAt(next)!)) next += 2;
      t = isSubdivisionFlag(text, i, next) ? 0 : 1;
    } else {
      t = exempt(text, cp, i, next, s, e) ? 0 : isBidi(cp) ? 2 : 1;
    }
    if (t !== type) {
      if (type !== 0)
        out.push({ category: 'unicode', type: type === 2 ? 'bidi' : 'invisible', start: from, end: i });
      type = t;
      from = i;
    }
    i = next;
  }
  if (type !== 0)
    out.push({ category: 'unicode', type: type === 2 ? 'bidi' : 'invisible', start: from, end: e });
}

function isTag(cp: number): boolean {
  return cp >= 0xe0000 && cp <= 0xe007f;
}

function isBidi(cp: number): boolean {
  return (
    cp === 0x061c ||
    cp === 0x200e ||
    cp === 0x200f ||
    (cp >= 0x202a && cp <= 0x202e) ||
    (cp >= 0x2066 && cp <= 0x2069)
  );
}

/** Subdivision flag: U+1F3F4 (D83C DFF4), tags, ending with CANCEL TAG U+E007F (DB40 DC7F). */
function isSubdivisionFlag(text: string, start: number, end: number): boolean {
  return (
    start >= 2 &&
    text.charCodeAt(start - 2) === 0xd83c &&
    text.charCodeAt(start - 1) === 0xdff4 &&
    text.charCodeAt(end - 1) === 0xdc7f
  );
}

/** Whether the character `cp` at [i, next) of the run [s, e) is a legitimate use. */
function exempt(text: string, cp: number, i: number, next: number, s: number, e: number): boolean {
  const prev = text.charCodeAt(i - 1);
  if (cp === 0xfeff) return i === 0 && e === 1;
  if ((cp >= 0xfe00 && cp <= 0xfe0f) || (cp >= 0xe0100 && cp <= 0xe01ef)) {
    if (cp >= 0xfe0e && text.charCodeAt(next) === 0x20e3) return true; // keycap 1️⃣
    return i === s && isVariationBase(prev);
  }
  if ((cp >= 0x180b && cp <= 0x180d) || cp === 0x180f) return prev >= 0x1800 && prev <= 0x18af; // Mongolian
  if (isPrependedMark(cp)) return true;
  if (next - i !== 1 || (cp !== ZWJ && cp !== ZWNJ)) return false;
  const after = text.charCodeAt(next);
  // Only a lone joiner, or one right after an exempt variation selector in an emoji sequence (❤️‍🔥).
  if (cp === ZWJ && isEmojiTail(prev) && isEmojiHead(after) && (i === s || prev === 0xfe0f)) return true;
  if (i !== s || next !== e) return false;
  // Between two letters of a joining script, or at a word edge next to one (before/after a space).
  if (isJoiningScript(prev)) return isJoiningScript(after) || after === 32;
  return prev === 32 && isJoiningScript(after);
}

/** A character a variation selector may follow: emoji, symbols, ideographs (not letters of alphabets). */
function isVariationBase(c: number): boolean {
  if (c === 0xa9 || c === 0xae) return true; // © ®
  if (c < 0x2000) return false;
  if ((c >= 0x200b && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) || (c >= 0x2060 && c <= 0x206f))
    return false;
  return c !== 0xfeff && !(c >= 0xfe00 && c <= 0xfe0f);
}

function isPrependedMark(cp: number): boolean {
  return (
    (cp >= 0x0600 && cp <= 0x0605) ||
    cp === 0x06dd ||
    cp === 0x070f ||
    cp === 0x0890 ||
    cp === 0x0891 ||
    cp === 0x08e2 ||
    cp === 0x110bd ||
    cp === 0x110cd
  );
}

/** Emoji in the BMP: Misc Technical (⌚ ⏩), Misc Symbols and Dingbats, Misc Symbols and Arrows (⬛ ⭐). */
function isBmpEmoji(c: number): boolean {
  return (c >= 0x2300 && c <= 0x23ff) || (c >= 0x2600 && c <= 0x27bf) || (c >= 0x2b00 && c <= 0x2bff);
}

function isEmojiTail(c: number): boolean {
  // Low surrogate (astral emoji), VS16, skin-tone modifiers are astral too, BMP emoji.
  return (c >= 0xdc00 && c <= 0xdfff) || c === 0xfe0f || isBmpEmoji(c);
}

function isEmojiHead(c: number): boolean {
  return (c >= 0xd800 && c <= 0xdbff) || isBmpEmoji(c);
}

function isJoiningScript(c: number): boolean {
  return (
    (c >= 0x0600 && c <= 0x06ff) || // Arabic (incl. Persian, Urdu)
    (c >= 0x0750 && c <= 0x077f) ||
    (c >= 0x0900 && c <= 0x0dff) || // Devanagari … Sinhala
    (c >= 0xfb50 && c <= 0xfdff) ||
    (c >= 0xfe70 && c <= 0xfefc)
  );
}

/**
 * Words (runs of letters, marks and invisible characters) holding both Latin and Cyrillic or Greek
 * letters; a micro unit (μ and one to three ASCII letters: `μs`, `μmol`) is not one.
 */
function scanMixedScript(text: string, out: Finding[]): void {
  const n = text.length;
  let start = 0; // where the current word starts (if `seen` is not 0)
  let seen = 0; // the flags of its characters OR-ed together
  for (let i = 0; i < n; i++) {
    // The flags of the character at `at` (the table gives ASCII letters WORD | LATIN).
    const at = i;
    const c = text.charCodeAt(i);
    let f: number;
    if (c < 0xd800 || c > 0xdbff) f = flagsOf(c);
    else {
      const cp = codePointAt(text, i);
      f = flagsOf(cp);
      if (cp > 0xffff) i++;
    }
    if ((f & WORD) !== 0) {
      seen |= f;
      continue;
    }
    if (isMixed(text, start, at, seen))
      out.push({ category: 'unicode', type: 'mixed_script', start, end: at });
    seen = 0;
    start = i + 1;
  }
  if (isMixed(text, start, n, seen)) out.push({ category: 'unicode', type: 'mixed_script', start, end: n });
}

/** Whether the word [start, end) whose characters' flags OR to `seen` is a mixed-script one. */
function isMixed(text: string, start: number, end: number, seen: number): boolean {
  return (seen & LATIN) !== 0 && (seen & CYRILLIC_GREEK) !== 0 && !isMicroUnit(text, start, end);
}

function isMicroUnit(text: string, start: number, end: number): boolean {
  if (text.charCodeAt(start) !== MICRO || end - start < 2 || end - start > 4) return false;
  for (let i = start + 1; i < end; i++) {
    const c = text.charCodeAt(i);
    if (!((c >= 65 && c <= 90) || (c >= 97 && c <= 122))) return false;
  }
  return true;
}
