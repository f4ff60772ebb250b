// The normalized view the PII, secret and injection scans read when a text holds anything outside
// ASCII: every default-ignorable and format character removed, every other character that NFKC
// changes replaced by its NFKC form (full-width `ＡＫＩＡ` → `AKIA`, `ｊａｎｅ＠` → `jane@`, math
// alphanumerics, ligatures, compatibility spaces → space), and for the injection scan also Cyrillic
// and Greek look-alikes folded to the Latin letter they imitate (`Ignоre` with a Cyrillic о →
// `Ignore`). Each code unit of a view knows the original character it came from, so findings map
// back to spans of the original text that cover the whole disguise.
//
// The NFKC step is per character (no composition across characters): the detectors look for ASCII
// shapes, which composition does not create.

import { CHANGES, codePointAt, flagsOf, formOf } from './uchar.js';

/** True when every code unit is ASCII (one SIMD pass in V8/Node; the detectors' fast path). */
export function isAscii(text: string): boolean {
  return Buffer.byteLength(text, 'utf8') === text.length;
}

export interface View {
  text: string;
  /** Per code unit of `text`: where the original character starts, and where it ends. */
  start: Int32Array;
  end: Int32Array;
}

/**
 * `text` without default-ignorable/format characters and with NFKC compatibility forms, or
 * undefined when that changes nothing.
 */
export function normalizedView(text: string): View | undefined {
  const n = text.length;
  let out = '';
  let start: Int32Array | undefined;
  let end: Int32Array | undefined;
  let j = 0;
  let pos = 0;
  for (let i = 0; i < n; ) {
    const c = text.charCodeAt(i);
    if (c < 0x80) {
      i++;
      continue;
    }
    const cp = codePointAt(text, i);
    const len = cp > 0xffff ? 2 : 1;
    if ((flagsOf(cp) & CHANGES) === 0) {
      i += len;
      continue;
    }
    const r = formOf(cp);
    const need = j + (i - pos) + r.length;
    if (start === undefined || end === undefined || need > start.length) {
      const cap = Math.max(n + 16, need * 2);
      start = grow(start, cap);
      end = grow(end, cap);
    }
    // The unchanged stretch before the character, then its form (every unit maps to the character).
    out += text.slice(pos, i);
    for (let k = pos; k < i; k++) {
      start[j] = k;
      end[j++] = k + 1;
    }
    out += r;
    for (let k = 0; k < r.length; k++) {
      start[j] = i;
      end[j++] = i + len;
    }
    i += len;
    pos = i;
  }
  if (start === undefined || end === undefined) return undefined;
  const rest = n - pos;
  if (j + rest > start.length) {
    start = grow(start, j + rest);
    end = grow(end, j + rest);
  }
  out += text.slice(pos);
  for (let k = pos; k < n; k++) {
    start[j] = k;
    end[j++] = k + 1;
  }
  return { text: out, start: start.subarray(0, j), end: end.subarray(0, j) };
}

function grow(a: Int32Array | undefined, cap: number): Int32Array {
  const b = new Int32Array(cap);
  if (a !== undefined) b.set(a);
  return b;
}

/** Cyrillic and Greek letters that look like a Latin letter, with that letter (same case). */
export const CONFUSABLES: Readonly<Record<string, string>> = {
  // Cyrillic
  а: 'a',
  в: 'b',
  е: 'e',
  ё: 'e',
  һ: 'h',
  і: 'i',
  ї: 'i',
  ј: 'j',
  к: 'k',
  м: 'm',
  н: 'h',
  о: 'o',
  р: 'p',
  с: 'c',
  т: 't',
  у: 'y',
  х: 'x',
  ѕ: 's',
  ԁ: 'd',
  ԛ: 'q',
  ԝ: 'w',
  ӏ: 'l',
  А: 'A',
  В: 'B',
  Е: 'E',
  Ё: 'E',
  Һ: 'H',
  І: 'I',
  Ї: 'I',
  Ј: 'J',
  К: 'K',
  М: 'M',
  Н: 'H',
  О: 'O',
  Р: 'P',
  С: 'C',
  Т: 'T',
  У: 'Y',
  Х: 'X',
  Ѕ: 'S',
  Ԁ: 'D',
  Ԛ: 'Q',
  Ԝ: 'W',
  Ӏ: 'l',
  // Greek
  α: 'a',
  ε: 'e',
  ι: 'i',
  κ: 'k',
  ν: 'v',
  ο: 'o',
  ρ: 'p',
  τ: 't',
  υ: 'u',
  χ: 'x',
  γ: 'y',
  ϲ: 'c',
  ϳ: 'j',
  Α: 'A',
  Β: 'B',
  Ε: 'E',
  Ζ: 'Z',
  Η: 'H',
  Ι: 'I',
  Κ: 'K',
  Μ: 'M',
  Ν: 'N',
  Ο: 'O',
  Ρ: 'P',
  Τ: 'T',
  Υ: 'Y',
  Χ: 'X',
  Ϲ: 'C',
};
const GREEK_CYRILLIC_BLOCKS = /[\u0370-\u052f]/;
const FOLD = new Uint16Array(0x530 - 0x370);
for (const [from, to] of Object.entries(CONFUSABLES)) FOLD[from.charCodeAt(0) - 0x370] = to.charCodeAt(0);

/** `text` with Cyrillic/Greek look-alikes folded to Latin; one code unit each, so offsets are kept. */
export function foldConfusables(text: string): string {
  if (!GREEK_CYRILLIC_BLOCKS.test(text)) return text;
  let buf: Uint16Array | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x370 || c >= 0x530) continue;
    const to = FOLD[c - 0x370]!;
    if (to === 0) continue;
    if (buf === undefined) {
      buf = new Uint16Array(text.length);
      for (let k = 0; k < text.length; k++) buf[k] = text.charCodeAt(k);
    }
    buf[i] = to;
  }
  return buf === undefined
    ? text
    : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength).toString('utf16le');
}
