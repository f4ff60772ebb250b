// Shared helpers for the policy tests.

import type { Test } from 'tap';
import {
  type Action,
  type CompiledPolicy,
  compilePolicy,
  type Decision,
  type DetectionSummary,
  evaluate,
} from '../../../src/core/policy/index.js';

/**
 * The rule format's key is `then`; written through this constant so the linter's thenable check
 * (aimed at promise-like objects) does not fire on every rule literal. A string `then` is not callable,
 * so rule objects are never treated as thenables.
 */
export const THEN = 'then';

export function compileOk(ruleSet: unknown): CompiledPolicy {
  const r = compilePolicy(ruleSet);
  if (!r.ok) throw new Error(`expected a valid policy: ${JSON.stringify(r.problems)}`);
  return r.policy;
}

export function problemsOf(ruleSet: unknown): { path: string; message: string }[] {
  const r = compilePolicy(ruleSet);
  if (r.ok) throw new Error('expected an invalid policy');
  return r.problems;
}

export const NO_DETECTIONS: DetectionSummary = { pii: [], secrets: [], injection: {}, unicode: [] };

export function detections(d: Partial<DetectionSummary>): DetectionSummary {
  return { ...NO_DETECTIONS, ...d };
}

export function action(over: Partial<Action> = {}): Action {
  return { type: 'TOOL_CALL', agent_id: 'agent-1', ...over };
}

/** True when a one-rule policy `when: cond → block` matches the action. */
export function holds(cond: unknown, a: Action): boolean {
  const policy = compileOk({ detectors: offDetectors, rules: [{ id: 'r', when: cond, [THEN]: 'block' }] });
  return evaluate(policy, a).effect === 'block';
}

export const offDetectors = {
  pii: { action: 'off' },
  secrets: { action: 'off' },
  injection: { action: 'off' },
  unicode: { action: 'off' },
};

/** Checks the listed decision fields exactly (arrays by value: t.match would accept extra items). */
export function expectDecision(t: Test, d: Decision, want: Record<string, unknown>, msg = ''): void {
  const got: Record<string, unknown> = { ...d };
  for (const [k, v] of Object.entries(want)) {
    const label = msg ? `${msg}: ${k}` : k;
    if (v instanceof RegExp) t.match(got[k], v, label);
    else if (Array.isArray(v)) t.same(got[k], v, label);
    else t.equal(got[k], v, label);
  }
}
