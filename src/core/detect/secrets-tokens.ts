// Secrets with a recognisable shape: vendor-prefixed tokens and govgate's own credentials (one
// alternation, one pass), JWTs, PEM/OpenSSH/PGP private key blocks and URLs that carry a password
// (`scheme://user:pw@host`).

import { isAsciiAlnum, isAsciiLetter, isDigit } from './chars.js';
import type { SpanCursor } from './span-cursor.js';
import type { Finding, SecretType } from './types.js';

// One alternative per capture group; GROUP_TYPES[k] is the type of group k + 1. Every alternative
// starts with a lookbehind that rejects a start inside a run of token characters, so each run is
// tried from one start only and the scan stays linear on adversarial input. The regex is sticky and
// tried only at the candidate starts tokenStarts() finds: letting the engine try every position
// costs more than the rest of the secret scan, as no alternative starts with a literal.
const RUN = '(?<![A-Za-z0-9_-])';
// For a token whose body holds no `-`: a dash before or after it (`gpt-ghp_…`, `ghp_…-x`) is a
// boundary. Each such start reads only its own dash-free segment, so the scan stays linear.
const AFTER_DASH = '(?<![A-Za-z0-9_])';
const TOKENS = new RegExp(
  [
    '(?<![A-Za-z0-9])((?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16})(?![A-Za-z0-9])',
    `${RUN}(AIza[0-9A-Za-z_-]{35})(?![A-Za-z0-9_-])`,
    `${AFTER_DASH}(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{50,})(?![A-Za-z0-9_])`,
    `${RUN}(xox[abposr]-[A-Za-z0-9-]{10,}|xapp-\\d-[A-Za-z0-9-]{10,})(?![A-Za-z0-9_-])`,
    '(https://hooks\\.slack\\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,})',
    `${RUN}(sk-ant-[a-z]{3,6}\\d{2}-[A-Za-z0-9_-]{20,})`,
    `${RUN}(sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})`,
    `${RUN}(eyJ[A-Za-z0-9_-]{8,}\\.eyJ[A-Za-z0-9_-]{8,}\\.[A-Za-z0-9_-]{16,})`,
    `${AFTER_DASH}(hf_[A-Za-z0-9]{30,40}|[sr]k_live_[A-Za-z0-9]{20,}|npm_[A-Za-z0-9]{36})(?![A-Za-z0-9_])`,
    `${RUN}(glpat-[A-Za-z0-9_-]{20,}|SG\\.[A-Za-z0-9_-]{22}\\.[A-Za-z0-9_-]{43})(?![A-Za-z0-9_-])`,
    // govgate's own credentials (DESIGN C): agent keys, personal access tokens, sidecar tokens.
    `${AFTER_DASH}(gk_(?:agent|pat|sc)_[A-Za-z0-9]{40})(?![A-Za-z0-9_])`,
  ].join('|'),
  'y',
);
const GROUP_TYPES: readonly SecretType[] = [
  'aws_access_key',
  'gcp_api_key',
  'github_token',
  'slack_token',
  'slack_token',
  'anthropic_key',
  'openai_key',
  'jwt',
  'generic_secret',
  'generic_secret',
  'govgate_key',
];

