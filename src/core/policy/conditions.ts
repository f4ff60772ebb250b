// Compiles a rule's `when` (and the conditions nested in all / any / not) into one predicate.
// Problems are collected with their path; a type mismatch at evaluation time is false, never a throw.

import { PII_TYPES, SECRET_TYPES, UNICODE_TYPES } from '../detect/index.js';
import { compileFieldPath } from './field-path.js';
import { compileNameTest } from './glob.js';
import { checkRegex } from './regex-safety.js';
import { type Action, BEHAVIOR_TYPES, type Predicate, type Problem } from './types.js';

export const OPS = [
  'eq',
  'ne',
  'in',
  'not_in',
  'gt',
  'gte',
  'lt',
  'lte',
  'contains',
  'matches',
  'exists',
] as const;
export type Op = (typeof OPS)[number];

export const NAME_KEYS = ['type', 'agent_id', 'tool', 'server', 'model', 'provider'] as const;
type NameKey = (typeof NAME_KEYS)[number];
const CONDITION_KEYS = new Set<string>([...NAME_KEYS, 'all', 'any', 'not', 'field', 'op', 'value', 'flags']);
const MAX_DEPTH = 32;
const MAX_LIST = 10_000;
const MAX_NAME = 256;
/**
 * The longest string a `matches` condition reads (64 Ki characters; at most a few hundred ms on
 * the linear-time engine, on the event loop). A longer one takes the value that makes the rule
 * match (docs/policy.md, "matches"): one request must not hold the gateway for seconds.
 */
export const MAX_MATCH_INPUT = 65_536;

type Primitive = string | number | boolean | null;

export const TRUE: Predicate = () => true;

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function typeName(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v;
}

function kindOf(v: unknown): 'string' | 'number' | 'boolean' | 'null' | null {
  if (v === null) return 'null';
  const t = typeof v;
  return t === 'string' || t === 'number' || t === 'boolean' ? t : null;
}

function isPrimitive(v: unknown): v is Primitive {
  return kindOf(v) !== null && !(typeof v === 'number' && !Number.isFinite(v));
}

export function and(parts: readonly Predicate[]): Predicate {
  const [p0, p1, p2] = parts;
  if (p0 === undefined) return TRUE;
  if (p1 === undefined) return p0;
  if (p2 === undefined) return (a) => p0(a) && p1(a);
  if (parts.length === 3) return (a) => p0(a) && p1(a) && p2(a);
  return (a) => {
    for (const p of parts) if (!p(a)) return false;
    return true;
  };
}

function or(parts: readonly Predicate[]): Predicate {
  const [p0, p1] = parts;
  if (p0 === undefined) return () => false;
  if (p1 === undefined) return p0;
  if (parts.length === 2) return (a) => p0(a) || p1(a);
  return (a) => {
    for (const p of parts) if (p(a)) return true;
    return false;
  };
}

/** Reads `type`, `tool`, ... values: a string or a non-empty list of strings. */
export function readNames(value: unknown, path: string, problems: Problem[]): string[] | null {
  const list = Array.isArray(value) ? value : [value];
  if (list.length === 0) {
    problems.push({ path, message: 'list must not be empty' });
    return null;
  }
  if (list.length > MAX_LIST) {
    problems.push({ path, message: `list has ${list.length} items; at most ${MAX_LIST}` });
    return null;
  }
  const out: string[] = [];
  list.forEach((item, i) => {
    const at = Array.isArray(value) ? `${path}[${i}]` : path;
    if (typeof item === 'string' && item.length > 0 && item.length <= MAX_NAME) out.push(item);
    else problems.push({ path: at, message: `must be a non-empty string of at most ${MAX_NAME} characters` });
  });
  return out.length === list.length ? out : null;
}

function compileName(key: NameKey, value: unknown, path: string, problems: Problem[]): Predicate {
  const names = readNames(value, path, problems);
  if (names === null) return TRUE;
  if (key === 'type') {
    const known = new Set<string>(BEHAVIOR_TYPES);
    const bad = names.filter((n) => !known.has(n));
    for (const n of bad) problems.push({ path, message: `unknown behavior type "${n}"` });
    const set = new Set<string>(names);
    return (a) => set.has(a.type);
  }
  const test = compileNameTest(names);
  // One closure per key so each reads its property directly.
  switch (key) {
    case 'agent_id':
      return (a) => test(a.agent_id);
    case 'tool':
      return (a) => a.tool !== undefined && test(a.tool);
    case 'server':
      return (a) => a.server !== undefined && test(a.server);
    case 'model':
      return (a) => a.model !== undefined && test(a.model);
    default:
      return (a) => a.provider !== undefined && test(a.provider);
  }
}

const DETECTION_TYPES: Readonly<Record<string, readonly string[]>> = {
  'detections.pii': PII_TYPES,
  'detections.secrets': SECRET_TYPES,
  'detections.unicode': UNICODE_TYPES,
};

/**
 * A condition on `detections.pii`, `.secrets` or `.unicode` names types the detectors report: a
 * misspelt one would never match, silently (docs/policy.md), so it is a validation error.
 */
