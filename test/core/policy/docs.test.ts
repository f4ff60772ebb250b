// Keeps docs/policy.md true: every YAML rule set in it compiles and decides as the text says.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { INJECTION_TYPES, PII_TYPES, SECRET_TYPES, UNICODE_TYPES } from '../../../src/core/detect/index.js';
import { compilePolicy, evaluate, parseRuleSetText } from '../../../src/core/policy/index.js';
import { action, compileOk, expectDecision, THEN } from './helpers.js';

const doc = readFileSync(join(process.cwd(), 'docs/policy.md'), 'utf8');
const firstLine = (text: string) => text.slice(0, text.indexOf('\n'));
const blocks = [...doc.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');

t.test('every YAML block parses, and every rule set or rule list in it compiles', async (t) => {
  t.ok(blocks.length >= 4, `found ${blocks.length} YAML blocks`);
  for (const text of blocks) {
    const parsed = parseRuleSetText(text);
    t.equal(parsed.ok, true, firstLine(text));
    if (!parsed.ok) continue;
    const value = parsed.value;
    const ruleSet = Array.isArray(value) ? { rules: value } : value;
    if (typeof ruleSet !== 'object' || ruleSet === null || !('rules' in ruleSet)) {
      // A bare condition: it must compile inside a rule.
      const r = compilePolicy({ rules: [{ id: 'doc', ...(value as object), [THEN]: 'block' }] });
      t.same(r.ok ? [] : r.problems, [], firstLine(text));
      continue;
    }
    const r = compilePolicy(ruleSet);
    t.same(r.ok ? [] : r.problems, [], firstLine(text));
  }
});

t.test('the complete example decides as documented', async (t) => {
  const first = parseRuleSetText(blocks[0] ?? '');
  if (!first.ok) throw new Error('first block must parse');
  const p = compileOk(first.value);
  expectDecision(t, evaluate(p, action({ tool: 'shell.exec' })), {
    outcome: 'block',
    reason: 'shell is disabled',
  });
  expectDecision(
    t,
    evaluate(p, action({ tool: 'payments.transfer', args: { amount: 5000, currency: 'EUR' } })),
    {
      outcome: 'needs_approval',
      tier: 'signed',
      rule_id: 'big-transfers',
    },
  );
  expectDecision(t, evaluate(p, action({ tool: 'payments.refund', args: { currency: 'GBP' } })), {
    outcome: 'block',
    rule_id: 'no-foreign-currency',
  });
  expectDecision(t, evaluate(p, action({ type: 'LLM_CALL', provider: 'openai' })), { redact: ['pii'] });
  expectDecision(
    t,
    evaluate(p, action({ type: 'SYSTEM_OF_RECORD_WRITE', payload: { target: 'PROD_main' } })),
    {
      outcome: 'needs_approval',
    },
  );
  t.equal(p.budget_usd, 2.5);
});

t.test('the amount-check recipe catches non-numbers', async (t) => {
  const block = blocks.find((b) => b.includes('amount-check')) ?? '';
  const parsed = parseRuleSetText(block);
  if (!parsed.ok) throw new Error('recipe must parse');
  const p = compileOk({ rules: parsed.value });
  const outcome = (amount: unknown) =>
    evaluate(p, action({ tool: 'payments.transfer', args: { amount, currency: 'EUR' } })).outcome;
  t.equal(outcome(5000), 'needs_approval');
  t.equal(outcome('5000'), 'needs_approval');
  t.equal(outcome(undefined), 'needs_approval');
  t.equal(outcome(10), 'allow');
  t.equal(evaluate(p, action({ tool: 'payments.refund', args: { currency: 7 } })).outcome, 'block');
});

t.test('the detector type table lists every type the detectors report', async (t) => {
  for (const type of [...PII_TYPES, ...SECRET_TYPES, ...INJECTION_TYPES, ...UNICODE_TYPES]) {
    t.ok(doc.includes(`\`${type}\``), type);
  }
});
