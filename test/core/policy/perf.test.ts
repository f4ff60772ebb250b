// Measures evaluate() on a generated 200-rule policy. Prints the numbers; asserts only correctness.

import t from 'tap';
import { type Action, evaluate } from '../../../src/core/policy/index.js';
import { compileOk, detections, expectDecision, THEN } from './helpers.js';

const TYPES = ['TOOL_CALL', 'LLM_CALL', 'EMBEDDING_CALL', 'CODE_EXEC', 'SYSTEM_OF_RECORD_WRITE'] as const;

function generatedRules(n: number) {
  const rules: object[] = [];
  for (let i = 0; i < n; i++) {
    const type = TYPES[i % TYPES.length];
    const then = (['allow', 'block', 'redact', 'require_approval'] as const)[i % 4];
    const when: Record<string, unknown> = { type };
    if (type === 'TOOL_CALL') when.tool = i % 3 === 0 ? `svc${i % 20}.*` : `svc${i % 20}.op${i}`;
    if (type === 'LLM_CALL') when.model = i % 2 ? `gpt-${i}*` : `claude-${i}`;
    when.all = [
      { field: 'args.amount', op: 'gt', value: i * 10 },
      {
        any: [
          { field: 'args.currency', op: 'in', value: ['USD', 'EUR'] },
          { field: 'args.note', op: 'matches', value: `^n${i}` },
        ],
      },
    ];
    rules.push({ id: `rule-${i}`, when, [THEN]: then });
  }
  return rules;
}

function p50(fn: () => void): number {
  const batch = 1000;
  const samples: number[] = [];
  for (let s = 0; s < 200; s++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < batch; i++) fn();
    samples.push(Number(process.hrtime.bigint() - t0) / batch);
  }
  samples.sort((a, b) => a - b);
  return samples[samples.length >> 1] ?? 0;
}

t.test('evaluate() p50 on a 200-rule policy', async (t) => {
  const policy = compileOk({ rules: generatedRules(200) });
  const actions: Record<string, Action> = {
    'TOOL_CALL svc5.op65': {
      type: 'TOOL_CALL',
      agent_id: 'a',
      tool: 'svc5.op65',
      args: { amount: 5000, currency: 'USD', note: 'x' },
    },
    'LLM_CALL gpt-4o + pii': {
      type: 'LLM_CALL',
      agent_id: 'a',
      model: 'gpt-4o',
      provider: 'openai',
      args: { amount: 1 },
      detections: detections({ pii: ['email'] }),
    },
    'CREDENTIAL_ACCESS (no typed rules)': { type: 'CREDENTIAL_ACCESS', agent_id: 'a' },
  };
  const tool = actions['TOOL_CALL svc5.op65'] as Action;
  expectDecision(t, evaluate(policy, tool), {
    matched: ['rule-45', 'rule-65', 'rule-105', 'rule-165'],
    rule_id: 'rule-45',
    outcome: 'block',
  });
  for (const [name, a] of Object.entries(actions)) {
    let sink = 0;
    const ns = p50(() => {
      sink += evaluate(policy, a).matched.length;
    });
    t.comment(`evaluate p50 ${name}: ${ns.toFixed(0)} ns (200 rules)`);
    t.ok(sink >= 0);
  }
});