function checkDetectionTypes(field: string, value: unknown, path: string, problems: Problem[]): void {
  const known = DETECTION_TYPES[field];
  if (known === undefined) return;
  const names = typeof value === 'string' ? [value] : Array.isArray(value) ? value : [];
  for (const name of names)
    if (typeof name === 'string' && !known.includes(name))
      problems.push({
        path,
        message: `unknown ${field.slice('detections.'.length)} type "${name}" (known: ${known.join(', ')})`,
      });
}

function compileLeaf(
  node: Record<string, unknown>,
  path: string,
  problems: Problem[],
  closedAs: boolean | undefined,
  onClosed: OnClosed | undefined,
  restrictive: boolean | undefined,
): Predicate {
  const { field, op } = node;
  const start = problems.length;
  if (typeof field !== 'string') {
    problems.push({ path: `${path}.field`, message: `field must be a string path, got ${typeName(field)}` });
  }
  if (typeof op !== 'string' || !(OPS as readonly string[]).includes(op)) {
    problems.push({
      path: `${path}.op`,
      message: `op must be one of ${OPS.join(', ')}; got ${JSON.stringify(op)}`,
    });
  }
  if (Object.hasOwn(node, 'flags') && op !== 'matches') {
    problems.push({ path: `${path}.flags`, message: 'flags is only allowed with op matches' });
  }
  let get: ((a: Action) => unknown) | null = null;
  if (typeof field === 'string') {
    const compiled = compileFieldPath(field);
    if (compiled.ok) get = compiled.get;
    else problems.push({ path: `${path}.field`, message: compiled.message });
  }
  // Checked when a rule set is submitted; a stored version an earlier release accepted with such
  // a type keeps compiling (its condition matches nothing, as then) rather than failing its org closed.
  if (closedAs === undefined && typeof field === 'string')
    checkDetectionTypes(field, node.value, `${path}.value`, problems);
  if (typeof op !== 'string' || !(OPS as readonly string[]).includes(op)) return TRUE;
  const test = compileOp(op as Op, node, `${path}.value`, problems, closedAs, onClosed, restrictive);
  if (get === null || test === null || problems.length > start) return TRUE;
  const read = get;
  return (a) => test(read(a));
}

/** Builds the test for one op over the field's value; null when the operand is invalid. */
function compileOp(
  op: Op,
  node: Record<string, unknown>,
  path: string,
  problems: Problem[],
  closedAs: boolean | undefined,
  onClosed: OnClosed | undefined,
  restrictive: boolean | undefined,
): ((x: unknown) => boolean) | null {
  const value = node.value;
  const bad = (message: string) => {
    problems.push({ path, message });
    return null;
  };
  switch (op) {
    case 'eq':
    case 'ne': {
      if (!isPrimitive(value)) return bad(`${op} needs a string, finite number, boolean or null`);
      if (op === 'eq') return (x) => x === value;
      if (value === null) return bad('ne null is always false; use op exists');
      const kind = typeof value;
      return (x) => typeof x === kind && x !== value;
    }
    case 'in':
    case 'not_in': {
      if (!Array.isArray(value) || value.length === 0) return bad(`${op} needs a non-empty list`);
      if (value.length > MAX_LIST) return bad(`${op} list has ${value.length} items; at most ${MAX_LIST}`);
      const badAt = value.findIndex((v) => !isPrimitive(v));
      if (badAt >= 0) return bad(`item ${badAt} must be a string, finite number, boolean or null`);
      const set = new Set<unknown>(value);
      if (op === 'in') return (x) => set.has(x);
      const kinds = new Set(value.map(kindOf));
      return (x) => kinds.has(kindOf(x)) && !set.has(x);
    }
    case 'gt':
    case 'gte':
    case 'lt':
    case 'lte': {
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        return bad(`${op} needs a finite number, got ${typeName(value)}`);
      }
      const v = value;
      // A value that is there but is not a number (`"250000"`, `[250000]`) cannot be compared,
      // and must not slip past a threshold: the condition takes the value that makes its rule
      // match if the rule is restrictive (never for allow), as a fail-closed regex does.
      const other = restrictive === true;
      const mismatch = (x: unknown): boolean => (x === undefined || x === null ? false : other);
      if (op === 'gt') return (x) => (typeof x === 'number' ? x > v : mismatch(x));
      if (op === 'gte') return (x) => (typeof x === 'number' ? x >= v : mismatch(x));
      if (op === 'lt') return (x) => (typeof x === 'number' ? x < v : mismatch(x));
      return (x) => (typeof x === 'number' ? x <= v : mismatch(x));
    }
    case 'contains': {
      if (!isPrimitive(value)) return bad('contains needs a string, finite number, boolean or null');
      if (typeof value === 'string') {
        return (x) => (typeof x === 'string' ? x.includes(value) : Array.isArray(x) && x.includes(value));
      }
      return (x) => Array.isArray(x) && x.includes(value);
    }
    case 'matches': {
      if (typeof value !== 'string') return bad(`matches needs a regex string, got ${typeName(value)}`);
      const flags = node.flags ?? '';
      if (typeof flags !== 'string') {
        problems.push({ path: path.replace(/value$/, 'flags'), message: 'flags must be a string' });
        return null;
      }
      const checked = checkRegex(value, flags);
      if (!checked.ok && checked.legacy === true && closedAs !== undefined) {
        const closed = closedAs;
        onClosed?.(path, checked.message, closed);
        return () => closed;
      }
      if (!checked.ok) return bad(checked.message);
      const re = checked.regex;
      // The linear-time engine costs ~0.5-5 µs a character: a value longer than the bound is not
      // read; the condition takes the value that makes its rule match (fails closed).
      const closed = restrictive ?? true;
      return (x) => typeof x === 'string' && (x.length > MAX_MATCH_INPUT ? closed : re.test(x));
    }
    case 'exists': {
      // No value means true. A null (a YAML `value:` left empty) is refused when a rule set is
      // submitted; a stored version an earlier release accepted with one reads it as true, as then.
      if (value === null && closedAs === undefined)
        return bad('exists needs true or false (or no value, meaning true), got null');
      const want = value ?? true;
      if (typeof want !== 'boolean') return bad(`exists needs true or false, got ${typeName(value)}`);
      return want ? (x) => x !== undefined && x !== null : (x) => x === undefined || x === null;
    }
  }
}

