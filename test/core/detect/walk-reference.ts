// The detectors' path for non-ASCII text as it was before the pre-checks (commit 8b00fc4), written out
// plainly as the reference of the differential tests in nonascii.test.ts: it reads every character,
// maps every code unit of the normalized view to its character, builds the injection view one
// character at a time (its fold, or a mark joining the ASCII character before it) with every code
// unit mapped, and looks for invisible runs and mixed-script words as the old walk did (that part is
// the old code). It shares with src/ only what the pre-checks do not touch: the per-code-point table
// (uchar.ts, the fold of each character included), the scanners that read the view, and the
// exemptions for invisible characters. Slow on purpose; do not optimise it.

import { detect } from '../../../src/core/detect/index.js';
import { emptyInjectionScores, scanInjection } from '../../../src/core/detect/injection.js';
import { foldLeet } from '../../../src/core/detect/leet.js';
import { scanPii } from '../../../src/core/detect/pii.js';
import { piiMask } from '../../../src/core/detect/pii-mask.js';
import { scanSecrets } from '../../../src/core/detect/secrets.js';
import type {
  DetectionResult,
  DetectOptions,
  Finding,
  InjectionScores,
} from '../../../src/core/detect/types.js';
import {
  CHANGES,
  CYRILLIC_GREEK,
  codePointAt,
  flagsOf,
  foldOf,
  formOf,
  INVISIBLE,
  isAccented,
  LATIN,
  STRIP,
  WORD,
} from '../../../src/core/detect/uchar.js';
import { scanInvisibleRun } from '../../../src/core/detect/unicode.js';

export interface ReferenceView {
  text: string;
  /** Per code unit of `text`: where the original character starts, and where it ends. */
  start: Int32Array;
  end: Int32Array;
}

/** detect() with the walking path for every text that is not all ASCII. */
export function referenceDetect(text: string, opts: DetectOptions = {}): DetectionResult {
  if (Buffer.byteLength(text, 'utf8') === text.length) return detect(text, opts);
  const mask = piiMask(opts.pii);
  const secrets = opts.secrets !== false;
  const injection = opts.injection !== false;
  const findings: Finding[] = [];
  let scores: InjectionScores;
  const view = mask !== 0 || secrets || injection ? referenceView(text) : undefined;
  const scanned = view === undefined ? text : view.text;
  scanPii(scanned, mask, findings);
  if (secrets) scanSecrets(scanned, findings);
  if (view !== undefined) mapBack(findings, 0, view);
  if (injection) {
    const injectionOf = (v: ReferenceView | undefined): InjectionScores => {
      const scannedText = v === undefined ? text : v.text;
      const from = findings.length;
      const folded = referenceInjectionView(scannedText);
      // A pattern written in one case matches no span that had an accent taken off.
      const unaccented = (s: number, e: number): boolean => {
        for (let i = folded.start[s]!; i < folded.end[e - 1]!; i++) {
          if (isAccented(codePointAt(scannedText, i))) return false;
        }
        return true;
      };
      const sc = scanInjection(foldLeet(folded.text), findings, unaccented);
      mapBack(findings, from, folded);
      if (v !== undefined) mapBack(findings, from, v);
      return sc;
    };
    scores = injectionOf(view);
    // Invisible characters as spaces too (they separate the words they sit between).
    if ([...text].some((c) => (flagsOf(c.codePointAt(0) as number) & INVISIBLE) !== 0)) {
      const from = findings.length;
      const spaced = injectionOf(referenceView(text, ' '));
      const before = new Set(
        findings.slice(0, from).map((f) => `${f.category}:${f.type}:${f.start}:${f.end}`),
      );
      const added = findings
        .splice(from)
        .filter((f) => !before.has(`${f.category}:${f.type}:${f.start}:${f.end}`));
      findings.push(...added);
      for (const k of Object.keys(scores) as (keyof InjectionScores)[])
        if (spaced[k] > scores[k]) scores[k] = spaced[k];
    }
  } else {
    scores = emptyInjectionScores();
  }
  if (opts.unicode !== false) referenceUnicode(text, findings);
  if (findings.length > 1) {
    findings.sort((a, b) => a.start - b.start || b.end - a.end);
    dropContainedPii(findings);
  }
  return { findings, injection: scores };
}

function mapBack(findings: Finding[], from: number, view: ReferenceView): void {
  for (let k = from; k < findings.length; k++) {
    const f = findings[k]!;
    f.start = view.start[f.start]!;
    f.end = view.end[f.end - 1]!;
  }
}

