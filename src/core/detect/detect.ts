// detect(): every enabled detector over one text. Unicode tricks are found first; when there are any,
// the other detectors run on the text with those characters removed (so a zero-width space cannot
// split an e-mail address or a key) and their offsets are mapped back to the original text.

import { emptyInjectionScores, scanInjection } from './injection.js';
import { scanPii } from './pii.js';
import { piiMask } from './pii-mask.js';
import { scanSecrets } from './secrets.js';
import type { DetectionResult, DetectOptions, Finding, InjectionScores } from './types.js';
import { scanUnicode } from './unicode.js';

export function detect(text: string, opts: DetectOptions = {}): DetectionResult {
  const unicode: Finding[] = [];
  scanUnicode(text, unicode);
  const mask = piiMask(opts.pii);
  const secrets = opts.secrets !== false;
  const injection = opts.injection !== false;

  let scanned = text;
  let map: Int32Array | undefined;
  if (unicode.length > 0 && (mask !== 0 || secrets || injection)) {
    const cleaned = strip(text, unicode);
    scanned = cleaned.text;
    map = cleaned.map;
  }

  const findings: Finding[] = [];
  scanPii(scanned, mask, findings);
  if (secrets) scanSecrets(scanned, findings);
  const scores: InjectionScores = injection ? scanInjection(scanned, findings) : emptyInjectionScores();
  if (map !== undefined) {
    for (const f of findings) {
      f.start = map[f.start]!;
      f.end = map[f.end - 1]! + 1;
    }
  }
  if (opts.unicode !== false) for (const f of unicode) findings.push(f);
  if (findings.length > 1) {
    findings.sort((a, b) => a.start - b.start || b.end - a.end);
    dropContainedPii(findings);
  }
  return { findings, injection: scores };
}

/** `text` without the unicode finding spans, and for each kept code unit its original index. */
function strip(text: string, spans: readonly Finding[]): { text: string; map: Int32Array } {
  const map = new Int32Array(text.length + 1);
  let out = '';
  let j = 0;
  let pos = 0;
  for (const s of spans) {
    out += text.slice(pos, s.start);
    for (let i = pos; i < s.start; i++) map[j++] = i;
    pos = s.end;
  }
  out += text.slice(pos);
  for (let i = pos; i < text.length; i++) map[j++] = i;
  map[j] = text.length;
  return { text: out, map };
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
