// User-supplied regular expressions: bounded length, no catastrophic backtracking, compiled once.

import safeRegex from 'safe-regex2';

export const MAX_REGEX_LENGTH = 512;
const ALLOWED_FLAGS = /^[imsu]*$/;

export type RegexCheck = { ok: true; regex: RegExp } | { ok: false; message: string };

/**
 * Accepts a pattern only if it is at most 512 characters, compiles, and safe-regex2 finds no
 * nested quantifier (star height > 1). Stateful flags (g, y) are refused: a compiled regex is
 * shared across calls.
 */
export function checkRegex(pattern: string, flags = ''): RegexCheck {
  if (pattern.length > MAX_REGEX_LENGTH) {
    return { ok: false, message: `regex is ${pattern.length} characters; at most ${MAX_REGEX_LENGTH}` };
  }
  if (!ALLOWED_FLAGS.test(flags) || new Set(flags).size !== flags.length) {
    return { ok: false, message: `regex flags must be distinct letters among i, m, s, u; got "${flags}"` };
  }
  let regex: RegExp;
  try {
    regex = new RegExp(pattern, flags);
  } catch (err) {
    return { ok: false, message: `invalid regex: ${(err as Error).message}` };
  }
  if (!safeRegex(pattern)) {
    return {
      ok: false,
      message: 'regex may backtrack catastrophically (nested quantifiers, or more than 25 of them)',
    };
  }
  return { ok: true, regex };
}