function dropContainedPii(sorted: Finding[]): void {
  let w = 0;
  let coveredTo = -1;
  for (let r = 0; r < sorted.length; r++) {
    const f = sorted[r]!;
    if (f.category === 'pii' && f.end <= coveredTo) continue;
    if ((f.category === 'secret' || f.category === 'pii') && f.end > coveredTo) coveredTo = f.end;
    sorted[w++] = f;
  }
  sorted.length = w;
}

/**
 * The normalized view, every code unit mapped (each unit of a changed character's form to the whole
 * character, each unit of an unchanged one to itself); undefined when nothing changes.
 */
export function referenceView(text: string, invisibleAs = ''): ReferenceView | undefined {
  const start: number[] = [];
  const end: number[] = [];
  let out = '';
  let changed = false;
  for (let i = 0; i < text.length; ) {
    const cp = codePointAt(text, i);
    const len = cp > 0xffff ? 2 : 1;
    if (cp >= 0x80 && (flagsOf(cp) & CHANGES) !== 0) {
      const form = invisibleAs !== '' && (flagsOf(cp) & INVISIBLE) !== 0 ? invisibleAs : formOf(cp);
      out += form;
      for (let k = 0; k < form.length; k++) {
        start.push(i);
        end.push(i + len);
      }
      changed = true;
    } else {
      out += text.slice(i, i + len);
      for (let k = i; k < i + len; k++) {
        start.push(k);
        end.push(k + 1);
      }
    }
    i += len;
  }
  return changed ? { text: out, start: Int32Array.from(start), end: Int32Array.from(end) } : undefined;
}

/**
 * The injection view of a normalized view's text, every code unit mapped to the character of `text`
 * it came from: each character folded (uchar.ts foldOf), a combining mark after an ASCII character
 * joined to it (that character then ends after the mark), everything else as it is.
 */
export function referenceInjectionView(text: string): ReferenceView {
  const start: number[] = [];
  const end: number[] = [];
  let out = '';
  for (let i = 0; i < text.length; ) {
    const cp = codePointAt(text, i);
    const len = cp > 0xffff ? 2 : 1;
    const f = foldOf(cp);
    if (f === STRIP && out.length > 0 && out.charCodeAt(out.length - 1) < 0x80) {
      end[out.length - 1] = i + len;
    } else if (f > STRIP) {
      out += String.fromCharCode(f);
      start.push(i);
      end.push(i + len);
    } else {
      out += text.slice(i, i + len);
      for (let k = i; k < i + len; k++) {
        start.push(k);
        end.push(k + 1);
      }
    }
    i += len;
  }
  return { text: out, start: Int32Array.from(start), end: Int32Array.from(end) };
}

/** The unicode findings: runs of invisible characters, then mixed-script words, every character read. */
export function referenceUnicode(text: string, out: Finding[]): void {
  const n = text.length;
  let cyrillicGreek = false;
  for (let i = 0; i < n; ) {
    if (text.charCodeAt(i) < 0x80) {
      i++;
      continue;
    }
    const cp = codePointAt(text, i);
    const f = flagsOf(cp);
    if (f & CYRILLIC_GREEK) cyrillicGreek = true;
    if ((f & INVISIBLE) === 0) {
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    const s = i;
    do {
      const c = codePointAt(text, i);
      i += c > 0xffff ? 2 : 1;
    } while (i < n && (flagsOf(codePointAt(text, i)) & INVISIBLE) !== 0);
    scanInvisibleRun(text, s, i, out);
  }
  if (cyrillicGreek) mixedScript(text, out);
}

function mixedScript(text: string, out: Finding[]): void {
  const n = text.length;
  let start = -1;
  let seen = 0;
  for (let i = 0; i <= n; ) {
    let f = 0;
    let len = 1;
    if (i < n) {
      const c = text.charCodeAt(i);
      if (c < 0x80) f = (c >= 65 && c <= 90) || (c >= 97 && c <= 122) ? WORD | LATIN : 0;
      else {
        const cp = codePointAt(text, i);
        f = flagsOf(cp);
        if (cp > 0xffff) len = 2;
      }
    }
    if (f & WORD) {
      if (start < 0) {
        start = i;
        seen = 0;
      }
      seen |= f;
    } else if (start >= 0) {
      if ((seen & LATIN) !== 0 && (seen & CYRILLIC_GREEK) !== 0 && !isMicroUnit(text, start, i)) {
        out.push({ category: 'unicode', type: 'mixed_script', start, end: i });
      }
      start = -1;
    }
    i += len;
  }
}

function isMicroUnit(text: string, start: number, end: number): boolean {
  if (text.charCodeAt(start) !== 0x03bc || end - start < 2 || end - start > 4) return false;
  for (let i = start + 1; i < end; i++) {
    const c = text.charCodeAt(i);
    if (!((c >= 65 && c <= 90) || (c >= 97 && c <= 122))) return false;
  }
  return true;
}
