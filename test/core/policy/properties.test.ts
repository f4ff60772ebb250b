import fc from 'fast-check';
import t from 'tap';
import { type Action, BEHAVIOR_TYPES, evaluate, type Mode } from '../../../src/core/policy/index.js';
import { compileOk, THEN } from './helpers.js';

const TOOLS = ['payments.transfer', 'payments.refund', 'shell.exec', 'fs.read'];
const TOOL_PATTERNS = [...TOOLS, 'payments.*', '*.exec', 'fs.*'];
const MODELS = ['gpt-4o', 'gpt-4o-mini', 'claude-3'];
const TYPES = ['TOOL_CALL', 'LLM_CALL', 'CODE_EXEC'] as const;

const leaf = fc.oneof(
  fc.record({
    field: fc.constant('args.amount'),
    op: fc.constantFrom('gt', 'gte', 'lt', 'lte', 'eq'),
    value: fc.integer({ min: 0, max: 2000 }),
  }),
  fc.record({
    field: fc.constant('args.currency'),
    op: fc.constantFrom('eq', 'ne'),
    value: fc.constantFrom('USD', 'EUR'),
  }),
  fc.record({
    field: fc.constant('args.currency'),
    op: fc.constantFrom('in', 'not_in'),
    value: fc.constant(['USD', 'GBP']),
  }),
  fc.record({
    field: fc.constant('detections.pii'),
    op: fc.constant('contains'),
    value: fc.constantFrom('email', 'iban'),
  }),
  fc.record({
    field: fc.constant('args.note'),
    op: fc.constant('matches'),
    value: fc.constantFrom('^inv', 'x$'),
  }),
  fc.record({ field: fc.constant('args.amount'), op: fc.constant('exists'), value: fc.boolean() }),
);

const condition = fc.record(
  {
    type: fc.oneof(fc.constantFrom(...TYPES), fc.subarray([...TYPES], { minLength: 1 })),
    tool: fc.oneof(fc.constantFrom(...TOOL_PATTERNS), fc.subarray(TOOL_PATTERNS, { minLength: 1 })),
    model: fc.constantFrom('gpt-*', 'claude-*', 'gpt-4o'),
    all: fc.array(leaf, { minLength: 1, maxLength: 3 }),
    any: fc.array(leaf, { minLength: 1, maxLength: 3 }),
    not: leaf,
  },
  { requiredKeys: [] },
);

const ruleBody = fc.oneof(
  fc.record({ when: condition, [THEN]: fc.constantFrom('allow', 'block', 'redact') }),
  fc.record({
    when: condition,
    [THEN]: fc.constant('require_approval'),
    tier: fc.constantFrom('standard', 'signed'),
  }),
);

const ruleList = fc
  .array(ruleBody, { maxLength: 12 })
  .map((rules) => rules.map((r, i) => ({ id: `r${i}`, ...r })));

const policySpec = fc.record({
  mode: fc.constantFrom<Mode>('observe', 'warn', 'enforce', 'lockdown'),
  default: fc.constantFrom('allow', 'block'),
  detectors: fc.record({
    pii: fc.record({ action: fc.constantFrom('off', 'flag', 'redact', 'block') }),
    injection: fc.record({
      action: fc.constantFrom('off', 'flag', 'block'),
      threshold: fc.constantFrom(0.5, 0.8),
    }),
  }),
  rules: ruleList,
});

const actionArb: fc.Arbitrary<Action> = fc.record(
  {
    type: fc.constantFrom(...TYPES, BEHAVIOR_TYPES[3]),
    agent_id: fc.constant('agent-1'),
    tool: fc.constantFrom(...TOOLS),
    model: fc.constantFrom(...MODELS),
    args: fc.record(
      {
        amount: fc.oneof(fc.integer({ min: 0, max: 2000 }), fc.constant('500')),
        currency: fc.constantFrom('USD', 'EUR', 'GBP'),
        note: fc.constantFrom('invoice', 'tax', 'box'),
      },
      { requiredKeys: [] },
    ),
    detections: fc.record({
      pii: fc.subarray(['email', 'iban']),
      secrets: fc.constant([]),
      injection: fc.record({ jb: fc.constantFrom(0, 0.6, 0.9) }),
      unicode: fc.constant([]),
    }),
  },
  { requiredKeys: ['type', 'agent_id'] },
);

const matchesAlone = (rule: object, a: Action) =>
  evaluate(
    compileOk({
      detectors: { pii: { action: 'off' }, injection: { action: 'off' } },
      rules: [{ ...rule, id: 'probe', [THEN]: 'block' }],
    }),
    a,
  ).effect === 'block';

t.test('adding a non-matching rule never changes a decision', async (t) => {
  fc.assert(
    fc.property(policySpec, ruleBody, fc.nat(), actionArb, (spec, extra, at, a) => {
      fc.pre(!matchesAlone({ when: extra.when }, a));
      const before = evaluate(compileOk(spec), a);
      const rules = [...spec.rules];
      rules.splice(at % (rules.length + 1), 0, { id: 'extra', ...extra });
      const after = evaluate(compileOk({ ...spec, rules }), a);
      t.same(after, before);
      return JSON.stringify(after) === JSON.stringify(before);
    }),
    { numRuns: 300 },
  );
});

t.test('adding a matching block rule always blocks in enforce', async (t) => {
  fc.assert(
    fc.property(policySpec, condition, fc.nat(), actionArb, (spec, when, at, a) => {
      fc.pre(matchesAlone({ when }, a));
      const rules = [...spec.rules];
      rules.splice(at % (rules.length + 1), 0, { id: 'extra', when, [THEN]: 'block' });
      const d = evaluate(compileOk({ ...spec, mode: 'enforce', rules }), a);
      return d.outcome === 'block' && d.effect === 'block' && d.matched.includes('extra');
    }),
    { numRuns: 300 },
  );
  t.pass('property held');
});

t.test('the combined effect does not depend on rule order', async (t) => {
  fc.assert(
    fc.property(policySpec, actionArb, fc.nat(), (spec, a, seed) => {
      const shuffled = [...spec.rules].sort(
        (x, y) => ((x.id.length * 31 + seed) % 7) - ((y.id.length * 17 + seed) % 5),
      );
      const d1 = evaluate(compileOk(spec), a);
      const d2 = evaluate(compileOk({ ...spec, rules: shuffled.reverse() }), a);
      return (
        d1.effect === d2.effect &&
        d1.outcome === d2.outcome &&
        d1.tier === d2.tier &&
        JSON.stringify([...d1.redact]) === JSON.stringify([...d2.redact]) &&
        JSON.stringify([...d1.matched].sort()) === JSON.stringify([...d2.matched].sort())
      );
    }),
    { numRuns: 300 },
  );
  t.pass('property held');
});
