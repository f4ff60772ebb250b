// Numeric PII in one pass over digit runs (IPv4, SSN, payment cards, phone numbers) and one over
// possible IBAN starts.
// Each run that starts on a token boundary is tried against anchored (sticky) patterns in a fixed
// order; numeric dates are recognised and consumed so that they never read as phone numbers.

import { isAsciiAlnum, isAsciiLetter, isDigit, isUpper, isWordChar } from './chars.js';
import { pushPii } from './pii-mask.js';
import type { Finding } from './types.js';
import { cardPrefixValid, ibanLength, ibanValid, luhnValid, ssnValid } from './validators.js';

const PLUS = 43;
const LPAREN = 40;
const SPACE = 32;
const DASH = 45;
const DOT = 46;
const SLASH = 47;
const COLON = 58;
const UNDERSCORE = 95;

// Where a numeric PII value can start: an international prefix, an opening parenthesis, a long digit
// run, or a short run followed by a separator and a digit. Plain numbers ("3 incidents", "2024,",
// "$49.99 total") mostly never become candidates. IBANs start with their country code instead.
const CANDIDATE = /\+\d|\(\d|\d{9,19}(?!\d)|\d{1,4}(?=[-. /]\d)/g;
const IBAN_START = /\b(?:[A-Z]{2}|[a-z]{2})\d{2}/g;
const OCTET = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
const IPV4 = new RegExp(`${OCTET}(?:\\.${OCTET}){3}`, 'y');
const SSN_DASHED = /\d{3}-\d{2}-\d{4}/y;
const SSN_PLAIN = /\d{3}( ?)\d{2}\1\d{4}/y;
const DATE_NUMERIC = /\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}/y;
const US_PHONE = /(?:1[-. ])?[2-9]\d{2}([-. ])\d{3}\1\d{4}/y;
const US_PHONE_PAREN = /\([2-9]\d{2}\) ?\d{3}[-. ]\d{4}/y;
const INTL_PHONE = /(?:\+|00)[1-9]\d{0,2}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,4})){2,7}/y;

const SSN_CONTEXT = /(?:\bssn|\bsocial security(?: number| no\.?)?|\bss#)\W{0,4}$/i;
const IPV4_SKIP_WORDS = new Set(['version', 'ver', 'release', 'build', 'firmware', 'v']);
const PHONE_SKIP_WORDS = new Set([
  'order',
  'invoice',
  'ticket',
  'ref',
  'reference',
  'tracking',
  'sku',
  'part',
  'serial',
  'build',
  'version',
  'id',
  'no',
  'account',
  'acct',
  'isbn',
  'case',
  'po',
]);

// Group lengths of the last card candidate (at most 6 groups of digits).
const groupLen = new Int32Array(6);
const groupEnd = new Int32Array(6);

/** Appends numeric PII findings of `text` for the types in `mask`. */
export function scanNumericPii(text: string, mask: number, out: Finding[]): void {
  // IBANs first: their digit groups must not be read as phone or card numbers afterwards.
  let ibans: number[] | undefined;
  IBAN_START.lastIndex = 0;
  for (let m = IBAN_START.exec(text); m !== null; m = IBAN_START.exec(text)) {
    const end = matchIban(text, m.index, mask, out);
    if (end < 0) continue;
    IBAN_START.lastIndex = end;
    ibans ??= [];
    ibans.push(m.index, end);
  }
  const re = CANDIDATE;
  re.lastIndex = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const at = m.index;
    if (ibans !== undefined) {
      const skip = spanEndAt(ibans, at);
      if (skip > 0) {
        re.lastIndex = skip;
        continue;
      }
    }
    const c0 = text.charCodeAt(at);
    let end = -1;
    if (c0 === PLUS) {
      if (prevOk(text, at)) end = matchIntlPhone(text, at, mask, out);
    } else if (c0 === LPAREN) {
      if (prevOk(text, at)) end = matchParenPhone(text, at, mask, out);
      if (end < 0) end = matchDigitsAt(text, at + 1, mask, out);
    } else if (prevOk(text, at)) {
      end = matchDigitsAt(text, at, mask, out);
    } else if (cardMarkBefore(text, at)) {
      end = matchCard(text, at);
      if (end > 0) pushPii(out, mask, 'card', at, end);
    }
    if (end > re.lastIndex) re.lastIndex = end;
  }
}

