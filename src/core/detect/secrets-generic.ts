// Secrets assigned to a secret-looking name: `api_key = "…"`, `"token": "…"`, `PASSWORD=…`,
// `Authorization: Bearer …`, `Password=…;` inside ADO/JDBC connection strings and Azure
// `AccountKey=…`. A hit on a name fragment is expanded to the whole identifier; the value must follow
// an assignment operator and pass length, character-class, entropy and placeholder checks.

import { isAsciiAlnum, isDigit, isLower, isUpper } from './chars.js';
import type { SpanCursor } from './span-cursor.js';
import type { Finding, SecretType } from './types.js';
import { shannonEntropy } from './validators.js';

/** Minimum Shannon entropy (bits/char) of a generic secret value of at least MIN_SECRET_LENGTH. */
export const SECRET_ENTROPY_THRESHOLD = 3.5;
/** The same for values made only of hex digits (an alphabet of 16 caps entropy at 4 bits/char). */
export const HEX_SECRET_ENTROPY_THRESHOLD = 3.0;
export const MIN_SECRET_LENGTH = 16;
const PASSWORD_ENTROPY_THRESHOLD = 2.5;
const MIN_PASSWORD_LENGTH = 8;
const MIN_CONN_PASSWORD_LENGTH = 4;
const CONTEXT_WINDOW = 256;
/** The characters of values that were not secrets the scan reads again: this, plus per character. */
const REREAD_BASE = 64 * 1024;
const REREAD_PER_CHAR = 2;

// A fragment of a secret-looking name (letters only, so a hit lies inside one identifier).
const NAME_HIT = /secret|pass(?:w|phrase)|pwd|token|key|credential|auth|bearer/i;
const ASSIGN = new RegExp(
  // optional closing quote, operator (group 1), optional auth scheme, then one value form (groups 2-5)
  '["\']?[ \\t]*(:=|=>|==?|:)[ \\t]*(?:(?:Bearer|Basic|Token)[ \\t]+)?' +
    '(?:"([^"\\s\\\\]{1,512})"|\'([^\'\\s\\\\]{1,512})\'|`([^`\\s\\\\]{1,512})`|' +
    '([^\\s"\'`,;&()[\\]{}<>]{1,512}))',
  'y',
);

// Matched against the identifier lowercased with `_`, `-` and `.` removed.
const SECRET_NAME = new RegExp(
  [
    'secret|passw|passphrase|pwd|token|apikey|accesskey|privatekey|signingkey|encryptionkey',
    'masterkey|authkey|clientkey|servicekey|accountkey|sharedaccesskey|saskey|licensekey',
    'subscriptionkey|credential|authorization|bearer',
  ].join('|'),
);
// Names that mention a secret but hold something else: counts, ids, URLs, references, hashes…
const NOT_SECRET_NAME = new RegExp(
  [
    'public|publishable|tokeniz|',
    '(?:max|num|total|page|next|prev|input|output|prompt|completion|cache|sort|primary|foreign|partition',
    '|idempotency|row|lookup|csrf)(?:token|key)|',
    '(?:token|key|secret|password|passwd|pwd|credential|credentials)(?:url|uri|path|file|dir|name|id|ids',
    '|type|env|var|ref|arn|label|placeholder|field|header|count|limit|length|len|ttl|expiry|expires',
    '|expiresat|expiresin|policy|hint|prompt|pattern|regex|min|max|size|index|version|hash|manager|store',
    '|provider|source|location|rotation|kind|format|usage|budget|endpoint|prefix|schema|reset|confirm',
    '|confirmation|strength|required|visible|input)$',
  ].join(''),
);
const PASSWORD_NAME = /passw|passphrase|pwd/;
const CONN_CONTEXT = new RegExp(
  '(?:server|data source|host|hostname|address|uid|user id|username|database|initial catalog|accountname|' +
    'endpoint|defaultendpointsprotocol)\\s*=',
  'i',
);

