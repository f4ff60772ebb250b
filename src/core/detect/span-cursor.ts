// Overlap checks against a sorted list of spans for queries that arrive in increasing order: each
// span is passed over once, so n queries against m spans cost O(n + m) instead of O(n·m).

import type { Finding } from './types.js';

export class SpanCursor {
  readonly #spans: readonly Finding[];
  #i = 0;

  /** `spans` sorted by start. */
  constructor(spans: readonly Finding[]) {
    this.#spans = spans;
  }

  /** Does [start, end) overlap a span? `start` must not decrease between calls. */
  overlaps(start: number, end: number): boolean {
    const spans = this.#spans;
    while (this.#i < spans.length && spans[this.#i]!.end <= start) this.#i++;
    const s = spans[this.#i];
    return s !== undefined && s.start < end;
  }
}

/** The findings at index `from` and later, sorted by start (a copy). */
export function sortedFrom(out: readonly Finding[], from: number): Finding[] {
  return out.slice(from).sort((a, b) => a.start - b.start || b.end - a.end);
}
