import type { DetectionCategory, DetectOptions, Finding } from '../detect/index.js';
import type { CompiledPolicy, EffectiveFlags } from '../policy/index.js';

export type FindingAction = 'allow' | 'redact' | 'block';

/**
 * What the org's detectors (under the merged flags) do with findings in model output. Rules about
 * the call itself were decided on the input; output is governed by the detectors only: lockdown
 * blocks any PII or secret, `block` blocks, `redact` masks, `flag`/`off` let it through; observe
 * and warn never change output (they only record).
 */
export interface OutputGuard {
  /** True when output must be held and scanned before release (enforce/lockdown with an active detector). */
  readonly active: boolean;
  readonly detectOptions: DetectOptions;
  classify(f: Finding): FindingAction;
}

function contentAction(action: string, types: ReadonlySet<string> | null, f: Finding): FindingAction {
  if (types !== null && !types.has(f.type)) return 'allow';
  return action === 'block' ? 'block' : action === 'redact' ? 'redact' : 'allow';
}

export function outputGuard(policy: CompiledPolicy, flags: EffectiveFlags): OutputGuard {
  const mode = flags.mode;
  const enforcing = mode === 'enforce' || mode === 'lockdown';
  const lockdown = mode === 'lockdown';
  const d = policy.detectors;
  const piiOn = lockdown || flags.pii === 'block' || flags.pii === 'redact';
  const secretsOn = lockdown || flags.secrets === 'block' || flags.secrets === 'redact';
  const unicodeOn = d.unicode.action !== 'off';
  const active = enforcing && (piiOn || secretsOn || unicodeOn);
  return {
    active,
    detectOptions: { pii: piiOn, secrets: secretsOn, injection: false, unicode: unicodeOn },
    classify(f) {
      if (!enforcing) return 'allow';
      switch (f.category) {
        case 'pii':
          return lockdown ? 'block' : contentAction(flags.pii, d.pii.types, f);
        case 'secret':
          return lockdown ? 'block' : contentAction(flags.secrets, d.secrets.types, f);
        case 'unicode':
          return unicodeOn ? 'redact' : 'allow';
        default:
          return 'allow';
      }
    },
  };
}

export const REDACTABLE: readonly DetectionCategory[] = ['pii', 'secret', 'unicode'];
