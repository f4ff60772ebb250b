// `*` globs for names (tools, models, agents): `*` matches any run of characters, dots included.
// Matching is linear: no regex, no backtracking.

import type { NameMatcher } from './types.js';

export function isGlob(pattern: string): boolean {
  return pattern.includes('*');
}

/** Compiles one pattern to a test; a pattern without `*` is an exact comparison. */
export function compileGlob(pattern: string): (name: string) => boolean {
  if (!isGlob(pattern)) return (name) => name === pattern;
  const parts = pattern.split('*');
  const head = parts[0] ?? '';
  const tail = parts[parts.length - 1] ?? '';
  const middle = parts.slice(1, -1).filter((p) => p.length > 0);
  const minLength = head.length + tail.length + middle.reduce((n, p) => n + p.length, 0);
  if (middle.length === 0) {
    if (tail.length === 0) return (name) => name.startsWith(head);
    if (head.length === 0) return (name) => name.endsWith(tail);
    return (name) => name.length >= minLength && name.startsWith(head) && name.endsWith(tail);
  }
  return (name) => {
    if (name.length < minLength || !name.startsWith(head) || !name.endsWith(tail)) return false;
    // Greedy left-to-right placement of each middle part is optimal for `*`-only globs.
    let at = head.length;
    const end = name.length - tail.length;
    for (const part of middle) {
      const found = name.indexOf(part, at);
      if (found < 0 || found + part.length > end) return false;
      at = found + part.length;
    }
    return true;
  };
}

/** A plain test for a list of names and globs (no object, one call). */
export function compileNameTest(patterns: readonly string[]): (name: string) => boolean {
  const exact = patterns.filter((p) => !isGlob(p));
  const globs = patterns.filter(isGlob).map(compileGlob);
  const [g0, g1] = globs;
  if (exact.length === 0 && g0 !== undefined && g1 === undefined) return g0;
  const one = exact.length === 1 ? exact[0] : undefined;
  if (globs.length === 0) {
    if (one !== undefined) return (name) => name === one;
    const set = new Set(exact);
    return (name) => set.has(name);
  }
  const set = new Set(exact);
  return (name) => {
    if (set.has(name)) return true;
    for (let i = 0; i < globs.length; i++) if ((globs[i] as (n: string) => boolean)(name)) return true;
    return false;
  };
}

/** A list of exact names and globs; exact names are looked up in a set. */
export function compileNameMatcher(patterns: readonly string[]): NameMatcher {
  return { patterns: Object.freeze([...patterns]), test: compileNameTest(patterns) };
}