const PLACEHOLDER = new RegExp(
  'your|placeholder|changeme|change_me|replace|redacted|dummy|xxxx|\\*\\*\\*|[-_.]example|example[-_.]|' +
    'insert|here$|^<|\\$\\{|\\{\\{|%\\(|^\\$[A-Za-z_]',
  'i',
);
const IDENT_CHAIN = /^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+$/;
const IDENT_NO_DIGIT = /^[A-Za-z_$-]+$/;
const HEX = /^[0-9a-fA-F]+$/;
const BASE64_40 = /^[A-Za-z0-9/+]{40}$/;
const BASE64ISH = /^[A-Za-z0-9/+=_-]{20,}$/;

function isIdentChar(c: number): boolean {
  return isAsciiAlnum(c) || c === 95 || c === 45 || c === 46;
}

// isIdentChar as a table over ASCII, for the backward walk from each operator.
const IDENT_CHAR = new Uint8Array(128);
for (let c = 0; c < 128; c++) IDENT_CHAR[c] = isIdentChar(c) ? 1 : 0;

/**
 * Appends assignment secrets to `out`, skipping values that overlap a secret the specific scanners
 * (which run first) already found (`found`).
 *
 * A name counts only with an operator after it, so the scan starts from each `:` and `=` and looks
 * back at the identifier (a maximal run of identifier characters) before it; one that holds a name
 * fragment at or after `from` (where the previous value ended) is tried. That visits the same
 * identifiers, in the same order, as scanning the text for name fragments would.
 */
export function scanAssignedSecrets(text: string, out: Finding[], found: SpanCursor): void {
  let from = 0;
  // Value characters left to read again: a value that is not a secret may hold `name=value` pairs
  // of its own (`DB_PASSWORD="${DB_PASSWORD:-…}"`, JSON in an env var), read from its start again;
  // but `pwd=pwd=pwd=…` would then read up to 512 characters for every 4 of the text. Past the
  // budget (far more than real text spends) such a value is skipped whole.
  let rereads = REREAD_BASE + REREAD_PER_CHAR * text.length;
  let colon = text.indexOf(':');
  let equals = text.indexOf('=');
  while (colon !== -1 || equals !== -1) {
    let op: number;
    if (equals === -1 || (colon !== -1 && colon < equals)) {
      op = colon;
      colon = text.indexOf(':', op + 1);
    } else {
      op = equals;
      equals = text.indexOf('=', op + 1);
    }
    // The identifier before the operator: spaces or tabs, then an optional closing quote.
    let e = op;
    let c = text.charCodeAt(e - 1); // NaN before the start: no character class
    while (c === 32 || c === 9) c = text.charCodeAt(--e - 1);
    if (c === 34 || c === 39) c = text.charCodeAt(--e - 1);
    if (e <= from) continue;
    let s = e;
    while (c < 128 && IDENT_CHAR[c] === 1) c = text.charCodeAt(--s - 1);
    const lo = Math.max(s, from);
    // Every name fragment has at least three letters.
    if (e - lo < 3 || !NAME_HIT.test(text.slice(lo, e))) continue;
    from = e;
    const name = text.slice(s, e).toLowerCase().replace(/[-_.]/g, '');
    if (!SECRET_NAME.test(name) || NOT_SECRET_NAME.test(name)) continue;
    const before = out.length;
    const vEnd = assignedValue(text, s, e, name, out, found);
    if (vEnd < 0) continue;
    if (out.length > before) from = vEnd;
    else if ((rereads -= vEnd - e) < 0) from = vEnd;
  }
}

/**
 * Reads the value assigned to the secret name `text[s, e)` (`name`, as `classify` takes it); when it
 * is a secret (and not inside one already found), appends the finding. Returns the end of the value
 * read (a secret or not), or -1 when there is none.
 */
