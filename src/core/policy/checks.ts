// Small validation helpers shared by the rule-set compiler: each records problems with their path.

import { readNames } from './conditions.js';
import type { Problem } from './types.js';

export function oneOf<T extends string>(
  value: unknown,
  allowed: readonly T[],
  path: string,
  problems: Problem[],
): T | undefined {
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  problems.push({ path, message: `must be one of ${allowed.join(', ')}; got ${JSON.stringify(value)}` });
  return undefined;
}

export function unknownKeys(
  node: Record<string, unknown>,
  known: ReadonlySet<string>,
  path: string,
  p: Problem[],
) {
  for (const k of Object.keys(node)) {
    if (!known.has(k)) p.push({ path: path ? `${path}.${k}` : k, message: `unknown key "${k}"` });
  }
}

export function readTypes(node: Record<string, unknown>, key: string, path: string, p: Problem[]) {
  if (!Object.hasOwn(node, key)) return null;
  const names = readNames(node[key], path, p);
  return names === null ? null : new Set(names);
}
