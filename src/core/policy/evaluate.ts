// Decides one action: candidate rules from the index, detector effects, flag gates, the default,
// combined by severity (block > require_approval > redact > allow), then the mode applied.

import type {
  Action,
  CompiledPolicy,
  CompiledRule,
  ContentAction,
  Decision,
  DetectionSummary,
  Effect,
  EffectiveFlags,
  RedactCategory,
  TypeBucket,
} from './types.js';

const EMPTY: readonly string[] = Object.freeze([]);
const REDACT_SETS: readonly (readonly RedactCategory[])[] = [
  Object.freeze([]),
  Object.freeze(['pii']),
  Object.freeze(['secret']),
  Object.freeze(['pii', 'secret']),
];
const RANK_EFFECT: readonly Effect[] = ['allow', 'redact', 'require_approval', 'require_approval', 'block'];
const BLOCK = 4;
const CONTENT_RANK: Readonly<Record<ContentAction, number>> = { off: -1, flag: 0, redact: 1, block: BLOCK };

// Non-rule deciders, in the order they are considered (a rule wins a tie, then these in order).
type Source = 0 | 1 | 2 | 3 | 4 | 5 | 6;
const RULE: Source = 0;
const PII: Source = 1;
const SECRETS: Source = 2;
const INJECTION: Source = 3;
const UNICODE: Source = 4;
const TOOLS: Source = 5;
const DEFAULT: Source = 6;

export const PSEUDO_IDS = Object.freeze({
  pii: 'detector:pii',
  secrets: 'detector:secrets',
  injection: 'detector:injection',
  unicode: 'detector:unicode',
  tools: 'flags:tools',
  default: 'default',
} as const);

/** Candidate rules for an action: its type's bucket, narrowed by exact tool when indexed. */
export function candidates(policy: CompiledPolicy, type: string, tool: string | undefined) {
  const bucket = (policy.index.get(type) ?? policy.index.get('*')) as TypeBucket;
  if (tool === undefined) return bucket.anyTool;
  return bucket.byTool.get(tool) ?? bucket.anyTool;
}

function hits(found: readonly string[], only: ReadonlySet<string> | null): boolean {
  if (found.length === 0) return false;
  if (only === null) return true;
  for (const f of found) if (only.has(f)) return true;
  return false;
}

function listed(found: readonly string[], only: ReadonlySet<string> | null): string {
  return (only === null ? found : found.filter((f) => only.has(f))).join(', ');
}

function injectionHit(scores: Readonly<Record<string, number>>, threshold: number): boolean {
  for (const k in scores) {
    const v = scores[k];
    if (typeof v === 'number' && v >= threshold) return true;
  }
  return false;
}

function injectionReason(scores: Readonly<Record<string, number>>, threshold: number): string {
  let top = '';
  let max = -1;
  for (const k in scores) {
    const v = scores[k];
    if (typeof v === 'number' && v > max) {
      max = v;
      top = k;
    }
  }
  return `prompt injection detected (${top} score ${max} ≥ ${threshold})`;
}

function pseudoReason(
  source: Source,
  policy: CompiledPolicy,
  d: DetectionSummary | undefined,
  lock: boolean,
) {
  const det = policy.detectors;
  switch (source) {
    case PII:
      return `personal data detected: ${listed(d?.pii ?? EMPTY, lock ? null : det.pii.types)}`;
    case SECRETS:
      return `secret detected: ${listed(d?.secrets ?? EMPTY, lock ? null : det.secrets.types)}`;
    case INJECTION:
      return injectionReason(d?.injection ?? {}, det.injection.threshold);
    case UNICODE:
      return `suspicious unicode detected: ${listed(d?.unicode ?? EMPTY, lock ? null : det.unicode.types)}`;
    case TOOLS:
      return 'tool not permitted by X-Service-Flags';
    default:
      return 'no rule allows this action (default: block)';
  }
}

const SOURCE_IDS = [
  '',
  PSEUDO_IDS.pii,
  PSEUDO_IDS.secrets,
  PSEUDO_IDS.injection,
  PSEUDO_IDS.unicode,
  PSEUDO_IDS.tools,
  PSEUDO_IDS.default,
] as const;

