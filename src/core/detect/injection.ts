// Prompt-injection scan: one regex pass finds trigger words, markers are looked for where their first
// characters occur, and at each trigger, in text order, the patterns registered for it are tried
// (sticky) at its offset. Each category's score combines the weights of the distinct patterns that
// matched as 1 − Π(1 − wᵢ).

import {
  COMMENT_AI,
  COMMENT_IGNORE,
  COMMENT_MAX,
  COMMENT_ORDER,
  COMMENT_RULES,
  INJECTION_PATTERNS,
  MARK_PREFIXES,
  MARK_TRIGGER,
  PATTERNS_BY_TRIGGER,
  WORD_TRIGGER,
} from './injection-table.js';
import type { Finding, InjectionScores } from './types.js';

export function emptyInjectionScores(): InjectionScores {
  return { direct: 0, indirect: 0, jailbreak: 0, role_hijack: 0, context_manipulation: 0 };
}

/**
 * Appends injection findings (score = pattern weight) to `out` and returns the category scores.
 * `unaccented(start, end)`, when given, tells whether a span of `text` was written without accents
 * (`text` being a view with accents folded): a pattern written in one case (`DAN`) matches only such a
 * span, since accents make other words of it (Vietnamese `DẪN` is not `DAN`).
 */
export function scanInjection(
  text: string,
  out: Finding[],
  unaccented?: (start: number, end: number) => boolean,
): InjectionScores {
  const scores = emptyInjectionScores();
  let seen: Uint8Array | undefined;
  let commentEnd = -1;
  const words = WORD_TRIGGER;
  words.lastIndex = 0;
  let word = words.exec(text);
  const markCount = findMarks(text);
  let nextMark = 0;
  for (;;) {
    // The earlier of the next word and the next marker (they never overlap: see injection-table.ts).
    let at: number;
    let trigger: string;
    if (word !== null && (nextMark === markCount || word.index < markAt[nextMark]!)) {
      at = word.index;
      trigger = word[0].toLowerCase();
      word = words.exec(text);
    } else if (nextMark < markCount) {
      at = markAt[nextMark]!;
      trigger = markText[nextMark]!;
      nextMark++;
    } else {
      break;
    }
    const entry = PATTERNS_BY_TRIGGER.get(trigger);
    if (entry === undefined) continue;
    if (entry.comment) {
      if (at < commentEnd) continue;
      commentEnd = commentBodyEnd(text, at);
      if (!commentAddressesModel) continue;
      const p = entry.patterns[0]!;
      out.push({ category: 'injection', type: p.type, start: at, end: commentEnd, score: p.weight });
      seen ??= new Uint8Array(INJECTION_PATTERNS.length);
      seen[p.id] = 1;
      continue;
    }
    if (entry.any !== null) {
      entry.any.lastIndex = at;
      if (!entry.any.test(text)) continue;
    }
    const list = entry.patterns;
    for (let k = 0; k < list.length; k++) {
      const p = list[k]!;
      p.re.lastIndex = at;
      if (!p.re.test(text)) continue;
      if (p.caseSensitive && unaccented !== undefined && !unaccented(at, p.re.lastIndex)) continue;
      out.push({ category: 'injection', type: p.type, start: at, end: p.re.lastIndex, score: p.weight });
      seen ??= new Uint8Array(INJECTION_PATTERNS.length);
      seen[p.id] = 1;
    }
  }
  // The marker lists of a huge text are not kept for the process's life.
  if (markCount > 65536) {
    markAt.length = 0;
    markText.length = 0;
  }
  if (seen === undefined) return scores;
  const keep = emptyInjectionScores();
  for (const t of Object.keys(keep) as (keyof InjectionScores)[]) keep[t] = 1;
  for (let id = 0; id < seen.length; id++) {
    if (seen[id] === 0) continue;
    const p = INJECTION_PATTERNS[id]!;
    keep[p.type] *= 1 - p.weight;
  }
  for (const t of Object.keys(keep) as (keyof InjectionScores)[]) scores[t] = round3(1 - keep[t]);
  return scores;
}

// Marker triggers of the current scan: offsets and lowercased text (reused), and candidate starts.
const markAt: number[] = [];
const markText: string[] = [];
let markStarts = new Int32Array(1024);

/**
 * Fills markAt/markText with the marker triggers of `text` and returns their count. The sticky marker
 * regex is tried only where one of MARK_PREFIXES occurs, in order and without overlaps, as a global
 * scan would find them (markers are rare, and a scan of every position costs more than the rest).
 */
function findMarks(text: string): number {
  let count = 0;
  // Each prefix's starts come in order: a sort is needed only when two prefixes occur. A typed
  // array sorts numbers natively (a text of one marker character per position has millions).
  let prefixesSeen = 0;
  for (let k = 0; k < MARK_PREFIXES.length; k++) {
    const prefix = MARK_PREFIXES[k]!;
    let i = text.indexOf(prefix);
    if (i !== -1) prefixesSeen++;
    for (; i !== -1; i = text.indexOf(prefix, i + 1)) {
      if (count === markStarts.length) {
        const grown = new Int32Array(markStarts.length * 2);
        grown.set(markStarts);
        markStarts = grown;
      }
      markStarts[count++] = i;
    }
  }
  if (prefixesSeen > 1) markStarts.subarray(0, count).sort();
  let n = 0;
  let next = 0;
  for (let k = 0; k < count; k++) {
    const at = markStarts[k]!;
    if (at < next) continue;
    MARK_TRIGGER.lastIndex = at;
    const m = MARK_TRIGGER.exec(text);
    if (m === null) continue;
    markAt[n] = at;
    markText[n] = m[0].toLowerCase();
    n++;
    next = MARK_TRIGGER.lastIndex;
  }
  if (markStarts.length > 65536) markStarts = new Int32Array(1024); // not kept after a huge text
  return n;
}

// Set by commentBodyEnd(): whether the comment it read addresses the model.
let commentAddressesModel = false;

/**
 * Reads the HTML comment opening at `at` (up to COMMENT_MAX characters of body) and returns where it
 * ends; sets `commentAddressesModel`. Nested `<!--` before that end are not read again.
 */
function commentBodyEnd(text: string, at: number): number {
  const bodyStart = at + 4;
  const limit = Math.min(text.length, bodyStart + COMMENT_MAX);
  const window = text.slice(bodyStart, limit + 3);
  const close = window.indexOf('-->');
  const closed = close !== -1;
  const body = closed ? window.slice(0, close) : window.slice(0, limit - bodyStart);
  commentAddressesModel =
    (COMMENT_AI.test(body) && COMMENT_ORDER.test(body)) ||
    (COMMENT_IGNORE.test(body) && COMMENT_RULES.test(body));
  return closed ? bodyStart + close + 3 : limit;
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
