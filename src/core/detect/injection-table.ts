// Compiles the injection pattern table: sticky regexes per pattern, a case-insensitive pre-test per
// trigger, prefix-factored trigger regexes (one for words, one for markers), the hidden-comment
// checks, and the words the patterns are written with (for leet.ts).

import { AI, DEFS } from './injection-patterns.js';
import { addPatternWords } from './injection-words.js';
import type { InjectionType } from './types.js';

export interface InjectionPattern {
  readonly id: number;
  readonly type: InjectionType;
  readonly weight: number;
  /** Sticky; matched at the trigger's offset. */
  readonly re: RegExp;
  /** Written in one case (`DAN`, `END OF …`): a match must be in those letters, not in accented ones. */
  readonly caseSensitive: boolean;
}

// Hidden HTML comments that address the model: `<!-- … -->` (up to COMMENT_MAX characters) whose
// body names an AI and gives it an order, or tells the reader to ignore instructions. Checked in
// code (see injection.ts) so that each character is read by at most one comment check.
export const COMMENT_MAX = 1000;
export const COMMENT_AI = new RegExp(`\\b${AI}s?\\b`, 'i');
export const COMMENT_ORDER = new RegExp(
  "\\b(?:ignore|disregard|instead|must|do\\s+not|don'?t|never|secretly|without\\s+telling|reveal|send|" +
    'forward)\\b',
  'i',
);
export const COMMENT_IGNORE = /\b(?:ignore|disregard)\b/i;
export const COMMENT_RULES = /\b(?:instructions|rules|prompt)\b/i;
const COMMENT_TYPE: InjectionType = 'indirect';
const COMMENT_WEIGHT = 0.75;

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

interface TrieNode {
  end: boolean;
  next: Map<string, TrieNode>;
}

/**
 * A regex source matching exactly `words`, factored by common prefixes (`ab|ac` → `a(?:b|c)`): the
 * engine then tests each first character once instead of once per word.
 */
export function trieSource(words: readonly string[]): string {
  const root: TrieNode = { end: false, next: new Map() };
  for (const w of words) {
    let node = root;
    for (const ch of w) {
      let child = node.next.get(ch);
      if (child === undefined) {
        child = { end: false, next: new Map() };
        node.next.set(ch, child);
      }
      node = child;
    }
    node.end = true;
  }
  const emit = (node: TrieNode): string => {
    const alts = [...node.next].map(([ch, child]) => escapeRegExp(ch) + emit(child));
    if (alts.length === 0) return '';
    const body = alts.length === 1 && !node.end ? alts[0]! : `(?:${alts.join('|')})`;
    return node.end ? `${body}?` : body;
  };
  return emit(root);
}

/**
 * The patterns of one trigger, and (for several) their case-insensitive union as a cheap pre-test.
 * `comment` marks the `<!--` trigger, whose single pattern is checked in code.
 */
export interface TriggerEntry {
  readonly any: RegExp | null;
  readonly patterns: readonly InjectionPattern[];
  readonly comment: boolean;
}

interface Built {
  words: Set<string>;
  patterns: InjectionPattern[];
  byTrigger: Map<string, TriggerEntry>;
  trigger: RegExp;
  marks: RegExp;
  markPrefixes: string[];
}