/** Pure and synchronous; never throws on well-typed input. */
export function evaluate(policy: CompiledPolicy, action: Action, flags?: EffectiveFlags): Decision {
  const mode = flags === undefined ? policy.mode : flags.mode;
  const lockdown = mode === 'lockdown';
  const tool = action.tool;

  let bestRank = -1;
  let bestRule: CompiledRule | null = null;
  let bestSource: Source = RULE;
  let matched: string[] | null = null;
  let redactMask = 0;
  let permitted = false;
  let flagged = false;

  const list = candidates(policy, action.type, tool);
  for (let i = 0; i < list.length; i++) {
    const rule = list[i] as CompiledRule;
    if (!rule.test(action)) continue;
    if (matched === null) matched = [rule.id];
    else matched.push(rule.id);
    if (rule.rank > bestRank) {
      bestRank = rule.rank;
      bestRule = rule;
    }
    redactMask |= rule.redactMask;
    if (rule.effect === 'allow' || rule.effect === 'require_approval') permitted = true;
  }

  const det = action.detections;
  if (det !== undefined) {
    const d = policy.detectors;
    for (let source: Source = PII; source <= UNICODE; source = (source + 1) as Source) {
      let rank: number;
      let hit: boolean;
      if (source === PII || source === SECRETS) {
        const pii = source === PII;
        const setting = pii ? d.pii : d.secrets;
        const act = flags === undefined ? setting.action : pii ? flags.pii : flags.secrets;
        rank = lockdown ? BLOCK : CONTENT_RANK[act];
        hit = rank >= 0 && hits(pii ? det.pii : det.secrets, lockdown ? null : setting.types);
        if (hit && act === 'redact' && !lockdown) redactMask |= pii ? 1 : 2;
      } else if (source === INJECTION) {
        rank = lockdown ? BLOCK : CONTENT_RANK[d.injection.action];
        hit = rank >= 0 && injectionHit(det.injection, d.injection.threshold);
      } else {
        rank = lockdown ? BLOCK : CONTENT_RANK[d.unicode.action];
        hit = rank >= 0 && hits(det.unicode, lockdown ? null : d.unicode.types);
      }
      if (!hit) continue;
      if (rank === 0) flagged = true;
      const id = SOURCE_IDS[source];
      if (matched === null) matched = [id];
      else matched.push(id);
      if (rank > bestRank) {
        bestRank = rank;
        bestRule = null;
        bestSource = source;
      }
    }
  }

  if (flags !== undefined && tool !== undefined) {
    const deny = flags.tools_deny;
    const allow = flags.tools_allow;
    if (deny?.test(tool) || (allow !== null && !allow.test(tool))) {
      if (matched === null) matched = [SOURCE_IDS[TOOLS]];
      else matched.push(SOURCE_IDS[TOOLS]);
      if (BLOCK > bestRank) {
        bestRank = BLOCK;
        bestRule = null;
        bestSource = TOOLS;
      }
    }
  }

  if (policy.default === 'block' && !permitted) {
    if (matched === null) matched = [SOURCE_IDS[DEFAULT]];
    else matched.push(SOURCE_IDS[DEFAULT]);
    if (BLOCK > bestRank) {
      bestRank = BLOCK;
      bestRule = null;
      bestSource = DEFAULT;
    }
  }

  const effect = bestRank < 0 ? 'allow' : (RANK_EFFECT[bestRank] as Effect);
  let ruleId: string | null = null;
  let reason = '';
  if (bestRule !== null) {
    ruleId = bestRule.id;
    reason = bestRule.reason;
  } else if (bestRank >= 0) {
    ruleId = SOURCE_IDS[bestSource];
    reason = pseudoReason(bestSource, policy, det, lockdown);
  }
  const enforced = effect === 'block' ? 'block' : effect === 'require_approval' ? 'needs_approval' : 'allow';
  const passive = mode === 'observe' || mode === 'warn';
  return {
    outcome: passive ? 'allow' : enforced,
    effect,
    mode,
    rule_id: ruleId,
    reason,
    tier: effect === 'require_approval' ? (bestRule?.tier ?? 'standard') : undefined,
    redact: passive
      ? (REDACT_SETS[0] as readonly RedactCategory[])
      : (REDACT_SETS[redactMask] as readonly RedactCategory[]),
    alert: mode !== 'observe' && (flagged || (mode === 'warn' && effect !== 'allow')),
    would_outcome: passive && enforced !== 'allow' ? enforced : undefined,
    matched: matched ?? EMPTY,
  };
}