function assignedValue(
  text: string,
  s: number,
  e: number,
  name: string,
  out: Finding[],
  found: SpanCursor,
): number {
  ASSIGN.lastIndex = e;
  const a = ASSIGN.exec(text);
  if (a === null) return -1;
  const quoted = a[5] === undefined;
  const value = a[2] ?? a[3] ?? a[4] ?? a[5]!;
  let vEnd = a.index + a[0].length - (quoted ? 1 : 0);
  const vStart = vEnd - value.length;
  if (!quoted && (text.charCodeAt(vEnd) === 40 || text.charCodeAt(vEnd) === 91)) return vEnd; // call or index
  const type = classify(text, s, name, value, quoted, a[1] === '=');
  if (type === null) return vEnd;
  // `Password=…;` runs to the next `;` (it may hold characters the unquoted value class stops at).
  if (!quoted && (type === 'connection_string' || type === 'azure_key') && text.charCodeAt(s - 1) !== 38) {
    vEnd = valueEndInPairs(text, vEnd);
  }
  if (!found.overlaps(vStart, vEnd)) out.push({ category: 'secret', type, start: vStart, end: vEnd });
  return vEnd;
}

/** The kind of secret `value` is, assigned to `name` (a secret name, lowercased without `-_.`). */
function classify(
  text: string,
  s: number,
  name: string,
  value: string,
  quoted: boolean,
  plainEquals: boolean,
): SecretType | null {
  if (PLACEHOLDER.test(value) || value.includes('://') || value.includes('{') || value.includes('}')) {
    return null;
  }
  const c0 = value.charCodeAt(0);
  if (c0 === 47 || (c0 === 46 && value.charCodeAt(1) === 47) || c0 === 126) return null; // paths
  // Unquoted references (`settings.API_TOKEN`, `userPassword`) rather than literal values.
  if (!quoted && IDENT_NO_DIGIT.test(value.replace(/\./g, ''))) return null;
  if (!quoted && IDENT_CHAIN.test(value) && !/\d/.test(value)) return null;
  if (name === 'accountkey' || name === 'sharedaccesskey' || name.includes('azure')) {
    if (BASE64ISH.test(value) && strongEnough(value, MIN_SECRET_LENGTH, SECRET_ENTROPY_THRESHOLD)) {
      return 'azure_key';
    }
    return null;
  }
  if (PASSWORD_NAME.test(name)) {
    if (plainEquals && connectionContext(text, s) && value.length >= MIN_CONN_PASSWORD_LENGTH)
      return 'connection_string';
    return strongEnough(value, MIN_PASSWORD_LENGTH, PASSWORD_ENTROPY_THRESHOLD) ? 'generic_secret' : null;
  }
  if (name.includes('aws') && name.includes('secret') && BASE64_40.test(value)) return 'aws_secret_key';
  return strongEnough(value, MIN_SECRET_LENGTH, SECRET_ENTROPY_THRESHOLD) ? 'generic_secret' : null;
}

function valueEndInPairs(text: string, i: number): number {
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 59 || c === 34 || c === 39 || c === 96 || c <= 32) break; // ; " ' ` whitespace
    i++;
  }
  return i;
}

/** Inside a key=value connection string (`Server=…;Password=…`) or a URL query (`?…&password=…`). */
function connectionContext(text: string, s: number): boolean {
  const p = text.charCodeAt(s - 1);
  if (p === 59 || p === 38 || p === 63) return true; // ; & ?
  const window = text.slice(Math.max(0, s - CONTEXT_WINDOW), s);
  return CONN_CONTEXT.test(window.slice(window.lastIndexOf('\n') + 1));
}

/** Length, a digit or mixed case, and entropy at or above the threshold. */
function strongEnough(value: string, minLength: number, minEntropy: number): boolean {
  if (value.length < minLength) return false;
  let digit = false;
  let upper = false;
  let lower = false;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (isDigit(c)) digit = true;
    else if (isUpper(c)) upper = true;
    else if (isLower(c)) lower = true;
  }
  if (!digit && !(upper && lower)) return false;
  const threshold =
    minEntropy === SECRET_ENTROPY_THRESHOLD && HEX.test(value) ? HEX_SECRET_ENTROPY_THRESHOLD : minEntropy;
  return shannonEntropy(value) >= threshold;
}