/** The end of the [start, end) pair in `spans` that contains `at`, or -1. */
function spanEndAt(spans: readonly number[], at: number): number {
  for (let i = 0; i < spans.length; i += 2) if (spans[i]! <= at && at < spans[i + 1]!) return spans[i + 1]!;
  return -1;
}

/** May a numeric token start at `i`? Not inside a word, number, path, version, price or handle. */
function prevOk(text: string, i: number): boolean {
  if (i === 0) return true;
  const c = text.charCodeAt(i - 1);
  if (isWordChar(c)) return false;
  if (c === DOT || c === DASH || c === SLASH || c === PLUS) return false;
  if (c === 35 || c === 36 || c === 64 || c === 92 || c === 38 || c === 37) return false; // # $ @ \ & %
  if (c === COLON) {
    const b = text.charCodeAt(i - 2);
    return !(isDigit(b) || b === COLON);
  }
  return true;
}

/**
 * A mark a label or a path puts before a number (`#`, `_`, `/`): a number there is read as a card
 * only. Its issuer prefix and Luhn digit tell a card from a reference; a phone or date shape after
 * one stays a reference (`issue #212-555-0187`, `/2024-01-05/`).
 */
function cardMarkBefore(text: string, at: number): boolean {
  if (at === 0) return false;
  const c = text.charCodeAt(at - 1);
  return c === 35 || c === UNDERSCORE || c === SLASH;
}

/** Does a token end cleanly at `e`? No word character, and no `.`/`-`/`/`/`:` followed by a digit. */
function endOk(text: string, e: number): boolean {
  const c = text.charCodeAt(e);
  if (isWordChar(c)) return false;
  if (c === DOT || c === DASH || c === SLASH || c === COLON) return !isDigit(text.charCodeAt(e + 1));
  return true;
}

/** Lowercased letters of the word just before `at`, skipping up to 3 separators (` :=#.\t`). */
function wordBefore(text: string, at: number): string {
  let i = at - 1;
  for (let k = 0; k < 3 && i >= 0; k++) {
    const c = text.charCodeAt(i);
    if (c === SPACE || c === COLON || c === 61 || c === 35 || c === DOT || c === 9) i--;
    else break;
  }
  const end = i + 1;
  while (i >= 0 && end - i <= 12 && isAsciiLetter(text.charCodeAt(i))) i--;
  return text.slice(i + 1, end).toLowerCase();
}

// Words that name a phone number: "no" after one of them (`Phone no: …`) is the phone's label.
const PHONE_LABELS = new Set(['phone', 'tel', 'telephone', 'mobile', 'cell', 'fax', 'contact', 'whatsapp']);

/** A phone-shaped number labelled as something else (`Order no. …`, `Invoice …`). */
function notAPhone(text: string, at: number): boolean {
  const w = wordBefore(text, at);
  if (!PHONE_SKIP_WORDS.has(w)) return false;
  if (w !== 'no') return true;
  let i = at - 1;
  while (i >= 0 && !isAsciiLetter(text.charCodeAt(i))) i--;
  return !PHONE_LABELS.has(wordBefore(text, i + 1 - w.length));
}

/** Length of a sticky match of `re` at `at`, or -1. */
function stickyLength(re: RegExp, text: string, at: number): number {
  re.lastIndex = at;
  return re.test(text) ? re.lastIndex - at : -1;
}

function num3(text: string, at: number): number {
  return (
    (text.charCodeAt(at) - 48) * 100 + (text.charCodeAt(at + 1) - 48) * 10 + text.charCodeAt(at + 2) - 48
  );
}