const PEM_BEGIN = /-----BEGIN ((?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?)-----/g;
const MIN_KEY_BODY = 64;
const MAX_KEY_SPAN = 16384;

const USERINFO = /([^\s:@/?#"'`<>]{0,128}):([^\s@/?#"'`<>]{1,256})@[A-Za-z0-9[]/y;
const PASSWORD_PLACEHOLDER = new RegExp(
  '^(?:\\*+|x+|\\.{2,}|pass|pwd|secret|changeme|redacted|<[^>]*>|\\[[^\\]]*\\]|\\$\\{[^}]*\\}|' +
    '\\{\\{?[^}]*\\}?\\}|\\$[A-Za-z_]\\w*|%\\(?\\w*\\)?s|\\w*password\\w*)$',
  'i',
);

// Candidate starts of the current scan (reused; sorted before use).
const starts: number[] = [];

export function scanTokens(text: string, out: Finding[]): void {
  tokenStarts(text, starts);
  if (starts.length > 1) starts.sort(ascending);
  let next = 0; // end of the last match: like a global scan, matches do not overlap
  for (let k = 0; k < starts.length; k++) {
    const at = starts[k]!;
    if (at < next) continue;
    TOKENS.lastIndex = at;
    const m = TOKENS.exec(text);
    if (m === null) continue;
    next = at + m[0].length;
    let g = 1;
    while (m[g] === undefined) g++;
    let type = GROUP_TYPES[g - 1]!;
    const value = m[g]!;
    if (type === 'openai_key') {
      if (value.startsWith('sk-ant-')) type = 'anthropic_key';
      else if (!hasDigitAndLetter(value, 3)) continue;
    }
    out.push({ category: 'secret', type, start: at, end: at + value.length });
  }
}

function ascending(a: number, b: number): number {
  return a - b;
}

// Second letters of the AWS key id prefixes and AIza, as bits (1 << (code - 64)): B C G I K N P R S.
const AWS_SECOND =
  (1 << 2) | (1 << 3) | (1 << 7) | (1 << 9) | (1 << 11) | (1 << 14) | (1 << 16) | (1 << 18) | (1 << 19);

/**
 * Every position where a TOKENS alternative could match, found from characters that are rare in prose
 * (`A`, `_`, `-`, `J`, `SG.`, `://`) at a fixed offset into each prefix. A superset is fine; a miss
 * would lose a token, so each alternative's prefix must be covered here.
 */
function tokenStarts(text: string, into: number[]): void {
  into.length = 0;
  // AKIA, ASIA, ABIA, ACCA, AGPA, AIDA, AROA, AIPA, ANPA, ANVA, APKA; AIza
  for (let p = text.indexOf('A'); p !== -1; p = text.indexOf('A', p + 1)) {
    const c = text.charCodeAt(p + 1);
    if (c >= 66 && c <= 83 && (AWS_SECOND & (1 << (c - 64))) !== 0) into.push(p);
  }
  // By the character before the `_`: hf_, sk_live_, rk_live_, gk_; gh[pousr]_; npm_; github_pat_.
  for (let p = text.indexOf('_'); p !== -1; p = text.indexOf('_', p + 1)) {
    switch (text.charCodeAt(p - 1)) {
      case 102: // f
      case 107: // k
        if (
          prefixAt(text, 'hf', p - 2) ||
          prefixAt(text, 'sk', p - 2) ||
          prefixAt(text, 'rk', p - 2) ||
          prefixAt(text, 'gk', p - 2)
        ) {
          into.push(p - 2);
        }
        break;
      case 112: // p
      case 111: // o
      case 117: // u
      case 115: // s
      case 114: // r
        if (prefixAt(text, 'gh', p - 3)) into.push(p - 3);
        break;
      case 109: // m
        if (prefixAt(text, 'npm', p - 3)) into.push(p - 3);
        break;
      case 98: // b
        if (prefixAt(text, 'github', p - 6)) into.push(p - 6);
        break;
    }
  }
  // By the character before the `-`: sk- (sk-ant-, sk-proj-, …); xox[abposr]-, xapp-; glpat-.
  for (let p = text.indexOf('-'); p !== -1; p = text.indexOf('-', p + 1)) {
    switch (text.charCodeAt(p - 1)) {
      case 107: // k
        if (prefixAt(text, 'sk', p - 2)) into.push(p - 2);
        break;
      case 97: // a
      case 98: // b
      case 112: // p
      case 111: // o
      case 115: // s
      case 114: // r
        if (prefixAt(text, 'xox', p - 4) || prefixAt(text, 'xapp', p - 4)) into.push(p - 4);
        break;
      case 116: // t
        if (prefixAt(text, 'glpat', p - 5)) into.push(p - 5);
        break;
    }
  }
  for (let p = text.indexOf('J'); p !== -1; p = text.indexOf('J', p + 1)) {
    if (text.charCodeAt(p - 1) === 121 && text.charCodeAt(p - 2) === 101) into.push(p - 2); // eyJ
  }
  for (let p = text.indexOf('SG.'); p !== -1; p = text.indexOf('SG.', p + 1)) into.push(p);
  for (let p = text.indexOf('://'); p !== -1; p = text.indexOf('://', p + 1)) {
    if (prefixAt(text, 'https', p - 5)) into.push(p - 5);
  }
}

/** Does `text` have `prefix` at `i` (false for a negative `i`, which startsWith would clamp to 0)? */
function prefixAt(text: string, prefix: string, i: number): boolean {
  return i >= 0 && text.startsWith(prefix, i);
}

function hasDigitAndLetter(s: string, from: number): boolean {
  let digit = false;
  let letter = false;
  for (let i = from; i < s.length && !(digit && letter); i++) {
    const c = s.charCodeAt(i);
    if (isDigit(c)) digit = true;
    else if (isAsciiLetter(c)) letter = true;
  }
  return digit && letter;
}

/** Private key blocks with at least 64 base64 characters of body; an unterminated one ends with its body. */
export function scanPrivateKeys(text: string, out: Finding[]): void {
  if (text.indexOf('-----BEGIN ') === -1) return;
  let nextEnd = -2; // position of the next "-----END " at or after the current body; -1: none left
  PEM_BEGIN.lastIndex = 0;
  for (let m = PEM_BEGIN.exec(text); m !== null; m = PEM_BEGIN.exec(text)) {
    const start = m.index;
    const bodyStart = start + m[0].length;
    if (nextEnd !== -1 && nextEnd < bodyStart) nextEnd = text.indexOf('-----END ', bodyStart);
    const footer = `-----END ${m[1]}-----`;
    let end: number;
    let body: number;
    if (nextEnd !== -1 && nextEnd - bodyStart <= MAX_KEY_SPAN && text.startsWith(footer, nextEnd)) {
      body = countBase64(text, bodyStart, nextEnd);
      end = nextEnd + footer.length;
    } else {
      // Truncated (e.g. a streamed window): the body is the run of base64, whitespace, escaped
      // newlines and armour headers that follows.
      let i = bodyStart;
      end = bodyStart;
      body = 0;
      while (i < text.length && i - bodyStart <= MAX_KEY_SPAN) {
        const c = text.charCodeAt(i);
        if (isBase64(c)) {
          body++;
          end = i + 1;
        } else if (
          !(c === 32 || c === 9 || c === 10 || c === 13 || c === 92 || c === 58 || c === 44 || c === 45)
        ) {
          break;
        }
        i++;
      }
      // Whatever that run held (even another header) is not scanned again.
      if (i > PEM_BEGIN.lastIndex) PEM_BEGIN.lastIndex = i;
    }
    if (body < MIN_KEY_BODY) continue;
    out.push({ category: 'secret', type: 'private_key', start, end });
    if (end > PEM_BEGIN.lastIndex) PEM_BEGIN.lastIndex = end;
  }
}

function isBase64(c: number): boolean {
  return isAsciiAlnum(c) || c === 43 || c === 47 || c === 61;
}

function countBase64(text: string, start: number, end: number): number {
  let n = 0;
  for (let i = start; i < end; i++) if (isBase64(text.charCodeAt(i))) n++;
  return n;
}

/**
 * `scheme://user:password@host…`: the password span is the finding. Placeholders are skipped, and so
 * is a password already found as a more specific token (`found`).
 */
export function scanCredentialUrls(text: string, out: Finding[], found: SpanCursor): void {
  let i = text.indexOf('://');
  while (i !== -1) {
    let s = i;
    while (s > 0 && isSchemeChar(text.charCodeAt(s - 1))) s--;
    if (i - s >= 2 && isAsciiLetter(text.charCodeAt(s))) {
      USERINFO.lastIndex = i + 3;
      const m = USERINFO.exec(text);
      if (m !== null) {
        const pw = m[2]!;
        const pwStart = i + 3 + m[1]!.length + 1;
        if (!PASSWORD_PLACEHOLDER.test(pw) && !found.overlaps(pwStart, pwStart + pw.length)) {
          out.push({
            category: 'secret',
            type: 'connection_string',
            start: pwStart,
            end: pwStart + pw.length,
          });
        }
      }
    }
    i = text.indexOf('://', i + 3);
  }
}

function isSchemeChar(c: number): boolean {
  return isAsciiAlnum(c) || c === 43 || c === 45 || c === 46;
}
