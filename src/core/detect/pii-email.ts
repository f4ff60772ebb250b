// E-mail addresses, found from each '@' outwards: a dot-atom local part and a domain of at least two
// labels whose top level is alphabetic. URL credentials (`scheme://user:pw@host`), scp-style git
// remotes (`git@host:org/repo`), package pins (`pkg@1.2.3`) and asset names (`icon@2x.png`) are not
// addresses.

import { isAsciiAlnum, isAsciiLetter, isWordChar } from './chars.js';
import { pushPii } from './pii-mask.js';
import type { Finding } from './types.js';

const DOT = 46;
const DASH = 45;
const COLON = 58;
const SLASH = 47;

const FILE_EXTENSIONS = new Set([
  'png',
  'jpg',
  'jpeg',
  'gif',
  'svg',
  'webp',
  'ico',
  'js',
  'mjs',
  'cjs',
  'ts',
  'tsx',
  'jsx',
  'css',
  'scss',
  'json',
  'yaml',
  'yml',
  'txt',
  'rb',
  'go',
  'java',
  'html',
  'htm',
  'xml',
  'pdf',
  'zip',
  'gz',
  'tgz',
  'lock',
]);

function isLocalChar(c: number): boolean {
  // A-Z a-z 0-9 . _ % + -
  return isAsciiAlnum(c) || c === DOT || c === 95 || c === 37 || c === 43 || c === DASH;
}

export function scanEmails(text: string, mask: number, out: Finding[]): void {
  const n = text.length;
  let at = text.indexOf('@');
  while (at !== -1) {
    const end = emailAt(text, at, n);
    if (end > 0) pushPii(out, mask, 'email', localStart, end);
    at = text.indexOf('@', end > at ? end : at + 1);
  }
}

// Start of the local part of the last address emailAt() accepted.
let localStart = 0;

/** The end of the address around the '@' at `at` (its start in `localStart`), or -1. */
function emailAt(text: string, at: number, n: number): number {
  let s = at;
  const floor = Math.max(0, at - 65); // a local part is at most 64 characters
  // The local part ends (leftwards) at a non-local character or at a double dot.
  while (s > floor && isLocalChar(text.charCodeAt(s - 1))) {
    if (text.charCodeAt(s - 1) === DOT && text.charCodeAt(s) === DOT) break;
    s--;
  }
  while (s < at && text.charCodeAt(s) === DOT) s++;
  if (s === at || at - s > 64 || text.charCodeAt(at - 1) === DOT) return -1;
  if (s > 0) {
    const p = text.charCodeAt(s - 1);
    if (p === SLASH || p === 64 || isWordChar(p)) return -1;
    // After a colon: `user:pass@host` in a URL (`//user:`) is a credential, not an address; a
    // label (`Email:jane@…`, `mailto:`) is not part of one.
    if (p === COLON) {
      let j = s - 2;
      while (j >= 0 && isLocalChar(text.charCodeAt(j))) j--;
      if (j >= 0 && text.charCodeAt(j) === SLASH) return -1;
    }
  }
  // Domain: labels of [A-Za-z0-9-] separated by single dots.
  let i = at + 1;
  let labels = 0;
  let lastStart = i;
  for (;;) {
    const ls = i;
    while (i < n && (isAsciiAlnum(text.charCodeAt(i)) || text.charCodeAt(i) === DASH)) i++;
    if (i === ls || text.charCodeAt(ls) === DASH || text.charCodeAt(i - 1) === DASH) return -1;
    labels++;
    lastStart = ls;
    if (text.charCodeAt(i) === DOT && isAsciiAlnum(text.charCodeAt(i + 1))) i++;
    else break;
  }
  if (labels < 2 || i - at - 1 > 253) return -1;
  const tldLen = i - lastStart;
  if (tldLen < 2 || tldLen > 24) return -1;
  for (let k = lastStart; k < i; k++) if (!isAsciiLetter(text.charCodeAt(k))) return -1;
  if (FILE_EXTENSIONS.has(text.slice(lastStart, i).toLowerCase())) return -1;
  const next = text.charCodeAt(i);
  if (next === 64 || isWordChar(next)) return -1;
  if (next === COLON && isWordChar(text.charCodeAt(i + 1))) return -1;
  localStart = s;
  return i;
}
