// The policy used when an org has none published: allow by default, enforce, standard detectors.

import { compilePolicy } from './compile.js';
import type { CompiledPolicy } from './types.js';

export const DEFAULT_RULE_SET = Object.freeze({
  mode: 'enforce',
  default: 'allow',
  detectors: {
    pii: { action: 'redact' },
    secrets: { action: 'redact' },
    injection: { action: 'block', threshold: 0.8 },
    unicode: { action: 'flag' },
  },
  rules: [],
});

function build(): CompiledPolicy {
  const r = compilePolicy(DEFAULT_RULE_SET);
  if (!r.ok) throw new Error(`built-in default policy is invalid: ${JSON.stringify(r.problems)}`);
  return r.policy;
}

export const DEFAULT_POLICY: CompiledPolicy = build();
