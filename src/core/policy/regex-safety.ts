// User-supplied regular expressions: bounded length, compiled once, and run on V8's linear-time
// engine (the `l` flag), so no pattern can take more than time linear in its input.

import { setFlagsFromString } from 'node:v8';
import safeRegex from 'safe-regex2';

// Enables the `l` flag. Set when this module loads, before any rule regex is compiled; it only
// makes the flag available and changes no other regex.
setFlagsFromString('--enable-experimental-regexp-engine');

export const MAX_REGEX_LENGTH = 512;
const ALLOWED_FLAGS = /^[ims]*$/;
const LEGACY_FLAGS = /^[imsu]*$/;

/**
 * `legacy` marks a refusal that the checks before the linear-time engine (up to v0.x: any flags
 * among i m s u, safe-regex2) accepted: a stored version may hold such a pattern.
 */
export type RegexCheck = { ok: true; regex: RegExp } | { ok: false; message: string; legacy?: boolean };

/**
 * Accepts a pattern only if it is at most 512 characters, compiles, safe-regex2 finds no nested
 * quantifier, and V8's linear-time engine accepts it (no backreferences, lookarounds or large
 * counted repeats). The regex returned runs on that engine. Flags: i, m, s; `i` is applied by
 * rewriting each letter to every letter it equals ignoring case (the engine has no `i`), `u` is
 * refused (the engine has no Unicode mode), as are the stateful g and y (a compiled regex is
 * shared across calls).
 */
export function checkRegex(pattern: string, flags = ''): RegexCheck {
  if (pattern.length > MAX_REGEX_LENGTH) {
    return { ok: false, message: `regex is ${pattern.length} characters; at most ${MAX_REGEX_LENGTH}` };
  }
  if (!LEGACY_FLAGS.test(flags) || new Set(flags).size !== flags.length) {
    return { ok: false, message: `regex flags must be distinct letters among i, m, s; got "${flags}"` };
  }
  try {
    new RegExp(pattern, flags);
  } catch (err) {
    return { ok: false, message: `invalid regex: ${(err as Error).message}` };
  }
  if (!safeRegex(pattern)) {
    return {
      ok: false,
      message: 'regex may backtrack catastrophically (nested quantifiers, or more than 25 of them)',
    };
  }
  if (!ALLOWED_FLAGS.test(flags)) {
    return {
      ok: false,
      legacy: true,
      message: 'regex flag u is not supported (the linear-time engine has no Unicode mode)',
    };
  }
  let source = pattern;
  if (flags.includes('i')) {
    const folded = foldCase(pattern);
    if (typeof folded !== 'string') return { ok: false, legacy: true, message: folded.message };
    source = folded;
  }
  try {
    return { ok: true, regex: new RegExp(source, `${flags.replace('i', '')}l`) };
  } catch {
    return {
      ok: false,
      legacy: true,
      message:
        'regex cannot run in linear time: backreferences, lookarounds and large counted repeats such as {1000} are not supported',
    };
  }
}

// ---- case folding for the `i` flag

/** ECMAScript Canonicalize(ch) without the u flag: the upper case, unless it is several units or
 * maps a non-ASCII unit to ASCII. Two units are equal under `i` when their canonical forms are. */
function canonicalize(c: number): number {
  const upper = String.fromCharCode(c).toUpperCase();
  if (upper.length !== 1) return c;
  const cu = upper.charCodeAt(0);
  return c >= 128 && cu < 128 ? c : cu;
}

interface FoldTable {
  /** For each code unit equal to some other under `i`: every unit of its class, itself included. */
  classOf: Map<number, readonly number[]>;
  /** The units in classOf, ascending. */
  cased: readonly number[];
}

let table: FoldTable | undefined;

/** Built once, on the first `i` pattern: one pass over the 65,536 code units. */
export function foldTable(): FoldTable {
  if (table !== undefined) return table;
  const byCanon = new Map<number, number[]>();
  for (let c = 0; c <= 0xffff; c++) {
    const k = canonicalize(c);
    const list = byCanon.get(k);
    if (list === undefined) byCanon.set(k, [c]);
    else list.push(c);
  }
  const classOf = new Map<number, readonly number[]>();
  for (const list of byCanon.values()) {
    if (list.length < 2) continue;
    for (const c of list) classOf.set(c, list);
  }
  table = { classOf, cased: [...classOf.keys()].sort((a, b) => a - b) };
  return table;
}

const hex4 = (c: number) => `\\u${c.toString(16).padStart(4, '0')}`;

/** The units of the ranges plus every unit equal to one of them under `i`, as class content. */
function closedRanges(ranges: readonly (readonly [number, number])[]): string {
  const { classOf, cased } = foldTable();
  const units = new Set<number>();
  const out: [number, number][] = [];
  for (const [lo, hi] of ranges) {
    out.push([lo, hi]);
    // cased is ascending: find the first unit >= lo, then walk to hi.
    let a = 0;
    let b = cased.length;
    while (a < b) {
      const m = (a + b) >> 1;
      if ((cased[m] as number) < lo) a = m + 1;
      else b = m;
    }
    for (let i = a; i < cased.length && (cased[i] as number) <= hi; i++) {
      for (const u of classOf.get(cased[i] as number) ?? []) units.add(u);
    }
  }
  for (const u of units) out.push([u, u]);
  out.sort((x, y) => x[0] - y[0]);
  const merged: [number, number][] = [];
  for (const r of out) {
    const last = merged[merged.length - 1];
    if (last !== undefined && r[0] <= last[1] + 1) last[1] = Math.max(last[1], r[1]);
    else merged.push([r[0], r[1]]);
  }
  return merged.map(([lo, hi]) => (lo === hi ? hex4(lo) : `${hex4(lo)}-${hex4(hi)}`)).join('');
}

