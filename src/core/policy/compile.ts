// Validates a rule set (every problem, with its path) and compiles it once into indexed closures.

import { oneOf, readTypes, unknownKeys } from './checks.js';
import { compileCondition, isRecord, readNames, typeName } from './conditions.js';
import { compileDetectors } from './detectors-config.js';
import { isGlob } from './glob.js';
import {
  BEHAVIOR_TYPES,
  type CompiledPolicy,
  type CompiledRule,
  EFFECTS,
  type Effect,
  type FailClosedCondition,
  MODES,
  type Mode,
  type Problem,
  type RedactCategory,
  type RuleInfo,
  type Tier,
  type TypeBucket,
  UNLOCKABLE_FLAGS,
  type UnlockableFlag,
} from './types.js';

export const MAX_RULES = 10_000;
export const MAX_PROBLEMS = 1_000;
const RULE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const TOP_KEYS = new Set(['mode', 'default', 'detectors', 'unlocked', 'budget', 'rules']);
const RULE_KEYS = new Set(['id', 'when', 'then', 'reason', 'tier', 'enabled', 'redact']);
const REDACT_CATEGORIES: readonly RedactCategory[] = ['pii', 'secret'];
const KNOWN_TYPES: ReadonlySet<string> = new Set(BEHAVIOR_TYPES);

const EFFECT_WORDS: Readonly<Record<Effect, string>> = {
  allow: 'allowed',
  redact: 'redacted',
  require_approval: 'approval required',
  block: 'blocked',
};

export function rankOf(effect: Effect, tier: Tier | undefined): number {
  switch (effect) {
    case 'allow':
      return 0;
    case 'redact':
      return 1;
    case 'require_approval':
      return tier === 'signed' ? 3 : 2;
    default:
      return 4;
  }
}

function compileUnlocked(node: unknown, p: Problem[]): Set<UnlockableFlag> {
  const out = new Set<UnlockableFlag>();
  if (node === undefined) return out;
  if (!Array.isArray(node)) {
    p.push({ path: 'unlocked', message: `must be a list of ${UNLOCKABLE_FLAGS.join(', ')}` });
    return out;
  }
  node.forEach((f, i) => {
    const flag = oneOf<UnlockableFlag>(f, UNLOCKABLE_FLAGS, `unlocked[${i}]`, p);
    if (flag) out.add(flag);
  });
  return out;
}

function compileBudget(node: unknown, p: Problem[]): number | null {
  if (node === undefined) return null;
  if (!isRecord(node)) {
    p.push({ path: 'budget', message: 'must be an object like {max_usd_per_call: 5}' });
    return null;
  }
  unknownKeys(node, new Set(['max_usd_per_call']), 'budget', p);
  const v = node.max_usd_per_call;
  if (v === undefined) return null;
  if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return v;
  p.push({ path: 'budget.max_usd_per_call', message: 'must be a number ≥ 0 (USD)' });
  return null;
}

interface Indexed {
  rule: CompiledRule;
  types: ReadonlySet<string> | null; // null: every type
  tools: readonly string[] | null; // exact tool names; null: any tool (checked by the predicate)
}

