// The prompt-injection scan's view of a non-ASCII text: the normalized view (normalize.ts) with every
// character that imitates a Latin letter folded to that letter: look-alikes from other scripts and
// shapes (lookalikes.ts), letters with accents (`ó` → `o`, through their canonical decomposition,
// uchar.ts foldOf), and combining marks that follow an ASCII character removed (`o\u0301` → `o`).
// So `Ignóre`, `Ign\u043Ere`, `ɪɢɴᴏʀᴇ` and `Ꭵgnore` all read `Ignore`. Only the injection scan reads
// it: PII and secrets keep their accents (an accented name is another name, not a disguise).
//
// A mark after a non-ASCII character stays: it cannot be inside an English word the patterns look
// for (its base is not a Latin letter after the fold), and Devanagari, Arabic or Hebrew text, where
// marks are part of most words, then has nothing removed and nothing to map. A removed mark belongs
// to the character before it: that character's edit covers the marks in the view it was folded from,
// so a finding that ends on `ó` written as o + U+0301 ends after the accent.

import { BEYOND_LATIN1 } from './chars.js';
import type { View } from './normalize.js';
import { codePointAt, FOLD_TABLE, FOLDS, foldOf, isAccented, KEEP, STRIP } from './uchar.js';

/** The folded text, and the characters whose length changed (View.edits, relative to view.text). */
export interface Folded {
  text: string;
  edits: number[];
}

// The fold's loop reads the table through a module constant, not the imported binding.
const FOLD = FOLD_TABLE;

// What the Latin-1 letters fold to (0: unchanged): À-ÿ with accents, Ø and ø.
const LATIN1_LETTER = /[\xc0-\xff]/;
const LATIN1_FOLD = new Uint8Array(0x100);
for (let c = 0xc0; c < 0x100; c++) {
  const f = foldOf(c);
  LATIN1_FOLD[c] = f > STRIP ? f : 0;
}

/** The injection view of a normalized view. */
export function injectionView(view: View): Folded {
  const text = view.text;
  // Nothing past U+00FF: no marks, only the Latin-1 letters to fold, one byte each.
  if (!BEYOND_LATIN1.test(text)) return { text: foldLatin1(text), edits: [] };
  // The pass that built the view saw no character the fold changes (CJK, most emoji).
  if ((view.present & FOLDS) === 0) return { text, edits: [] };
  return foldUnits(text);
}

/** Whether `text` (a view's text) holds between `from` and `to` a character the fold took an accent off. */
export function accentIn(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c < 0xc0) continue;
    const cp = codePointAt(text, i);
    if (isAccented(cp)) return true;
    if (cp > 0xffff) i++;
  }
  return false;
}

// A scratch copy reused from call to call (detect() is synchronous): a fresh 4 KB copy per text was
// about a sixth of the fold's cost on German prose. Texts past KEEP_SCRATCH bytes get their own.
const KEEP_SCRATCH = 1 << 20;
let scratch = Buffer.allocUnsafeSlow(1 << 14);
let scratchBytes = new Uint8Array(scratch.buffer);
let scratchWords = new Uint32Array(scratch.buffer);

/** A copy area of at least `bytes` bytes and three more (to round the Latin-1 copy to whole words). */
function copyArea(bytes: number): Buffer {
  if (bytes + 3 <= scratch.length) return scratch;
  if (bytes + 3 > KEEP_SCRATCH) return Buffer.allocUnsafeSlow(bytes + 3);
  let size = scratch.length;
  while (size < bytes + 3) size *= 2;
  scratch = Buffer.allocUnsafeSlow(size);
  scratchBytes = new Uint8Array(scratch.buffer);
  scratchWords = new Uint32Array(scratch.buffer);
  return scratch;
}

/**
 * Latin-1 letters with accents folded, in a byte copy (V8 keeps such a string in one byte a unit).
 * The loop passes over four ASCII bytes at a time (the copy is padded with zeros to whole words).
 */
