// Public data types of the policy engine. Plain data in, plain data out.

export const BEHAVIOR_TYPES = [
  'LLM_CALL',
  'EMBEDDING_CALL',
  'TOOL_CALL',
  'TOOL_LIST',
  'TOOL_RESULT',
  'SYSTEM_OF_RECORD_WRITE',
  'STATE_TRANSITION',
  'PROMPT_SUBMIT',
  'CREDENTIAL_ACCESS',
  'CODE_EXEC',
  'SKILL_LOAD',
] as const;
export type BehaviorType = (typeof BEHAVIOR_TYPES)[number];

/** What the detectors found in an action's text (types and scores only, never values). */
export interface DetectionSummary {
  pii: readonly string[];
  secrets: readonly string[];
  injection: Readonly<Record<string, number>>;
  unicode: readonly string[];
}

export interface Action {
  type: BehaviorType;
  agent_id: string;
  tool?: string;
  server?: string;
  model?: string;
  provider?: string;
  args?: unknown;
  payload?: unknown;
  detections?: DetectionSummary;
}

export const MODES = ['observe', 'warn', 'enforce', 'lockdown'] as const;
export type Mode = (typeof MODES)[number];

export const EFFECTS = ['allow', 'redact', 'require_approval', 'block'] as const;
export type Effect = (typeof EFFECTS)[number];

export type Tier = 'standard' | 'signed';
export type RedactCategory = 'pii' | 'secret';

export interface Decision {
  /** What actually happens once the mode is applied. */
  outcome: 'allow' | 'block' | 'needs_approval';
  /** The combined effect before the mode (what enforce would do). */
  effect: Effect;
  mode: Mode;
  /** Deciding rule id or pseudo id ('detector:pii', 'flags:tools', 'default', ...); null: nothing matched. */
  rule_id: string | null;
  reason: string;
  tier?: Tier;
  /** Categories to redact before the provider sees the text (empty in observe and warn). */
  redact: readonly RedactCategory[];
  alert: boolean;
  /** observe / warn: what enforce would have done. */
  would_outcome?: 'block' | 'needs_approval';
  /** Ids of every matching rule and pseudo rule, in evaluation order. */
  matched: readonly string[];
}

export interface Problem {
  path: string;
  message: string;
}

/** pii / secrets detector actions, ordered loosest to strictest. */
export const CONTENT_ACTIONS = ['off', 'flag', 'redact', 'block'] as const;
export type ContentAction = (typeof CONTENT_ACTIONS)[number];
/** injection / unicode detector actions (their findings cannot be redacted). */
export const SIGNAL_ACTIONS = ['off', 'flag', 'block'] as const;
export type SignalAction = (typeof SIGNAL_ACTIONS)[number];

export interface ContentDetector {
  readonly action: ContentAction;
  /** When set, only these detected types trigger the action. */
  readonly types: ReadonlySet<string> | null;
}
export interface InjectionDetector {
  readonly action: SignalAction;
  readonly threshold: number;
}
export interface UnicodeDetector {
  readonly action: SignalAction;
  readonly types: ReadonlySet<string> | null;
}
export interface DetectorSettings {
  readonly pii: ContentDetector;
  readonly secrets: ContentDetector;
  readonly injection: InjectionDetector;
  readonly unicode: UnicodeDetector;
}

/** Flags an org may let agents loosen through X-Service-Flags. */
export const UNLOCKABLE_FLAGS = ['mode', 'pii', 'secrets', 'budget'] as const;
export type UnlockableFlag = (typeof UNLOCKABLE_FLAGS)[number];

/** A compiled `*` glob list: exact names in a set, globs tested in order. */
export interface NameMatcher {
  readonly patterns: readonly string[];
  test(name: string): boolean;
}

export type Predicate = (action: Action) => boolean;

export interface CompiledRule {
  readonly id: string;
  readonly effect: Effect;
  readonly reason: string;
  readonly tier: Tier | undefined;
  readonly redact: readonly RedactCategory[];
  /** `redact` as bits: 1 pii, 2 secret. */
  readonly redactMask: number;
  /** Position in the rule set; lower wins a tie of equal severity. */
  readonly order: number;
  /** Severity rank: allow 0, redact 1, require_approval 2 (standard) / 3 (signed), block 4. */
  readonly rank: number;
  /** The `when` condition minus the parts the index already guarantees. */
  readonly test: Predicate;
}

/** Candidate rules for one behavior type, merged with the untyped rules, in document order. */
export interface TypeBucket {
  readonly byTool: ReadonlyMap<string, readonly CompiledRule[]>;
  readonly anyTool: readonly CompiledRule[];
}

export interface RuleInfo {
  readonly id: string;
  readonly effect: Effect;
  readonly reason: string;
  readonly tier: Tier | undefined;
  readonly enabled: boolean;
}

export interface CompiledPolicy {
  readonly mode: Mode;
  readonly default: 'allow' | 'block';
  readonly detectors: DetectorSettings;
  readonly unlocked: ReadonlySet<UnlockableFlag>;
  /** Org cap on the cost of one call in USD, or null for none. */
  readonly budget_usd: number | null;
  readonly rules: readonly RuleInfo[];
  /**
   * Detectors some rule reads (`detections.pii`, …): they run whatever their own action is (and
   * whatever a flag sets it to), or those rules could never match.
   */
  readonly ruleDetections: ReadonlySet<'pii' | 'secrets' | 'injection' | 'unicode'>;
  /** Index: behavior type (or '*' for an unknown type: untyped rules only) → candidates. Internal. */
  readonly index: ReadonlyMap<string, TypeBucket>;
  /**
   * Conditions of a stored version whose regex the linear-time engine refuses, in rule-set order:
   * each fails closed (see CompileOptions.stored). Empty for every rule set compiled otherwise.
   */
  readonly failClosed: readonly FailClosedCondition[];
}

/** A condition that fails closed, as the operator is told of it. */
export interface FailClosedCondition {
  readonly rule_id: string;
  readonly effect: Effect;
  /** Where the refused regex is: `rules[2].when.all[0].value`. */
  readonly path: string;
  /** Why the engine refuses it. */
  readonly reason: string;
  /** The value the condition takes instead (true: it holds; false under a `not` or in an allow rule). */
  readonly taken_as: boolean;
}

/** Parsed X-Service-Flags header (each key optional). */
export interface ServiceFlags {
  mode?: Mode;
  pii?: ContentAction;
  secrets?: ContentAction;
  tools_allow?: readonly string[];
  tools_deny?: readonly string[];
  budget_usd?: number;
}

/** Flags merged under the org policy: the values evaluate() applies for that policy. */
export interface EffectiveFlags {
  readonly mode: Mode;
  readonly pii: ContentAction;
  readonly secrets: ContentAction;
  readonly tools_allow: NameMatcher | null;
  readonly tools_deny: NameMatcher | null;
  /** Max USD per call (the smaller of org and flag unless unlocked), or null for none. */
  readonly budget_usd: number | null;
}
