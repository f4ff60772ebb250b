// The normalized view the PII, secret and injection scans read when a text holds anything outside
// ASCII: every default-ignorable and format character removed, every other character that NFKC
// changes replaced by its NFKC form (full-width `ＡＫＩＡ` → `AKIA`, `ｊａｎｅ＠` → `jane@`, math
// alphanumerics, ligatures, compatibility spaces → space). The injection scan reads a further view of
// this one, with look-alikes and accents folded (injection-view.ts). The view lists the characters it
// changed, so each of its code units maps back to the original character it came from and findings
// map back to spans that cover the whole disguise.
// Most non-ASCII prose has nothing to change (accents, Cyrillic, CJK ideographs); then the view is
// the text itself and there is nothing to map.
//
// The NFKC step is per character (no composition across characters): the detectors look for ASCII
// shapes, which composition does not create.

import { BEYOND_LATIN1 } from './chars.js';
import { CHANGES, codePointAt, FOLDS, flagsOf, formOf, INVISIBLE, LATIN, WORD } from './uchar.js';

/**
 * True when every code unit is ASCII (the detectors' fast path): one SIMD pass over a one-byte string
 * (Buffer.byteLength); a two-byte one is refused at its first character past U+00FF instead, since
 * the UTF-8 length of CJK or Cyrillic text costs a pass of its own.
 */
export function isAscii(text: string): boolean {
  return !BEYOND_LATIN1.test(text) && Buffer.byteLength(text, 'utf8') === text.length;
}

export interface View {
  /** The normalized text: the original text itself when nothing changes. */
  text: string;
  /**
   * The characters the view changed, in text order, four numbers each: where the character starts
   * and ends in the original text, and where its form starts and ends in the view (a removed
   * character's form is empty). Every other code unit of the view is the original one, shifted.
   */
  edits: number[];
  /**
   * The flags (uchar.ts) of every character of the original text OR-ed together, read on the same
   * pass: which kinds of character occur at all, so a scan for a kind that does not is skipped. It
   * may name a kind that does not occur, never miss one.
   */
  present: number;
}

// The characters below U+0100 that the view changes: the no-break space, the soft hyphen, spacing
// diacritics, ordinal indicators, superscripts, the micro sign, fractions.
const LATIN1_CHANGES = /[\xa0\xa8\xaa\xad\xaf\xb2-\xb5\xb8-\xba\xbc-\xbe]/;

/**
 * `text` without default-ignorable/format characters and with NFKC compatibility forms. With
 * `invisibleAs`, each of those characters becomes that text instead (a space: the view where an
 * invisible character between two words still separates them).
 */
export function normalizedView(text: string, invisibleAs = ''): View {
  // Text with no character past U+00FF (most western European prose that has no typographic quotes
  // or dashes) is checked by two regexes, which V8 runs on its one-byte strings far faster than the
  // walk below (the first fails at once). Such text holds no invisible, Cyrillic or Greek character
  // unless it holds one that changes (the soft hyphen); `present` then names the Latin letters it
  // may hold, accented ones among them.
  if (!BEYOND_LATIN1.test(text) && !LATIN1_CHANGES.test(text)) {
    return { text, edits: [], present: WORD | LATIN | FOLDS };
  }
  const n = text.length;
  let present = 0;
  let out = '';
  const edits: number[] = [];
  let pos = 0; // text before pos is in out
  let j = 0; // out.length
  let i = 0;
  for (;;) {
    // On to the next character that changes, OR-ing in the flags of every character passed. (A BMP
    // character is read apart from a pair: the compiler then knows its table read is in bounds.)
    let cp = 0;
    for (; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c < 0xd800 || c > 0xdbff) {
        const f = flagsOf(c);
        present |= f;
        if ((f & CHANGES) === 0) continue;
        cp = c;
      } else {
        cp = codePointAt(text, i);
        const f = flagsOf(cp);
        present |= f;
        if ((f & CHANGES) === 0) {
          if (cp > 0xffff) i++;
          continue;
        }
      }
      break;
    }
    if (i >= n) break;
    // The unchanged stretch before the character, then its form.
    const form = invisibleAs !== '' && (flagsOf(cp) & INVISIBLE) !== 0 ? invisibleAs : formOf(cp);
    out += text.slice(pos, i) + form;
    j += i - pos;
    pos = i + (cp > 0xffff ? 2 : 1);
    edits.push(i, pos, j, j + form.length);
    j += form.length;
    i = pos;
  }
  return { text: edits.length === 0 ? text : out + text.slice(pos), edits, present };
}

/** The map of a view (this one, or the injection view of one) back to the text it was made from. */
export type ViewMap = Pick<View, 'edits'>;

/** Where the original character under code unit `v` of the view starts. */
export function originalStart(view: ViewMap, v: number): number {
  const k = lastEditAt(view.edits, v);
  if (k < 0) return v;
  const e = view.edits;
  const at = k * 4;
  // Inside the edit's form, or in the unchanged stretch after it.
  return v < e[at + 3]! ? e[at]! : e[at + 1]! + (v - e[at + 3]!);
}

/** Where the original character under code unit `v` of the view ends. */
export function originalEnd(view: ViewMap, v: number): number {
  const k = lastEditAt(view.edits, v);
  if (k < 0) return v + 1;
  const e = view.edits;
  const at = k * 4;
  return v < e[at + 3]! ? e[at + 1]! : e[at + 1]! + (v - e[at + 3]!) + 1;
}

/**
 * The last edit whose form starts at or before view offset `v` (its number, -1 if none). Of edits
 * whose forms start at one offset (removed characters, then at most one with a form), the last is
 * the one whose form may hold `v`; if it does not, `v` is in the unchanged stretch after it.
 */
function lastEditAt(edits: number[], v: number): number {
  let lo = 0;
  let hi = edits.length / 4; // the first edit whose form starts past v is in [lo, hi]
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (edits[mid * 4 + 2]! <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}