function foldLatin1(text: string): string {
  const first = text.search(LATIN1_LETTER);
  if (first === -1) return text;
  const n = text.length;
  const buf = copyArea(n);
  buf.write(text, 0, n, 'latin1');
  const own = buf !== scratch;
  const bytes = own ? new Uint8Array(buf.buffer, 0, buf.length) : scratchBytes;
  const words = own ? new Uint32Array(buf.buffer, 0, buf.length >>> 2) : scratchWords;
  const whole = (n + 3) >>> 2;
  for (let i = n; i < whole * 4; i++) bytes[i] = 0;
  let changed = false;
  for (let k = first >>> 2; k < whole; k++) {
    if ((words[k]! & 0x80808080) === 0) continue;
    for (let i = k * 4; i < k * 4 + 4; i++) {
      const b = bytes[i]!;
      if (b < 0xc0) continue;
      const to = LATIN1_FOLD[b]!;
      if (to === 0) continue;
      bytes[i] = to;
      changed = true;
    }
  }
  return changed ? buf.toString('latin1', 0, n) : text;
}

/**
 * The fold over the code units of a two-byte string, copied natively (UTF-16LE) into the copy area,
 * folded and compacted in place, and decoded back. Until the first mark to remove
 * or the first astral character, every change is one unit for one and made in place; the rest goes
 * through the loop that compacts and maps.
 */
function foldUnits(text: string): Folded {
  const n = text.length;
  const bytes = copyArea(n * 2);
  bytes.write(text, 0, n * 2, 'utf16le');
  const u = new Uint16Array(bytes.buffer, 0, n);
  let changed = false;
  let r = 0;
  for (; r < n; r++) {
    const c = u[r]!;
    // Nothing below U+00C0 folds (the view has already made ª º and the like ASCII).
    if (c < 0xc0) continue;
    let f = FOLD[c]!;
    if (f === 0) f = foldOf(c);
    if (f === KEEP && (c < 0xd800 || c > 0xdbff)) continue;
    if (f <= STRIP || (c >= 0xd800 && c <= 0xdfff)) break;
    u[r] = f;
    changed = true;
  }
  if (r === n)
    return changed ? { text: bytes.toString('utf16le', 0, n * 2), edits: [] } : { text, edits: [] };
  return foldRest(text, bytes, u, r);
}

/** foldUnits() from unit `from` on (units before it already folded in place). */
function foldRest(text: string, bytes: Buffer, u: Uint16Array, from: number): Folded {
  const n = u.length;
  const edits: number[] = [];
  let changed = from > 0; // conservatively: the result is decoded either way
  let w = from; // units written
  let r = from; // units read
  while (r < n) {
    const c = u[r]!;
    if (c < 0xc0) {
      if (w !== r) u[w] = c;
      w++;
      r++;
      continue;
    }
    let cp = c;
    let len = 1;
    if (c >= 0xd800 && c <= 0xdbff && r + 1 < n) {
      const lo = u[r + 1]!;
      if (lo >= 0xdc00 && lo <= 0xdfff) {
        cp = (c - 0xd800) * 0x400 + (lo - 0xdc00) + 0x10000;
        len = 2;
      }
    }
    const f = foldOf(cp);
    if (f === STRIP && w > 0 && u[w - 1]! < 0x80) {
      // A mark on an ASCII character: the character's edit takes it in. If the last edit does not end
      // with that character, the character is unchanged and sits right before the mark.
      const k = edits.length;
      if (k > 0 && edits[k - 1] === w) edits[k - 3] = r + len;
      else edits.push(r - 1, r + len, w - 1, w);
      r += len;
      changed = true;
      continue;
    }
    if (f > STRIP) {
      u[w] = f;
      if (len === 2) edits.push(r, r + 2, w, w + 1);
      w++;
      r += len;
      changed = true;
      continue;
    }
    if (w !== r) {
      u[w] = c;
      if (len === 2) u[w + 1] = u[r + 1]!;
    }
    w += len;
    r += len;
  }
  if (!changed) return { text, edits: [] };
  return { text: bytes.toString('utf16le', 0, w * 2), edits };
}