/** Tries the numeric types that fit the shape of the digit run at `at`; returns the consumed end or -1. */
function matchDigitsAt(text: string, at: number, mask: number, out: Finding[]): number {
  let run = at;
  while (isDigit(text.charCodeAt(run))) run++;
  const len = run - at;
  const sep = text.charCodeAt(run);
  const dashOrSpace = sep === DASH || sep === SPACE;
  if (sep === DOT && len <= 3) {
    const n = stickyLength(IPV4, text, at);
    if (n > 0) {
      const e = at + n;
      const next = text.charCodeAt(e);
      const after = text.charCodeAt(e + 1);
      // Not part of a longer dotted number, and not a CIDR network (`10.0.0.0/8`).
      if (!isDigit(next) && !isWordChar(next) && !((next === DOT || next === SLASH) && isDigit(after))) {
        if (!ipv4Excluded(text, at) && !IPV4_SKIP_WORDS.has(wordBefore(text, at)))
          pushPii(out, mask, 'ipv4', at, e);
        return e;
      }
    }
  }
  if (len === 3 && sep === DASH && stickyLength(SSN_DASHED, text, at) > 0 && endOk(text, at + 11)) {
    const serial = num3(text, at + 7) * 10 + text.charCodeAt(at + 10) - 48;
    const group = (text.charCodeAt(at + 4) - 48) * 10 + text.charCodeAt(at + 5) - 48;
    if (ssnValid(num3(text, at), group, serial)) pushPii(out, mask, 'ssn', at, at + 11);
    return at + 11;
  }
  if ((len === 4 && dashOrSpace) || (len >= 13 && len <= 19)) {
    const e = matchCard(text, at);
    if (e > 0) {
      pushPii(out, mask, 'card', at, e);
      return e;
    }
  }
  if ((len === 4 || len <= 2) && (sep === DASH || sep === SLASH || sep === DOT)) {
    const n = stickyLength(DATE_NUMERIC, text, at);
    if (n > 0 && endOk(text, at + n)) return at + n;
  }
  if ((len === 3 || (len === 1 && text.charCodeAt(at) === 49)) && (dashOrSpace || sep === DOT)) {
    const n = stickyLength(US_PHONE, text, at);
    if (n > 0 && endOk(text, at + n)) {
      if (!notAPhone(text, at)) pushPii(out, mask, 'phone', at, at + n);
      return at + n;
    }
  }
  if (len >= 2 && text.charCodeAt(at) === 48 && text.charCodeAt(at + 1) === 48) {
    const e = matchIntlPhone(text, at, mask, out);
    if (e > 0) return e;
  }
  if (len === 9 || (len === 3 && sep === SPACE)) {
    const n = stickyLength(SSN_PLAIN, text, at);
    const e = at + n;
    if (n > 0 && endOk(text, e) && SSN_CONTEXT.test(text.slice(Math.max(0, at - 40), at))) {
      const d = text.slice(at, e).replace(/ /g, '');
      if (ssnValid(num3(d, 0), Number(d.slice(3, 5)), Number(d.slice(5)))) pushPii(out, mask, 'ssn', at, e);
      return e;
    }
  }
  return -1;
}

/** Loopback (127/8), unspecified (0.0.0.0) and broadcast/netmask (255.…) addresses are not personal. */
function ipv4Excluded(text: string, at: number): boolean {
  if (text.startsWith('127.', at) || text.startsWith('255.', at)) return true;
  return text.startsWith('0.0.0.0', at);
}

function matchParenPhone(text: string, at: number, mask: number, out: Finding[]): number {
  const n = stickyLength(US_PHONE_PAREN, text, at);
  if (n < 0) return -1;
  const e = at + n;
  if (!endOk(text, e)) return -1;
  pushPii(out, mask, 'phone', at, e);
  return e;
}

/** Does a card, dashed SSN, IPv4 address or numeric date start at `at`? (Shapes no phone group has.) */
function otherNumberAt(text: string, at: number): boolean {
  if (matchCard(text, at) > 0) return true;
  for (const re of [SSN_DASHED, IPV4, DATE_NUMERIC]) {
    const n = stickyLength(re, text, at);
    if (n > 0 && endOk(text, at + n)) return true;
  }
  return false;
}

/**
 * `+<country> …` or `00<country> …` with 8 to 15 digits after the prefix (E.164). The greedy group
 * match is cut before a card, SSN, address or date that follows it, and trailing groups are dropped
 * while there are more than 15 digits (the rest is a neighbouring number).
 */