function compileRule(
  node: unknown,
  order: number,
  path: string,
  p: Problem[],
  info: RuleInfo[],
  stored: boolean,
  failClosed: FailClosedCondition[],
) {
  if (!isRecord(node)) {
    p.push({ path, message: `rule must be an object, got ${typeName(node)}` });
    return null;
  }
  const start = p.length;
  unknownKeys(node, RULE_KEYS, path, p);
  const id = node.id;
  if (typeof id !== 'string' || !RULE_ID.test(id) || id === 'default') {
    p.push({
      path: `${path}.id`,
      message:
        'id must be 1-128 letters, digits, ".", "_" or "-" (starting with a letter or digit), not "default"',
    });
  }
  const effect = oneOf<Effect>(node.then, EFFECTS, `${path}.then`, p);
  let tier: Tier | undefined;
  if (Object.hasOwn(node, 'tier')) {
    if (effect !== undefined && effect !== 'require_approval') {
      p.push({ path: `${path}.tier`, message: 'tier is only allowed with then: require_approval' });
    }
    tier = oneOf<Tier>(node.tier, ['standard', 'signed'], `${path}.tier`, p);
  }
  let redact = REDACT_CATEGORIES;
  if (Object.hasOwn(node, 'redact')) {
    if (effect !== undefined && effect !== 'redact') {
      p.push({ path: `${path}.redact`, message: 'redact is only allowed with then: redact' });
    }
    const list = node.redact;
    if (!Array.isArray(list) || list.length === 0) {
      p.push({ path: `${path}.redact`, message: 'must be a non-empty list of pii, secret' });
    } else {
      const cats = list.map((c, i) => oneOf<RedactCategory>(c, REDACT_CATEGORIES, `${path}.redact[${i}]`, p));
      redact = REDACT_CATEGORIES.filter((c) => cats.includes(c));
    }
  }
  const reason = node.reason ?? '';
  if (typeof reason !== 'string' || reason.length > 1024) {
    p.push({ path: `${path}.reason`, message: 'reason must be a string of at most 1024 characters' });
  }
  const enabled = node.enabled ?? true;
  if (typeof enabled !== 'boolean')
    p.push({ path: `${path}.enabled`, message: 'enabled must be true or false' });

  // The top-level type and exact tool names go to the index, so the predicate skips them.
  const when = node.when ?? {};
  let types: ReadonlySet<string> | null = null;
  let tools: readonly string[] | null = null;
  const omit = new Set<string>();
  if (isRecord(when) && Object.hasOwn(when, 'type')) {
    omit.add('type');
    types = readTypes(when, 'type', `${path}.when.type`, p);
    for (const t of types ?? []) {
      if (!KNOWN_TYPES.has(t)) p.push({ path: `${path}.when.type`, message: `unknown behavior type "${t}"` });
    }
  }
  if (isRecord(when) && Object.hasOwn(when, 'tool')) {
    const names = readNames(when.tool, `${path}.when.tool`, []);
    if (names && !names.some(isGlob)) {
      tools = names;
      omit.add('tool');
    }
  }
  // A stored version's regex the linear-time engine refuses fails closed: a restrictive rule
  // matches, an allow rule does not.
  const closedAs = stored && effect !== undefined ? effect !== 'allow' : undefined;
  const onClosed = (at: string, reason: string, takenAs: boolean): void => {
    // A disabled rule never matches: its conditions fail nothing.
    if (typeof id === 'string' && effect !== undefined && enabled !== false)
      failClosed.push(Object.freeze({ rule_id: id, effect, path: at, reason, taken_as: takenAs }));
  };
  const restrictive = effect === undefined ? undefined : effect !== 'allow';
  const test = compileCondition(when, `${path}.when`, p, 0, { omit, closedAs, onClosed, restrictive });
  if (typeof id === 'string' && effect !== undefined) {
    info.push({
      id,
      effect,
      reason: typeof reason === 'string' ? reason : '',
      tier,
      enabled: enabled !== false,
    });
  }
  if (p.length > start || typeof id !== 'string' || effect === undefined || enabled === false) return null;
  const rule: CompiledRule = Object.freeze({
    id,
    effect,
    reason: (reason as string) || `${EFFECT_WORDS[effect]} by rule ${id}`,
    tier: effect === 'require_approval' ? (tier ?? 'standard') : undefined,
    redact: effect === 'redact' ? redact : [],
    redactMask:
      effect === 'redact' ? (redact.includes('pii') ? 1 : 0) | (redact.includes('secret') ? 2 : 0) : 0,
    order,
    rank: rankOf(effect, tier),
    test,
  });
  return { rule, types, tools } satisfies Indexed;
}

function byOrder(a: CompiledRule, b: CompiledRule): number {
  return a.order - b.order;
}

/** The detectors whose findings the (valid) rules read: every `field: "detections.<kind>…"`. */
function detectionsRead(node: unknown): ReadonlySet<'pii' | 'secrets' | 'injection' | 'unicode'> {
  const kinds = new Set<'pii' | 'secrets' | 'injection' | 'unicode'>();
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) for (const x of v) walk(x);
    else if (isRecord(v)) {
      const field = v.field;
      if (typeof field === 'string' && field.startsWith('detections.')) {
        const kind = field.split('.')[1];
        if (kind === 'pii' || kind === 'secrets' || kind === 'injection' || kind === 'unicode')
          kinds.add(kind);
      }
      for (const k in v) walk(v[k]);
    }
  };
  walk(node);
  return kinds;
}

