// detect(): every enabled detector over one text. Printable ASCII (the common case) is scanned as
// is after one check. For other text, the PII, secret and injection scans read a normalized view
// (normalize.ts: invisible and format characters removed, NFKC compatibility forms), the injection
// scan a view of that one with look-alikes and accents folded to Latin letters and combining marks
// removed (injection-view.ts), and their offsets are mapped back to the original text, so
// `jo\u00ADhn@example.com`, a full-width AWS key or `Ignóre` is still found and its span covers the
// whole disguise; then unicode tricks are looked for in the original text. The pass that builds the
// view also notes which kinds of character occur, and the scans for kinds that do not are skipped.
// In any text, digits written for letters in a word (`1gn0re`) are read as the letters for the
// injection scan (leet.ts; one code unit each, so offsets hold).

import { emptyInjectionScores, scanInjection } from './injection.js';
import { accentIn, injectionView } from './injection-view.js';
import { foldLeet } from './leet.js';
import { isAscii, normalizedView, originalEnd, originalStart, type View, type ViewMap } from './normalize.js';
import { hasDigit, scanPii } from './pii.js';
import { piiMask } from './pii-mask.js';
import { scanSecrets } from './secrets.js';
import type { DetectionResult, DetectOptions, Finding, InjectionScores } from './types.js';
import { INVISIBLE } from './uchar.js';
import { scanUnicode } from './unicode.js';

export function detect(text: string, opts: DetectOptions = {}): DetectionResult {
  const mask = piiMask(opts.pii);
  const secrets = opts.secrets !== false;
  const injection = opts.injection !== false;
  const findings: Finding[] = [];
  let scores: InjectionScores;

  if (isAscii(text)) {
    // Fast path: nothing to normalize and no trick possible. Whether there is a digit is asked once,
    // for PII and for leet.
    const digits = hasDigit(text);
    scanPii(text, mask, findings, digits);
    if (secrets) scanSecrets(text, findings);
    scores = injection
      ? scanInjection(mayHoldLeet(text, digits) ? foldLeet(text) : text, findings)
      : emptyInjectionScores();
  } else {
    // One pass over the text builds the view and tells which kinds of character occur: most
    // non-ASCII prose (accents, Cyrillic, CJK ideographs) has nothing the view changes, and most has
    // no invisible characters and no Cyrillic or Greek letter that could stand in a Latin word.
    const view = normalizedView(text);
    // The injection view changes letters only: it has the digits of this one.
    const digits = hasDigit(view.text);
    scanPii(view.text, mask, findings, digits);
    if (secrets) scanSecrets(view.text, findings);
    mapBack(findings, 0, view);
    scores = injection ? scanInjectionView(view, digits, findings) : emptyInjectionScores();
    // An invisible character is removed from the view, which joins the words it sat between
    // ("Ignore\u200ball\u200bprevious…" reads as one word): such text is scanned once more with
    // each one as a space, and a trigger found either way counts.
    if (injection && (view.present & INVISIBLE) !== 0) {
      const from = findings.length;
      const spaced = scanInjectionView(normalizedView(text, ' '), digits, findings);
      dropRepeated(findings, from);
      for (const k of Object.keys(scores) as (keyof InjectionScores)[])
        if (spaced[k] > scores[k]) scores[k] = spaced[k];
    }
    if (opts.unicode !== false) scanUnicode(text, findings, view.present);
  }
  if (findings.length > 1) {
    findings.sort((a, b) => a.start - b.start || b.end - a.end);
    dropContainedPii(findings);
  }
  return { findings, injection: scores };
}

/**
 * Whether `text` may hold a leet word: it has a digit, `@` or `$`. Asked here, before leet.ts is
 * called, so that ordinary ASCII text pays two indexOf calls and no call.
 */
function mayHoldLeet(text: string, digits: boolean): boolean {
  return digits || text.indexOf('@') !== -1 || text.indexOf('$') !== -1;
}

/** The injection scan of a non-ASCII text: over its injection view, findings mapped back. */
function scanInjectionView(view: View, digits: boolean, findings: Finding[]): InjectionScores {
  const from = findings.length;
  const folded = injectionView(view);
  const unaccented = (s: number, e: number): boolean =>
    !accentIn(view.text, originalStart(folded, s), originalEnd(folded, e - 1));
  const text = mayHoldLeet(folded.text, digits) ? foldLeet(folded.text) : folded.text;
  const scores = scanInjection(text, findings, unaccented);
  mapBack(findings, from, folded);
  mapBack(findings, from, view);
  return scores;
}

/** Drops findings[from..] that repeat one before `from` (same category, type and span). */
function dropRepeated(findings: Finding[], from: number): void {
  let w = from;
  for (let r = from; r < findings.length; r++) {
    const f = findings[r]!;
    let seen = false;
    for (let k = 0; k < from && !seen; k++) {
      const g = findings[k]!;
      seen = g.category === f.category && g.type === f.type && g.start === f.start && g.end === f.end;
    }
    if (!seen) findings[w++] = f;
  }
  findings.length = w;
}

/** Maps the view offsets of findings[from..] to spans of the text the view was made from. */
function mapBack(findings: Finding[], from: number, view: ViewMap): void {
  if (view.edits.length === 0) return;
  for (let k = from; k < findings.length; k++) {
    const f = findings[k]!;
    f.start = originalStart(view, f.start);
    f.end = originalEnd(view, f.end - 1);
  }
}

/**
 * A PII match inside a secret (digits inside a key body, a host inside a credential URL) or inside
 * another PII match (the IPv4 tail of an IPv6 address) is noise.
 */
function dropContainedPii(sorted: Finding[]): void {
  let w = 0;
  let coveredTo = -1;
  for (let r = 0; r < sorted.length; r++) {
    const f = sorted[r]!;
    // Sorted by start (longest first), so whatever reached coveredTo started at or before f.
    if (f.category === 'pii' && f.end <= coveredTo) continue;
    if ((f.category === 'secret' || f.category === 'pii') && f.end > coveredTo) coveredTo = f.end;
    sorted[w++] = f;
  }
  sorted.length = w;
}
