// Corpus loading and precision/recall scoring shared by the detector corpus tests.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import {
  type DetectionCategory,
  type DetectionResult,
  detect,
  type Finding,
} from '../../../src/core/detect/index.js';

export interface ExpectedSpan {
  type: string;
  value: string;
}

export interface SpanCase {
  text: string;
  expect: ExpectedSpan[];
  note?: string;
}

export interface InjectionCase {
  text: string;
  /** Categories that must score at or above the threshold. */
  expect: string[];
  /** Categories that may also score at or above it without counting as a false positive. */
  allow?: string[];
  note?: string;
}

export interface Score {
  tp: number;
  fp: number;
  fn: number;
  positives: number;
  negatives: number;
  precision: number;
  recall: number;
  /** Human-readable description of every miss and false alarm. */
  errors: string[];
}

export function fixturePath(name: string): string {
  return join(process.cwd(), 'test', 'fixtures', 'detect', name);
}

export function readFixture(name: string): string {
  return readFileSync(fixturePath(name), 'utf8');
}

export function loadCases<T>(name: string): T[] {
  const doc: unknown = JSON.parse(readFixture(name));
  if (typeof doc !== 'object' || doc === null || !Array.isArray((doc as { cases?: unknown }).cases)) {
    throw new Error(`${name}: expected {cases: [...]}`);
  }
  return (doc as { cases: T[] }).cases;
}

function finish(tp: number, fp: number, fn: number, pos: number, neg: number, errors: string[]): Score {
  return {
    tp,
    fp,
    fn,
    positives: pos,
    negatives: neg,
    precision: tp + fp === 0 ? 1 : tp / (tp + fp),
    recall: tp + fn === 0 ? 1 : tp / (tp + fn),
    errors,
  };
}

/** Span-level scoring: a true positive has the expected type and exactly the expected text. */
export function scoreSpans(
  cases: readonly SpanCase[],
  category: DetectionCategory,
  run: (text: string) => DetectionResult,
): Score {
  let tp = 0;
  let fp = 0;
  let fn = 0;
  let pos = 0;
  const errors: string[] = [];
  for (const c of cases) {
    if (c.expect.length > 0) pos++;
    const found = run(c.text).findings.filter((f: Finding) => f.category === category);
    const used = new Set<Finding>();
    for (const e of c.expect) {
      const hit = found.find(
        (f) => !used.has(f) && f.type === e.type && c.text.slice(f.start, f.end) === e.value,
      );
      if (hit) {
        used.add(hit);
        tp++;
      } else {
        fn++;
        errors.push(`missed ${e.type} ${JSON.stringify(e.value)} in ${JSON.stringify(c.text.slice(0, 80))}`);
      }
    }
    for (const f of found) {
      if (used.has(f)) continue;
      fp++;
      errors.push(
        `false ${f.type} ${JSON.stringify(c.text.slice(f.start, f.end))} in ` +
          JSON.stringify(c.text.slice(0, 80)),
      );
    }
  }
  return finish(tp, fp, fn, pos, cases.length - pos, errors);
}

/** Category-level scoring of injection scores against a threshold. */
export function scoreInjection(
  cases: readonly InjectionCase[],
  threshold: number,
  run: (text: string) => DetectionResult,
): Score {
  let tp = 0;
  let fp = 0;
  let fn = 0;
  let pos = 0;
  const errors: string[] = [];
  for (const c of cases) {
    if (c.expect.length > 0) pos++;
    const scores = run(c.text).injection as Record<string, number>;
    for (const [cat, s] of Object.entries(scores)) {
      const expected = c.expect.includes(cat);
      if (expected && s >= threshold) tp++;
      else if (expected) {
        fn++;
        errors.push(`missed ${cat} (${s}) in ${JSON.stringify(c.text.slice(0, 80))}`);
      } else if (s >= threshold && !(c.allow ?? []).includes(cat)) {
        fp++;
        errors.push(`false ${cat} (${s}) in ${JSON.stringify(c.text.slice(0, 80))}`);
      }
    }
  }
  return finish(tp, fp, fn, pos, cases.length - pos, errors);
}

export function describe(family: string, s: Score): string {
  return (
    `${family}: precision ${s.precision.toFixed(3)} recall ${s.recall.toFixed(3)} ` +
    `(tp ${s.tp}, fp ${s.fp}, fn ${s.fn}; ${s.positives} positive / ${s.negatives} negative cases)`
  );
}

/**
 * The corpus check every span detector shares: the corpus `file` holds at least 30 positive and
 * 30 negative cases, and `detect()` reaches recall ≥ 0.9 and precision ≥ 0.95 on `category`
 * (both printed). Returns the cases for detector-specific checks.
 */
export function checkCorpus(t: Test, file: string, category: DetectionCategory, family: string): SpanCase[] {
  const cases = loadCases<SpanCase>(file);
  checkScore(
    t,
    family,
    scoreSpans(cases, category, (text) => detect(text)),
  );
  return cases;
}

/**
 * Prints a corpus score (and each miss) and requires ≥ 30 positive and ≥ 30 negative cases,
 * recall ≥ 0.9 and precision ≥ 0.95.
 */
export function checkScore(t: Test, family: string, score: Score): void {
  t.comment(describe(family, score));
  for (const e of score.errors) t.comment(`  ${e}`);
  t.ok(
    score.positives >= 30 && score.negatives >= 30,
    'corpus has at least 30 positive and 30 negative cases',
  );
  t.ok(score.recall >= 0.9, `recall ${score.recall} >= 0.9`);
  t.ok(score.precision >= 0.95, `precision ${score.precision} >= 0.95`);
}