function matchIntlPhone(text: string, at: number, mask: number, out: Finding[]): number {
  const n = stickyLength(INTL_PHONE, text, at);
  if (n < 0) return -1;
  let e = at + n;
  const first = text.charCodeAt(at) === PLUS ? at + 1 : at + 2;
  for (let p = first + 1; p < e; p++) {
    if (text.charCodeAt(p - 1) === SPACE && isDigit(text.charCodeAt(p)) && otherNumberAt(text, p)) {
      e = p - 1;
      break;
    }
  }
  let digits = 0;
  for (let i = first; i < e; i++) if (isDigit(text.charCodeAt(i))) digits++;
  while (digits > 15) {
    // Drop the last group and the separator before it.
    while (e > first && isDigit(text.charCodeAt(e - 1))) {
      e--;
      digits--;
    }
    while (e > first && !isDigit(text.charCodeAt(e - 1))) e--;
  }
  if (digits < 8 || !endOk(text, e)) return -1;
  if (notAPhone(text, at)) return e;
  pushPii(out, mask, 'phone', at, e);
  return e;
}

/**
 * A card number: 13–19 digits, contiguous or grouped 4-4-4-4(-3), 4-6-5 or 4-6-4 with one consistent
 * separator (space or dash), a known issuer prefix and a valid Luhn check digit. Returns the end or -1.
 */
function matchCard(text: string, at: number): number {
  const n = text.length;
  let i = at;
  let k = 0;
  let sep = -1;
  let total = 0;
  while (k < groupLen.length) {
    const s = i;
    while (i < n && isDigit(text.charCodeAt(i))) i++;
    const len = i - s;
    total += len;
    if (len === 0 || total > 19) break;
    groupLen[k] = len;
    groupEnd[k] = i;
    k++;
    const c = text.charCodeAt(i);
    if ((c === SPACE || c === DASH) && (sep === -1 || sep === c) && isDigit(text.charCodeAt(i + 1))) {
      sep = c;
      i++;
    } else break;
  }
  if (k === 0 || groupLen[0]! < 4) return -1;
  for (let j = k; j >= 1; j--) {
    if (!cardLayout(j)) continue;
    const e = groupEnd[j - 1]!;
    // `_` may follow a card (`pan_4111…_exp`), as it may come before one.
    if ((text.charCodeAt(e) !== UNDERSCORE && !endOk(text, e)) || !luhnValid(text, at, e)) continue;
    const digits = j === 1 ? text.slice(at, e) : text.slice(at, e).replace(/[ -]/g, '');
    if (cardPrefixValid(digits)) return e;
  }
  return -1;
}

function cardLayout(groups: number): boolean {
  const g0 = groupLen[0]!;
  if (groups === 1) return g0 >= 13 && g0 <= 19;
  if (g0 !== 4) return false;
  const g1 = groupLen[1]!;
  const g2 = groupLen[2]!;
  if (groups === 3) return g1 === 6 && (g2 === 5 || g2 === 4);
  if (g1 !== 4 || g2 !== 4 || groupLen[3] !== 4) return false;
  return groups === 4 || (groups === 5 && groupLen[4] === 3);
}

/** An IBAN from `s` in compact or space-grouped form, with the country's length and mod-97. */
function matchIban(text: string, s: number, mask: number, out: Finding[]): number {
  const len = ibanLength(text.slice(s, s + 2).toUpperCase());
  if (len === 0) return -1;
  // One letter case throughout, as the country code is written (`DE89…` or `de89…`).
  const lower = !isUpper(text.charCodeAt(s));
  let compact = '';
  let i = s;
  while (compact.length < len && i < text.length) {
    const c = text.charCodeAt(i);
    if (isDigit(c) || (lower ? c >= 97 && c <= 122 : isUpper(c))) {
      compact += text[i];
      i++;
    } else if (c === SPACE && compact.length >= 4 && isAsciiAlnum(text.charCodeAt(i + 1))) i++;
    else break;
  }
  if (compact.length !== len || isAsciiAlnum(text.charCodeAt(i))) return -1;
  if (!ibanValid(lower ? compact.toUpperCase() : compact)) return -1;
  pushPii(out, mask, 'iban', s, i);
  return i;
}
