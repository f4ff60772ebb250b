// IPv6 addresses: full eight-group form or '::'-compressed with at least two non-empty groups, an
// optional dotted IPv4 tail, and at least one decimal digit. That keeps out C++/Rust paths
// (`std::vec`, `Self::ADD`), Python slices (`a[::2]`), times (`10:30:45`) and MAC addresses.

import { isDigit, isHexDigit, isWordChar } from './chars.js';
import { pushPii } from './pii-mask.js';
import type { Finding } from './types.js';

const COLON = 58;
const DOT = 46;

// Sticky: tried at each ':' (a scan of every position would cost more than the whole IPv6 check).
const HIT = /:[0-9A-Fa-f]{0,4}:/y;
const IPV4_TAIL = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

export function scanIpv6(text: string, mask: number, out: Finding[]): void {
  const n = text.length;
  for (let at = text.indexOf(':'); at !== -1; ) {
    HIT.lastIndex = at;
    if (!HIT.test(text)) {
      at = text.indexOf(':', at + 1);
      continue;
    }
    let s = at;
    while (s > 0 && isV6Char(text.charCodeAt(s - 1))) s--;
    let e = at + 1;
    while (e < n && (isV6Char(text.charCodeAt(e)) || text.charCodeAt(e) === DOT)) e++;
    at = text.indexOf(':', e); // the next hit starts after this candidate
    while (e > s && text.charCodeAt(e - 1) === DOT) e--;
    if (text.charCodeAt(e - 1) === COLON && text.charCodeAt(e - 2) !== COLON) e--;
    if (s > 0) {
      const p = text.charCodeAt(s - 1);
      if (isWordChar(p) || p === DOT) continue;
    }
    if (isWordChar(text.charCodeAt(e))) continue;
    if (validIpv6(text.slice(s, e))) pushPii(out, mask, 'ipv6', s, e);
  }
}

function isV6Char(c: number): boolean {
  return isHexDigit(c) || c === COLON;
}

/** Textual IPv6 address check (RFC 4291 §2.2) with the extra digit and group rules above. */
export function validIpv6(t: string): boolean {
  let hasDigit = false;
  for (let i = 0; i < t.length; i++) {
    if (isDigit(t.charCodeAt(i))) {
      hasDigit = true;
      break;
    }
  }
  if (!hasDigit) return false;
  const halves = t.split('::');
  if (halves.length > 2) return false;
  let groups = 0;
  for (let h = 0; h < halves.length; h++) {
    const half = halves[h]!;
    if (half === '') continue;
    const parts = half.split(':');
    for (let k = 0; k < parts.length; k++) {
      const g = parts[k]!;
      const last = h === halves.length - 1 && k === parts.length - 1;
      if (last && g.includes('.')) {
        if (!IPV4_TAIL.test(g)) return false;
        groups += 2;
        continue;
      }
      if (g.length < 1 || g.length > 4) return false;
      for (let i = 0; i < g.length; i++) if (!isHexDigit(g.charCodeAt(i))) return false;
      groups++;
    }
  }
  return halves.length === 2 ? groups >= 2 && groups <= 7 : groups === 8;
}
