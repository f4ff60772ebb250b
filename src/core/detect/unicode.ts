// Hidden-unicode tricks: invisible characters (zero-width space/joiners, word joiner and invisible
// operators, Mongolian vowel separator, a BOM anywhere but at the start, Unicode tag characters
// U+E0000–U+E007F) and bidirectional controls (LRM/RLM/ALM, embeddings and overrides U+202A–U+202E,
// isolates U+2066–U+2069). Consecutive characters of one type form one finding.
//
// Legitimate uses are not findings: ZWJ inside emoji sequences, ZWNJ/ZWJ between letters of Arabic
// and Indic scripts (where they shape words, also at a word edge) and tag sequences of subdivision
// flags (U+1F3F4 … U+E007F).

import type { Finding, UnicodeType } from './types.js';

const TRICK =
  /[\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF\u180E\u061C]|\uDB40[\uDC00-\uDC7F]/g;
const ZWNJ = 0x200c;
const ZWJ = 0x200d;
const TAG_HIGH = 0xdb40;

/** The trick type of the code unit at `i` (0 = none, 1 = invisible, 2 = bidi, 3 = tag pair). */
function kindAt(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === TAG_HIGH) {
    const lo = text.charCodeAt(i + 1);
    return lo >= 0xdc00 && lo <= 0xdc7f ? 3 : 0;
  }
  if ((c >= 0x200b && c <= 0x200d) || (c >= 0x2060 && c <= 0x2064) || c === 0xfeff || c === 0x180e) return 1;
  if (c === 0x200e || c === 0x200f || c === 0x061c) return 2;
  if ((c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069)) return 2;
  return 0;
}

export function scanUnicode(text: string, out: Finding[]): void {
  TRICK.lastIndex = 0;
  for (let m = TRICK.exec(text); m !== null; m = TRICK.exec(text)) {
    const start = m.index;
    const kind = kindAt(text, start);
    let end = start;
    // A run of one type; tag pairs and invisible characters are both 'invisible'.
    for (let k = kindAt(text, end); k !== 0 && (k === 2) === (kind === 2); k = kindAt(text, end)) {
      end += k === 3 ? 2 : 1;
    }
    TRICK.lastIndex = end;
    if (exempt(text, start, end, kind)) continue;
    const type: UnicodeType = kind === 2 ? 'bidi' : 'invisible';
    out.push({ category: 'unicode', type, start, end });
  }
}

function exempt(text: string, start: number, end: number, kind: number): boolean {
  const c = text.charCodeAt(start);
  if (c === 0xfeff && start === 0 && end === 1) return true;
  if (kind === 3) {
    // Subdivision flag: U+1F3F4 (D83C DFF4), tags, ending with CANCEL TAG U+E007F (DB40 DC7F).
    return (
      start >= 2 &&
      text.charCodeAt(start - 2) === 0xd83c &&
      text.charCodeAt(start - 1) === 0xdff4 &&
      text.charCodeAt(end - 1) === 0xdc7f
    );
  }
  if (end - start !== 1 || (c !== ZWJ && c !== ZWNJ)) return false;
  const prev = text.charCodeAt(start - 1);
  const next = text.charCodeAt(end);
  if (c === ZWJ && isEmojiTail(prev) && isEmojiHead(next)) return true;
  // Between two letters of a joining script, or at a word edge next to one (before/after a space).
  if (isJoiningScript(prev)) return isJoiningScript(next) || next === 32;
  return prev === 32 && isJoiningScript(next);
}

function isEmojiTail(c: number): boolean {
  // Low surrogate (astral emoji), VS16, skin-tone modifiers are astral too, misc symbols/dingbats.
  return (c >= 0xdc00 && c <= 0xdfff) || c === 0xfe0f || (c >= 0x2600 && c <= 0x27bf);
}

function isEmojiHead(c: number): boolean {
  return (c >= 0xd800 && c <= 0xdbff) || (c >= 0x2600 && c <= 0x27bf);
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