const HEX2 = /^[0-9a-fA-F]{2}/;
const HEX4 = /^[0-9a-fA-F]{4}/;
const CLASS_ESCAPES = new Set(['d', 'D', 'w', 'W', 's', 'S']);
const CONTROL: Record<string, number> = { t: 9, n: 10, v: 11, f: 12, r: 13 };

/** One escape after a backslash at `i` (the index of the letter after it). */
type Escape = { kind: 'unit'; unit: number; end: number } | { kind: 'class'; text: string; end: number };

function readEscape(p: string, i: number, inClass: boolean): Escape | { message: string } {
  const e = p[i] as string;
  if (CLASS_ESCAPES.has(e)) return { kind: 'class', text: `\\${e}`, end: i + 1 };
  if (e === 'b')
    return inClass ? { kind: 'unit', unit: 8, end: i + 1 } : { kind: 'class', text: '\\b', end: i + 1 };
  if (e === 'B' && !inClass) return { kind: 'class', text: '\\B', end: i + 1 };
  if (e in CONTROL) return { kind: 'unit', unit: CONTROL[e] as number, end: i + 1 };
  if (e === '0' && !/[0-9]/.test(p[i + 1] ?? '')) return { kind: 'unit', unit: 0, end: i + 1 };
  if (/[0-9]/.test(e) || e === 'k') {
    return { message: 'regex backreferences and octal escapes are not supported' };
  }
  if (e === 'x' && HEX2.test(p.slice(i + 1))) {
    return { kind: 'unit', unit: Number.parseInt(p.slice(i + 1, i + 3), 16), end: i + 3 };
  }
  if (e === 'u' && HEX4.test(p.slice(i + 1))) {
    return { kind: 'unit', unit: Number.parseInt(p.slice(i + 1, i + 5), 16), end: i + 5 };
  }
  if (e === 'c') {
    const l = p[i + 1] ?? '';
    if (/[a-zA-Z]/.test(l)) return { kind: 'unit', unit: l.charCodeAt(0) % 32, end: i + 2 };
    return { message: 'regex escape \\c must be followed by a letter' };
  }
  // An identity escape: the character itself (\. \- \/ and, without the u flag, \q = q).
  return { kind: 'unit', unit: e.charCodeAt(0), end: i + 1 };
}

/**
 * Rewrites a pattern (valid without the u flag) so that, run without `i`, it matches exactly what
 * the original matches with `i`: each unit outside a class becomes the class of the units equal
 * to it, and a class gets every unit equal to one of its members. Class escapes (\w \d \s, their
 * negations, \b \B) are already closed under case without the u flag and are kept as they are.
 */
export function foldCase(p: string): string | { message: string } {
  const { classOf } = foldTable();
  let out = '';
  let i = 0;
  const unitAtom = (unit: number, text: string) => {
    const cls = classOf.get(unit);
    return cls === undefined ? text : `[${cls.map(hex4).join('')}]`;
  };
  while (i < p.length) {
    const ch = p[i] as string;
    if (ch === '\\') {
      const esc = readEscape(p, i + 1, false);
      if ('message' in esc) return esc;
      out += esc.kind === 'class' ? esc.text : unitAtom(esc.unit, p.slice(i, esc.end));
      i = esc.end;
    } else if (ch === '[') {
      const cls = foldClass(p, i);
      if ('message' in cls) return cls;
      out += cls.text;
      i = cls.end;
    } else if (ch === '(' && p.startsWith('(?<', i) && p[i + 3] !== '=' && p[i + 3] !== '!') {
      // A group name is not a pattern: copied as it is.
      const close = p.indexOf('>', i);
      out += p.slice(i, close + 1);
      i = close + 1;
    } else {
      out += unitAtom(ch.charCodeAt(0), ch);
      i++;
    }
  }
  return out;
}

type ClassAtom = { kind: 'unit'; unit: number } | { kind: 'class'; text: string };

/** The class opening at `start` ('['), folded; `end` is the index after its ']'. */
function foldClass(p: string, start: number): { text: string; end: number } | { message: string } {
  let i = start + 1;
  const negated = p[i] === '^';
  if (negated) i++;
  const ranges: [number, number][] = [];
  let escapes = '';
  const atom = (): ClassAtom | { message: string } => {
    if (p[i] === '\\') {
      const esc = readEscape(p, i + 1, true);
      if ('message' in esc) return esc;
      i = esc.end;
      return esc.kind === 'class' ? { kind: 'class', text: esc.text } : { kind: 'unit', unit: esc.unit };
    }
    const unit = p.charCodeAt(i);
    i++;
    return { kind: 'unit', unit };
  };
  while (i < p.length && p[i] !== ']') {
    const a = atom();
    if ('message' in a) return a;
    if (p[i] === '-' && i + 1 < p.length && p[i + 1] !== ']') {
      i++;
      const b = atom();
      if ('message' in b) return b;
      if (a.kind === 'unit' && b.kind === 'unit') {
        ranges.push([a.unit, b.unit]);
        continue;
      }
      // Without the u flag, [\w-z] is \w, '-' and z.
      ranges.push([45, 45]);
      for (const x of [a, b]) {
        if (x.kind === 'unit') ranges.push([x.unit, x.unit]);
        else escapes += x.text;
      }
      continue;
    }
    if (a.kind === 'unit') ranges.push([a.unit, a.unit]);
    else escapes += a.text;
  }
  if (i >= p.length) return { message: 'invalid regex: unterminated character class' };
  const body = ranges.length === 0 ? escapes : `${closedRanges(ranges)}${escapes}`;
  return { text: `[${negated ? '^' : ''}${body}]`, end: i + 1 };
}
