// PII scan: e-mail from each '@', numeric types in one pass over digit runs, IPv6 from colon groups,
// dates of birth from their context words. Each sub-scan is skipped when its trigger cannot occur.

import { BEYOND_LATIN1 } from './chars.js';
import { scanDob } from './pii-dob.js';
import { scanEmails } from './pii-email.js';
import { scanIpv6 } from './pii-ipv6.js';
import { PII_BIT } from './pii-mask.js';
import { scanNumericPii } from './pii-numeric.js';
import type { Finding } from './types.js';

const NUMERIC = PII_BIT.phone | PII_BIT.card | PII_BIT.iban | PII_BIT.ssn | PII_BIT.ipv4;
const DIGITS = ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'];
const DIGIT = /[0-9]/;

/**
 * Appends PII findings of the types in `mask` (see pii-mask.ts) to `out`, unsorted. `digits`: whether
 * the text holds a digit, when the caller knows (detect() asks once for PII and leet).
 */
export function scanPii(text: string, mask: number, out: Finding[], digits?: boolean): void {
  if (mask === 0 || text.length === 0) return;
  if ((mask & PII_BIT.email) !== 0 && text.indexOf('@') !== -1) scanEmails(text, mask, out);
  if (!(digits ?? hasDigit(text))) return;
  if ((mask & NUMERIC) !== 0) scanNumericPii(text, mask, out);
  if ((mask & PII_BIT.ipv6) !== 0 && text.indexOf(':') !== -1) scanIpv6(text, mask, out);
  if ((mask & PII_BIT.dob) !== 0) scanDob(text, mask, out);
}

/**
 * Ten indexOf calls (a vectorised byte search each) cost less than one regex scan for a digit on a
 * one-byte string. A string holding a character past U+00FF (the first regex finds one at once) is a
 * two-byte string in V8, searched for the digit's low byte: in Cyrillic (а–й are U+0430–0439),
 * Arabic or Devanagari text that byte is in many letters, and ten searches cost three times one
 * regex scan (in mostly-ASCII two-byte text they cost less, but the scan is cheap there too).
 */
export function hasDigit(text: string): boolean {
  if (BEYOND_LATIN1.test(text)) return DIGIT.test(text);
  for (let d = 0; d < 10; d++) if (text.indexOf(DIGITS[d]!) !== -1) return true;
  return false;
}