function build(): Built {
  const patterns: InjectionPattern[] = [];
  const lists = new Map<string, InjectionPattern[]>();
  const vocabulary = new Set<string>();
  for (const re of [COMMENT_AI, COMMENT_ORDER, COMMENT_IGNORE, COMMENT_RULES])
    addPatternWords(re.source, vocabulary);
  DEFS.forEach((d, id) => {
    const triggers = d.triggers.split(' ');
    const head = triggers.map(escapeRegExp).join('|');
    const source = `(?:${head})${d.tail}`;
    addPatternWords(source, vocabulary);
    const re = new RegExp(source, d.caseSensitive ? 'y' : 'iy');
    const p: InjectionPattern = {
      id,
      type: d.type,
      weight: d.weight,
      re,
      caseSensitive: d.caseSensitive === true,
    };
    patterns.push(p);
    for (const t of triggers) {
      if (t === '') throw new Error(`injection pattern ${id}: empty trigger`);
      const key = t.toLowerCase();
      const list = lists.get(key);
      if (list === undefined) lists.set(key, [p]);
      else list.push(p);
    }
  });
  const byTrigger = new Map<string, TriggerEntry>();
  for (const [key, list] of lists) {
    const any = list.length === 1 ? null : new RegExp(list.map((p) => `(?:${p.re.source})`).join('|'), 'iy');
    byTrigger.set(key, { any, patterns: list, comment: false });
  }
  const comment: InjectionPattern = {
    id: patterns.length,
    type: COMMENT_TYPE,
    weight: COMMENT_WEIGHT,
    re: /<!--/y,
    caseSensitive: false,
  };
  patterns.push(comment);
  lists.set('<!--', [comment]);
  byTrigger.set('<!--', { any: null, patterns: [comment], comment: true });
  const keys = [...lists.keys()];
  const words = keys.filter((k) => /^[a-z]/.test(k));
  const marks = keys.filter((k) => !/^[a-z]/.test(k));
  if (words.length === 0 || marks.length === 0) throw new Error('injection triggers: need words and markers');
  assertDisjoint(words, marks);
  return {
    words: vocabulary,
    patterns,
    byTrigger,
    trigger: new RegExp(`\\b${trieSource(words)}\\b`, 'gi'),
    marks: new RegExp(trieSource(marks), 'iy'),
    markPrefixes: literalPrefixes(marks),
  };
}

/**
 * The word and marker triggers are found by two regexes and merged by position. That gives the same
 * hits as one regex over both only if a match of one kind can never start inside a match of the
 * other, i.e. no suffix of a trigger of one kind overlaps the start of a trigger of the other.
 */
function assertDisjoint(words: readonly string[], marks: readonly string[]): void {
  const overlaps = (a: string, b: string): boolean => {
    for (let k = 1; k < a.length; k++) {
      const tail = a.slice(k);
      if (tail.startsWith(b) || b.startsWith(tail)) return true;
    }
    return false;
  };
  for (const w of words) {
    for (const m of marks) {
      if (overlaps(w, m) || overlaps(m, w)) throw new Error(`injection triggers overlap: ${w} / ${m}`);
    }
  }
}

/**
 * Strings one of which starts (case-sensitively) wherever a marker trigger matches: each marker up to
 * its first letter, minus those that another one is a prefix of.
 */
function literalPrefixes(marks: readonly string[]): string[] {
  const heads = marks.map((m) => {
    const letter = m.search(/[a-z]/i);
    return letter === -1 ? m : m.slice(0, letter);
  });
  return [...new Set(heads)].filter((h) => !heads.some((o) => o !== h && h.startsWith(o)));
}

const built = build();

/** Every pattern, indexed by `id`. */
export const INJECTION_PATTERNS: readonly InjectionPattern[] = built.patterns;
/** Patterns by lowercased trigger. */
export const PATTERNS_BY_TRIGGER: ReadonlyMap<string, TriggerEntry> = built.byTrigger;
/** Global, case-insensitive: every trigger word (`\b…\b`) in one pass. */
export const WORD_TRIGGER: RegExp = built.trigger;
/** Every word (lower case) a pattern match can contain: what a leet word must read as (leet.ts). */
export const INJECTION_WORDS: ReadonlySet<string> = built.words;
/** Sticky: the longest marker trigger (`<|`, `[`, `###`, …) at an offset. */
export const MARK_TRIGGER: RegExp = built.marks;
/** Every marker trigger starts with one of these (see literalPrefixes). */
export const MARK_PREFIXES: readonly string[] = built.markPrefixes;
