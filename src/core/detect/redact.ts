// Redaction: PII and secret spans become typed placeholders, hidden-unicode characters are removed
// (a mixed-script word is a signal, not a character to remove: it is kept), overlapping spans are
// merged first. Injection findings are never redacted (they are a signal for
// policy, not data to hide).

import type { DetectionCategory, Finding } from './types.js';

/**
 * Placeholder per finding type. Every secret type maps to `[SECRET]`; an unknown PII type to `[PII]`.
 * Unicode findings are replaced by nothing.
 */
export const REDACTION_PLACEHOLDERS: Readonly<Record<string, string>> = Object.freeze({
  email: '[EMAIL]',
  phone: '[PHONE]',
  card: '[CARD]',
  iban: '[IBAN]',
  ssn: '[SSN]',
  ipv4: '[IP]',
  ipv6: '[IP]',
  dob: '[DOB]',
  secret: '[SECRET]',
});

const DEFAULT_CATEGORIES: readonly DetectionCategory[] = ['pii', 'secret', 'unicode'];

function placeholderOf(f: Finding): string {
  // The org's own provider key, found by value (KeyScrub), named as in error messages.
  if (f.category === 'secret') return f.type === 'provider_key' ? '[PROVIDER_KEY]' : '[SECRET]';
  if (f.category === 'unicode') return '';
  return Object.hasOwn(REDACTION_PLACEHOLDERS, f.type) ? REDACTION_PLACEHOLDERS[f.type]! : '[PII]';
}

/** Rank when overlapping spans merge: a secret wins over PII, PII over unicode. */
function rankOf(f: Finding): number {
  return f.category === 'secret' ? 2 : f.category === 'pii' ? 1 : 0;
}

/**
 * Returns `text` with the findings of `categories` (default pii, secret, unicode) replaced. Offsets
 * outside the text are clamped; the input array is not modified.
 */
export function redact(
  text: string,
  findings: readonly Finding[],
  categories: readonly DetectionCategory[] = DEFAULT_CATEGORIES,
): string {
  const spans: Finding[] = [];
  for (const f of findings) {
    if (f.category === 'injection' || f.type === 'mixed_script' || !categories.includes(f.category)) continue;
    if (f.end > f.start) spans.push(f);
  }
  if (spans.length === 0) return text;
  spans.sort((a, b) => a.start - b.start || b.end - a.end);
  const n = text.length;
  let out = '';
  let pos = 0;
  let i = 0;
  while (i < spans.length) {
    let best = spans[i]!;
    const start = Math.min(Math.max(best.start, pos), n);
    let end = Math.min(best.end, n);
    i++;
    while (i < spans.length && spans[i]!.start < end) {
      const f = spans[i]!;
      if (f.end > end) end = Math.min(f.end, n);
      if (rankOf(f) > rankOf(best)) best = f;
      i++;
    }
    if (end <= start) continue;
    out += text.slice(pos, start) + placeholderOf(best);
    pos = end;
  }
  return out + text.slice(pos);
}
