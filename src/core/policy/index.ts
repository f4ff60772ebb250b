// Policy engine: rule sets compiled once into indexed closures, evaluated synchronously.

export { type CompileOptions, type CompileResult, compilePolicy, MAX_RULES } from './compile.js';
export { OPS, type Op } from './conditions.js';
export { DEFAULT_POLICY, DEFAULT_RULE_SET } from './default-policy.js';
export { candidates, evaluate, PSEUDO_IDS } from './evaluate.js';
export { type FlagsResult, type MergeResult, mergeFlags, parseFlags, policyFlags } from './flags.js';
export { parseRuleSetText, type TextResult } from './parse-text.js';
export { MAX_REGEX_LENGTH } from './regex-safety.js';
export {
  type Action,
  BEHAVIOR_TYPES,
  type BehaviorType,
  type CompiledPolicy,
  type ContentAction,
  type Decision,
  type DetectionSummary,
  type Effect,
  type EffectiveFlags,
  type FailClosedCondition,
  MODES,
  type Mode,
  type Problem,
  type RedactCategory,
  type RuleInfo,
  type ServiceFlags,
  type SignalAction,
  type Tier,
  UNLOCKABLE_FLAGS,
  type UnlockableFlag,
} from './types.js';