export interface ConditionOptions {
  /** Top-level keys already guaranteed by the rule index; left out of the predicate. */
  omit?: ReadonlySet<string>;
  /**
   * For a stored (published) version only: a `matches` whose regex an older release accepted but
   * the linear-time engine refuses is not a problem; the condition takes this value instead, the
   * one that makes its rule match if it is restrictive (not allow), flipped under each `not`.
   */
  closedAs?: boolean;
  /** Told of each condition that fails closed: the path of its value, why, and the value it takes. */
  onClosed?: OnClosed;
  /**
   * The value that makes the rule match: true for a restrictive rule (block, require_approval,
   * redact), false for allow, flipped under each `not`. A numeric comparison on a value that is
   * present but not a number takes it (fails closed); left out, such a comparison is false.
   */
  restrictive?: boolean;
}

export type OnClosed = (path: string, message: string, takenAs: boolean) => void;

/**
 * Compiles a condition object. All keys present must hold (AND): name keys, one field/op/value
 * leaf, `all` (every item), `any` (at least one item), `not` (the inner condition fails).
 */
export function compileCondition(
  node: unknown,
  path: string,
  problems: Problem[],
  depth = 0,
  options: ConditionOptions = {},
): Predicate {
  if (!isRecord(node)) {
    problems.push({ path, message: `condition must be an object, got ${typeName(node)}` });
    return TRUE;
  }
  if (depth > MAX_DEPTH) {
    problems.push({ path, message: `conditions nest deeper than ${MAX_DEPTH} levels` });
    return TRUE;
  }
  const keys = Object.keys(node);
  if (keys.length === 0 && depth > 0) problems.push({ path, message: 'condition must not be empty' });
  for (const k of keys) {
    if (!CONDITION_KEYS.has(k)) problems.push({ path: `${path}.${k}`, message: `unknown key "${k}"` });
  }
  const names: Predicate[] = [];
  for (const key of NAME_KEYS) {
    if (!Object.hasOwn(node, key) || options.omit?.has(key)) continue;
    names.push(compileName(key, node[key], `${path}.${key}`, problems));
  }
  const rest: Predicate[] = [];
  const hasLeaf = Object.hasOwn(node, 'field') || Object.hasOwn(node, 'op') || Object.hasOwn(node, 'value');
  const { closedAs, onClosed, restrictive } = options;
  if (hasLeaf) rest.push(compileLeaf(node, path, problems, closedAs, onClosed, restrictive));
  else if (Object.hasOwn(node, 'flags')) {
    problems.push({ path: `${path}.flags`, message: 'flags is only allowed with op matches' });
  }
  for (const group of ['all', 'any'] as const) {
    if (!Object.hasOwn(node, group)) continue;
    const items = node[group];
    const at = `${path}.${group}`;
    if (!Array.isArray(items) || items.length === 0) {
      problems.push({ path: at, message: `${group} needs a non-empty list of conditions` });
      continue;
    }
    const parts = items.map((item, i) =>
      compileCondition(item, `${at}[${i}]`, problems, depth + 1, { closedAs, onClosed, restrictive }),
    );
    rest.push(group === 'all' ? and(parts) : or(parts));
  }
  if (Object.hasOwn(node, 'not')) {
    const inner = compileCondition(node.not, `${path}.not`, problems, depth + 1, {
      closedAs: closedAs === undefined ? undefined : !closedAs,
      onClosed,
      restrictive: restrictive === undefined ? undefined : !restrictive,
    });
    rest.push((a) => !inner(a));
  }
  // Cheap name checks run first.
  return and([...names, ...rest]);
}