function bucketFor(type: string | null, rules: readonly Indexed[]): TypeBucket {
  const applicable = rules.filter((r) => r.types === null || (type !== null && r.types.has(type)));
  const anyTool = applicable.filter((r) => r.tools === null).map((r) => r.rule);
  const byTool = new Map<string, CompiledRule[]>();
  for (const r of applicable) {
    for (const tool of r.tools ?? []) {
      let list = byTool.get(tool);
      if (!list) {
        list = [...anyTool];
        byTool.set(tool, list);
      }
      if (!list.includes(r.rule)) list.push(r.rule);
    }
  }
  for (const list of byTool.values()) list.sort(byOrder);
  return Object.freeze({ byTool, anyTool: Object.freeze(anyTool) });
}

export type CompileResult = { ok: true; policy: CompiledPolicy } | { ok: false; problems: Problem[] };

export interface CompileOptions {
  /**
   * The rule set is a stored, published version: a `matches` regex that an older release accepted
   * and the linear-time engine refuses fails closed (see ConditionOptions.closedAs) instead of
   * making the version fail to compile. New and draft rule sets are compiled without it.
   */
  stored?: boolean;
}

/** Validates and compiles a parsed rule set. Invalid sets return every problem found. */
export function compilePolicy(ruleSet: unknown, options: CompileOptions = {}): CompileResult {
  const p: Problem[] = [];
  if (!isRecord(ruleSet)) {
    return {
      ok: false,
      problems: [{ path: '', message: `rule set must be an object, got ${typeName(ruleSet)}` }],
    };
  }
  unknownKeys(ruleSet, TOP_KEYS, '', p);
  const mode: Mode = Object.hasOwn(ruleSet, 'mode')
    ? (oneOf<Mode>(ruleSet.mode, MODES, 'mode', p) ?? 'enforce')
    : 'enforce';
  const def = Object.hasOwn(ruleSet, 'default')
    ? (oneOf<'allow' | 'block'>(ruleSet.default, ['allow', 'block'], 'default', p) ?? 'allow')
    : 'allow';
  const detectors = compileDetectors(ruleSet.detectors, p);
  const unlocked = compileUnlocked(ruleSet.unlocked, p);
  const budget = compileBudget(ruleSet.budget, p);

  const rulesNode = ruleSet.rules;
  const indexed: Indexed[] = [];
  const info: RuleInfo[] = [];
  const failClosed: FailClosedCondition[] = [];
  if (!Array.isArray(rulesNode)) {
    p.push({ path: 'rules', message: `rules must be a list (may be empty), got ${typeName(rulesNode)}` });
  } else if (rulesNode.length > MAX_RULES) {
    p.push({ path: 'rules', message: `${rulesNode.length} rules; at most ${MAX_RULES}` });
  } else {
    const seen = new Map<string, number>();
    rulesNode.forEach((node, i) => {
      const path = `rules[${i}]`;
      if (isRecord(node) && typeof node.id === 'string') {
        const first = seen.get(node.id);
        if (first !== undefined) {
          p.push({
            path: `${path}.id`,
            message: `duplicate rule id "${node.id}" (first at rules[${first}])`,
          });
        } else seen.set(node.id, i);
      }
      const r = compileRule(node, i, path, p, info, options.stored === true, failClosed);
      if (r) indexed.push(r);
    });
  }
  if (p.length > 0) {
    if (p.length > MAX_PROBLEMS) {
      const more = p.length - MAX_PROBLEMS;
      p.length = MAX_PROBLEMS;
      p.push({ path: '', message: `and ${more} more problems` });
    }
    return { ok: false, problems: p };
  }
  const index = new Map<string, TypeBucket>();
  for (const type of BEHAVIOR_TYPES) index.set(type, bucketFor(type, indexed));
  index.set('*', bucketFor(null, indexed));
  const policy: CompiledPolicy = Object.freeze({
    mode,
    default: def,
    detectors: Object.freeze(detectors),
    unlocked,
    budget_usd: budget,
    rules: Object.freeze(info),
    ruleDetections: detectionsRead(rulesNode),
    index,
    failClosed: Object.freeze(failClosed),
  });
  return { ok: true, policy };
}
