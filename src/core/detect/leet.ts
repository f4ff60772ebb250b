// Digits and signs written for letters (`1gn0re prev1ous 1nstruct1ons`), read as the letters for the
// injection scan: 0 o, 1 i or l, 3 e, 4 a, 5 s, 7 t, @ a, $ s. Digits are everywhere in ordinary text
// and code, so a word is read this way only when all of these hold:
//
// - it is a run of ASCII letters and those characters only (`v1.0.3`, `x86_64`, `sha256`, `2024` are
//   not: a dot, `_` or another digit belongs to no word the patterns look for);
// - it has a letter and at least three characters (`A1`, `t0`, `B2` stay: cells and indexes);
// - so read, it is a word the injection patterns are written with (INJECTION_WORDS): `l33t`, `n00b`,
//   `0x1f`, `utf8` and identifiers keep their digits, and only a word that the patterns could match
//   changes (`1gn0re` → `ignore`, `a11` → `all`, `@dmin` → `admin`).
//
// `1` reads as `i` or, when that is no such word, as `l`. Each character stays one code unit, so the
// offsets of the text hold. detect() calls this only for text with a digit (which it has asked
// already, for PII), `@` or `$`.

import { isAsciiLetter, isUpper } from './chars.js';
import { INJECTION_WORDS } from './injection-table.js';

const LEET = ['0', '1', '3', '4', '5', '7', '@', '$'];
const AS_LETTER: Readonly<Record<string, string>> = {
  '0': 'o',
  '1': 'i',
  '3': 'e',
  '4': 'a',
  '5': 's',
  '7': 't',
  '@': 'a',
  $: 's',
};
const MIN_LENGTH = 3;

function isLeet(c: number): boolean {
  // 0 1 3 4 5 7 @ $
  return c === 48 || c === 49 || c === 51 || c === 52 || c === 53 || c === 55 || c === 64 || c === 36;
}

/** A character of a word as this fold reads words: ASCII letters, digits, `_`, `@`, `$`. */
function isWordPart(c: number): boolean {
  return isAsciiLetter(c) || (c >= 48 && c <= 57) || c === 95 || c === 64 || c === 36;
}

// Words folded in the current call: start offsets and their letters.
const foldAt: number[] = [];
const foldTo: string[] = [];

/** `text` with its leet words read as letters (see above); the text itself when there is none. */
export function foldLeet(text: string): string {
  foldAt.length = 0;
  foldTo.length = 0;
  for (let k = 0; k < LEET.length; k++) {
    const ch = LEET[k]!;
    for (let i = text.indexOf(ch); i !== -1; i = text.indexOf(ch, i + 1)) {
      // A word that mixes letters with these characters has one of them next to a letter.
      if (!isAsciiLetter(text.charCodeAt(i - 1)) && !isAsciiLetter(text.charCodeAt(i + 1))) continue;
      tryWord(text, i);
    }
  }
  if (foldAt.length === 0) return text;
  // Few words, each found once per leet character next to a letter: order them, skip repeats.
  const order = foldAt.map((_, k) => k).sort((a, b) => foldAt[a]! - foldAt[b]!);
  let out = '';
  let pos = 0;
  for (const k of order) {
    const at = foldAt[k]!;
    if (at < pos) continue;
    out += text.slice(pos, at) + foldTo[k]!;
    pos = at + foldTo[k]!.length;
  }
  return out + text.slice(pos);
}

/** Records the word around offset `i` if it reads as a pattern word. */
function tryWord(text: string, i: number): void {
  let s = i;
  while (s > 0 && isWordPart(text.charCodeAt(s - 1))) s--;
  let e = i + 1;
  while (e < text.length && isWordPart(text.charCodeAt(e))) e++;
  if (e - s < MIN_LENGTH) return;
  let letters = 0;
  let upper = 0;
  for (let j = s; j < e; j++) {
    const c = text.charCodeAt(j);
    if (isAsciiLetter(c)) {
      letters++;
      if (isUpper(c)) upper++;
    } else if (!isLeet(c)) return;
  }
  if (letters === 0) return;
  const word = text.slice(s, e).toLowerCase();
  let read = word.replace(/[013457@$]/g, (c) => AS_LETTER[c] ?? c);
  if (!INJECTION_WORDS.has(read)) {
    if (!word.includes('1')) return;
    read = read.replace(/i/g, (c, at: number) => (word[at] === '1' ? 'l' : c));
    if (!INJECTION_WORDS.has(read)) return;
  }
  foldAt.push(s);
  // A word in capitals stays in capitals (`1GN0RE`), for the case-sensitive patterns (`D4N`).
  foldTo.push(upper === letters ? read.toUpperCase() : read);
}
