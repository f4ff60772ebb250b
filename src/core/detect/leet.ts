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
const MIN_LENGTH = 3;

/** The letter (lower case) each leet character reads as, by code unit; `1` is tried as `i`, then `l`. */
const AS_LETTER = new Uint8Array(128);
for (const [c, l] of Object.entries({ 0: 'o', 1: 'i', 3: 'e', 4: 'a', 5: 's', 7: 't', '@': 'a', $: 's' }))
  AS_LETTER[c.charCodeAt(0)] = l.charCodeAt(0);
const ONE = 49;

/** INJECTION_WORDS as a trie over a–z, so a word is rejected at its first letter that leads nowhere. */
interface Node {
  end: boolean;
  next: (Node | undefined)[];
}
const ROOT: Node = { end: false, next: [] };
let longest = 0;
for (const w of INJECTION_WORDS) {
  if (!/^[a-z]+$/.test(w)) continue;
  longest = Math.max(longest, w.length);
  let node = ROOT;
  for (let j = 0; j < w.length; j++) {
    const k = w.charCodeAt(j) - 97;
    node = node.next[k] ??= { end: false, next: [] };
  }
  node.end = true;
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
    let done = 0; // the end of the last word read for this character
    for (let i = text.indexOf(ch); i !== -1; i = text.indexOf(ch, i + 1)) {
      if (i < done) continue;
      // A word that mixes letters with these characters has one of them next to a letter.
      if (!isAsciiLetter(text.charCodeAt(i - 1)) && !isAsciiLetter(text.charCodeAt(i + 1))) continue;
      done = tryWord(text, i);
    }
  }
  if (foldAt.length === 0) return text;
  // Few words, each found once per kind of leet character in it: order them, skip repeats.
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

/**
 * Records the word around offset `i` if it reads as a pattern word; returns an offset before which
 * no other start need be tried (the word's end, or `i + 1` when it was given up early).
 */
function tryWord(text: string, i: number): number {
  // The word's extent, given up at the first character no pattern word can hold (another digit, `_`)
  // or once it is longer than any pattern word: hex ids and identifiers cost a few reads.
  let s = i;
  while (s > 0) {
    const c = text.charCodeAt(s - 1);
    if (!isLetterOrLeet(c)) {
      if (isWordPart(c)) return i + 1;
      break;
    }
    if (i - --s >= longest) return i + 1;
  }
  let e = i + 1;
  while (e < text.length) {
    const c = text.charCodeAt(e);
    if (!isLetterOrLeet(c)) {
      if (isWordPart(c)) return e;
      break;
    }
    if (++e - s > longest) return e;
  }
  if (e - s < MIN_LENGTH) return e;
  let letters = 0;
  let upper = 0;
  let ones = 0;
  for (let j = s; j < e; j++) {
    const c = text.charCodeAt(j);
    if (isAsciiLetter(c)) {
      letters++;
      if (isUpper(c)) upper++;
    } else if (c === ONE) ones++;
  }
  let one = 105; // i
  if (!readsAsWord(text, s, e, one)) {
    if (ones === 0) return e;
    one = 108; // l
    if (!readsAsWord(text, s, e, one)) return e;
  }
  let read = '';
  for (let j = s; j < e; j++) {
    const c = text.charCodeAt(j);
    read += String.fromCharCode(isAsciiLetter(c) ? c | 0x20 : c === ONE ? one : AS_LETTER[c]!);
  }
  foldAt.push(s);
  // A word in capitals stays in capitals (`1GN0RE`), for the case-sensitive patterns (`D4N`).
  foldTo.push(upper === letters ? read.toUpperCase() : read);
  return e;
}

function isLetterOrLeet(c: number): boolean {
  return isAsciiLetter(c) || (c < 128 && AS_LETTER[c] !== 0);
}

/** Whether text[s, e), its leet characters read as letters (`1` as `one`), is a pattern word. */
function readsAsWord(text: string, s: number, e: number, one: number): boolean {
  let node: Node | undefined = ROOT;
  for (let j = s; j < e && node !== undefined; j++) {
    const c = text.charCodeAt(j);
    const letter = isAsciiLetter(c) ? c | 0x20 : c === ONE ? one : AS_LETTER[c]!;
    node = node.next[letter - 97];
  }
  return node?.end === true;
}
