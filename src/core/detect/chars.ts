// Character-class tests over UTF-16 code units, shared by the hand-written scanners.

export function isDigit(c: number): boolean {
  return c >= 48 && c <= 57;
}

export function isUpper(c: number): boolean {
  return c >= 65 && c <= 90;
}

export function isLower(c: number): boolean {
  return c >= 97 && c <= 122;
}

export function isAsciiLetter(c: number): boolean {
  return isUpper(c) || isLower(c);
}

export function isAsciiAlnum(c: number): boolean {
  return isDigit(c) || isUpper(c) || isLower(c);
}

export function isHexDigit(c: number): boolean {
  return isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
}

/**
 * A character that glues onto a token: ASCII letters, digits and `_`, plus letters of other scripts
 * (approximated as anything from U+00C0 that is not a general punctuation, space or BOM code unit).
 * NaN (out of range) is not a word character.
 */
export function isWordChar(c: number): boolean {
  if (c < 128) return isAsciiAlnum(c) || c === 95;
  return c >= 0xc0 && !(c >= 0x2000 && c <= 0x206f) && c !== 0x3000 && c !== 0xfeff;
}

/**
 * A character past U+00FF. V8 keeps a string without one in one byte a unit and rejects it at once;
 * in a two-byte string the scan stops at the first such character, which in most non-Latin text is
 * near the start.
 */
export const BEYOND_LATIN1 = /[^\0-\xff]/;
