import t from 'tap';
import { compilePolicy, evaluate, parseRuleSetText } from '../../../src/core/policy/index.js';
import { action } from './helpers.js';

const YAML = `
mode: enforce
detectors:
  pii: {action: redact}
  injection: {action: block, threshold: 0.8}
rules:
  - {id: no-shell, when: {type: TOOL_CALL, tool: shell.exec}, then: block, reason: shell is disabled}
  - id: big-transfers
    when: {type: TOOL_CALL, tool: payments.transfer, all: [{field: args.amount, op: gt, value: 1000}]}
    then: require_approval
    tier: signed
`;

t.test('YAML and JSON parse to the same rule set', async (t) => {
  const y = parseRuleSetText(YAML);
  t.equal(y.ok, true);
  if (!y.ok) return;
  const j = parseRuleSetText(JSON.stringify(y.value));
  t.same(j, y);
  const c = compilePolicy(y.value);
  t.equal(c.ok, true);
  if (c.ok) {
    t.equal(evaluate(c.policy, action({ tool: 'payments.transfer', args: { amount: 5000 } })).tier, 'signed');
  }
});

t.test('syntax errors are problems with a position', async (t) => {
  const r = parseRuleSetText('rules: [1\nmode: x');
  t.equal(r.ok, false);
  if (!r.ok) t.match(r.problems[0]?.message, /line \d+, column \d+/);
  const dup = parseRuleSetText('mode: warn\nmode: enforce\nrules: []');
  t.equal(dup.ok, false, 'duplicate keys');
  t.equal(parseRuleSetText('x'.repeat(1024 * 1024 + 1)).ok, false, 'too large');
});

t.test('alias bombs are refused', async (t) => {
  const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
  for (let i = 0; i < 8; i++) {
    const prev = String.fromCharCode(97 + i);
    const next = String.fromCharCode(98 + i);
    lines.push(`${next}: &${next} [${Array(10).fill(`*${prev}`).join(', ')}]`);
  }
  t.equal(parseRuleSetText(lines.join('\n')).ok, false);
});
