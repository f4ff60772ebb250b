import t from 'tap';
import { candidates, compilePolicy, evaluate, MAX_REGEX_LENGTH } from '../../../src/core/policy/index.js';
import { action, compileOk, problemsOf, THEN } from './helpers.js';

const paths = (ps: { path: string }[]) => ps.map((p) => p.path);

t.test('a valid rule set compiles, with defaults', async (t) => {
  const p = compileOk({ rules: [] });
  t.equal(p.mode, 'enforce');
  t.equal(p.default, 'allow');
  t.equal(p.detectors.pii.action, 'redact');
  t.equal(p.detectors.secrets.action, 'redact');
  t.same(p.detectors.injection, { action: 'block', threshold: 0.8 });
  t.equal(p.detectors.unicode.action, 'flag');
  t.equal(p.budget_usd, null);
  t.equal(p.unlocked.size, 0);
});

t.test('the DESIGN example compiles', async (t) => {
  const p = compileOk({
    mode: 'enforce',
    detectors: {
      pii: { action: 'redact' },
      secrets: { action: 'redact' },
      injection: { action: 'block', threshold: 0.8 },
    },
    rules: [
      {
        id: 'no-shell',
        when: { type: 'TOOL_CALL', tool: 'shell.exec' },
        [THEN]: 'block',
        reason: 'shell is disabled',
      },
      {
        id: 'big-transfers',
        when: {
          type: 'TOOL_CALL',
          tool: 'payments.transfer',
          all: [{ field: 'args.amount', op: 'gt', value: 1000 }],
        },
        [THEN]: 'require_approval',
        tier: 'signed',
        reason: 'transfers over 1000 need a signed approval',
      },
    ],
  });
  t.same(
    p.rules.map((r) => [r.id, r.effect, r.tier]),
    [
      ['no-shell', 'block', undefined],
      ['big-transfers', 'require_approval', 'signed'],
    ],
  );
});

t.test('every problem is listed with its path', async (t) => {
  const problems = problemsOf({
    mode: 'strict',
    default: 'deny',
    color: 'blue',
    detectors: { pii: { action: 'shred' }, injection: { action: 'block', threshold: 2 }, dlp: {} },
    unlocked: ['mode', 'tools'],
    budget: { max_usd_per_call: -1 },
    rules: [
      { id: 'ok', when: { type: 'LLM_CALL' }, [THEN]: 'block' },
      { id: 'ok', [THEN]: 'block' },
      { id: 'bad op', when: { all: [{ field: 'args.a', op: 'between', value: 1 }] }, [THEN]: 'deny' },
      {
        id: 'types',
        when: {
          type: ['LLM_CALL', 'FAX_CALL'],
          all: [
            { field: 'args.a', op: 'gt', value: '10' },
            { field: 'args.b', op: 'in', value: 'x' },
            { field: 'args.c', op: 'exists', value: 'yes' },
            { field: 'secrets.x', op: 'eq', value: 1 },
            { field: 'args.d', op: 'eq', value: { a: 1 } },
          ],
          any: [],
          not: { field: 'args.e', op: 'matches', value: '(a+)+$' },
        },
        [THEN]: 'allow',
        tier: 'signed',
        redact: ['pii'],
      },
      'not a rule',
      { id: 'x', when: { tool: '' }, [THEN]: 'block', enabled: 'yes', reason: 5, colour: 1 },
    ],
  });
  t.same(paths(problems).sort(), [
    'budget.max_usd_per_call',
    'color',
    'default',
    'detectors.dlp',
    'detectors.injection.threshold',
    'detectors.pii.action',
    'mode',
    'rules[1].id',
    'rules[2].id',
    'rules[2].then',
    'rules[2].when.all[0].op',
    'rules[3].redact',
    'rules[3].tier',
    'rules[3].when.all[0].value',
    'rules[3].when.all[1].value',
    'rules[3].when.all[2].value',
    'rules[3].when.all[3].field',
    'rules[3].when.all[4].value',
    'rules[3].when.any',
    'rules[3].when.not.value',
    'rules[3].when.type',
    'rules[4]',
    'rules[5].colour',
    'rules[5].enabled',
    'rules[5].reason',
    'rules[5].when.tool',
    'unlocked[1]',
  ]);
  const byPath = new Map(problems.map((p) => [p.path, p.message]));
  t.match(byPath.get('rules[1].id'), /duplicate rule id "ok" \(first at rules\[0\]\)/);
  t.match(byPath.get('rules[3].when.type'), /unknown behavior type "FAX_CALL"/);
  t.match(byPath.get('rules[3].when.all[0].value'), /gt needs a finite number/);
  t.match(byPath.get('rules[3].tier'), /only allowed with then: require_approval/);
  t.match(byPath.get('rules[3].when.not.value'), /backtrack/);
  t.match(byPath.get('rules[2].when.all[0].op'), /op must be one of eq, ne, in, not_in/);
  t.match(byPath.get('color'), /unknown key "color"/);
});

t.test('the rule set itself must be an object with a rules list', async (t) => {
  t.same(paths(problemsOf('rules: []')), ['']);
  t.same(paths(problemsOf(null)), ['']);
  t.same(paths(problemsOf({ mode: 'enforce' })), ['rules']);
  t.same(paths(problemsOf({ rules: {} })), ['rules']);
});

t.test('rule ids: pattern and reserved names', async (t) => {
  for (const id of ['default', '', ' x', 'detector:pii', 'flags:tools', 'a'.repeat(129), 7]) {
    t.same(
      paths(problemsOf({ rules: [{ id, [THEN]: 'block' }] })),
      ['rules[0].id'],
      `id ${JSON.stringify(id)}`,
    );
  }
  compileOk({ rules: [{ id: 'A_b-c.9', [THEN]: 'block' }] });
});

t.test('regex safety: catastrophic and over-long patterns are refused', async (t) => {
  const rule = (value: string, flags?: string) => ({
    rules: [
      {
        id: 'r',
        when: { all: [{ field: 'args.s', op: 'matches', value, ...(flags ? { flags } : {}) }] },
        [THEN]: 'block',
      },
    ],
  });
  for (const bad of ['(a+)+$', '(x+x+)+y', '(.*)*', '([a-z]*)*$']) {
    const ps = problemsOf(rule(bad));
    t.same(paths(ps), ['rules[0].when.all[0].value'], bad);
    t.match(ps[0]?.message, /backtrack/);
  }
  const long = `^${'a'.repeat(MAX_REGEX_LENGTH)}$`;
  t.match(problemsOf(rule(long))[0]?.message, /at most 512/);
  compileOk(rule(`^${'a'.repeat(MAX_REGEX_LENGTH - 2)}$`));
  t.match(problemsOf(rule('(unclosed'))[0]?.message, /invalid regex/);
  t.same(paths(problemsOf(rule('^a$', 'g'))), ['rules[0].when.all[0].value'], 'stateful flag refused');
  t.same(paths(problemsOf(rule('^a$', 'ii'))), ['rules[0].when.all[0].value'], 'repeated flag refused');
  compileOk(rule('^[a-z0-9._-]+@example\\.com$', 'i'));
});

t.test('operand validation', async (t) => {
  const one = (cond: unknown) =>
    paths(problemsOf({ rules: [{ id: 'r', when: { all: [cond] }, [THEN]: 'block' }] }));
  t.same(one({ field: 'args.a', op: 'in', value: [] }), ['rules[0].when.all[0].value']);
  t.same(one({ field: 'args.a', op: 'in', value: [{}] }), ['rules[0].when.all[0].value']);
  t.same(one({ field: 'args.a', op: 'ne', value: null }), ['rules[0].when.all[0].value']);
  t.same(one({ field: 'args.a', op: 'gt', value: Number.POSITIVE_INFINITY }), ['rules[0].when.all[0].value']);
  t.same(one({ field: 'args.a', op: 'contains', value: [1] }), ['rules[0].when.all[0].value']);
  t.same(one({ field: 'args.a', op: 'matches', value: 5 }), ['rules[0].when.all[0].value']);
  t.same(one({ field: 'args.a', op: 'eq', value: 1, flags: 'i' }), ['rules[0].when.all[0].flags']);
  t.same(one({ field: 'args..a', op: 'eq', value: 1 }), ['rules[0].when.all[0].field']);
  t.same(one({ field: 'tool.name', op: 'eq', value: 1 }), ['rules[0].when.all[0].field']);
  t.same(one({ field: 'detections.pii.email', op: 'eq', value: 1 }), ['rules[0].when.all[0].field']);
  t.same(one({ field: 'detections.dlp', op: 'eq', value: 1 }), ['rules[0].when.all[0].field']);
  // A detection type the detectors do not report would never match: refused, in any form.
  for (const [field, op, value] of [
    ['detections.pii', 'contains', 'emial'],
    ['detections.pii', 'contains', 'passport'],
    ['detections.secrets', 'contains', 'aws_key'],
    ['detections.unicode', 'contains', 'zalgo'],
    ['detections.pii', 'in', ['email', 'emial']],
  ] as const)
    t.same(
      one({ field, op, value }),
      ['rules[0].when.all[0].value'],
      `${field} ${op} ${JSON.stringify(value)}`,
    );
  // A published version an earlier release stored with such a type still compiles (it matched
  // nothing then and matches nothing now) instead of failing its org closed.
  const stored = compilePolicy(
    {
      rules: [
        {
          id: 'r',
          when: { all: [{ field: 'detections.pii', op: 'contains', value: 'emial' }] },
          then: 'block',
        },
      ],
    },
    { stored: true },
  );
  t.ok(stored.ok, 'a stored version keeps compiling');
  // `exists` takes true, false or no value; a null (a YAML `value:` left empty) is refused when
  // submitted, and a stored version an earlier release accepted with it keeps reading it as true.
  const existsNull = {
    rules: [{ id: 'r', when: { all: [{ field: 'args.c', op: 'exists', value: null }] }, then: 'block' }],
  };
  t.same(paths(problemsOf(existsNull)), ['rules[0].when.all[0].value'], 'exists null refused');
  const kept = compilePolicy(existsNull, { stored: true });
  t.ok(kept.ok, 'a stored exists null still compiles');
  if (kept.ok) {
    t.equal(evaluate(kept.policy, action({ args: { c: 1 } })).effect, 'block');
    t.equal(evaluate(kept.policy, action({ args: {} })).effect, 'allow');
  }
  t.ok(
    compilePolicy({
      rules: [
        {
          id: 'r',
          when: { all: [{ field: 'detections.pii', op: 'contains', value: 'email' }] },
          then: 'block',
        },
      ],
    }).ok,
    'a known type',
  );
  t.same(one({ op: 'eq', value: 1 }), ['rules[0].when.all[0].field']);
  t.same(one({ field: 'args.a', value: 1 }), ['rules[0].when.all[0].op']);
  t.same(one({}), ['rules[0].when.all[0]']);
  t.same(one([]), ['rules[0].when.all[0]']);
  t.same(one({ field: 'args.a', op: 'eq', value: 1, other: 2 }), ['rules[0].when.all[0].other']);
});

t.test('detector types and injection categories must be ones the detectors report', async (t) => {
  const ps = problemsOf({
    detectors: {
      pii: { action: 'block', types: ['email', 'emial'] },
      secrets: { action: 'block', types: ['aws_access_key', 'aws'] },
      unicode: { action: 'block', types: ['bidi', 'emoji'] },
    },
    rules: [
      {
        id: 'r',
        when: { all: [{ field: 'detections.injection.jailbrake', op: 'gte', value: 0.5 }] },
        [THEN]: 'block',
      },
    ],
  });
  t.same(paths(ps), [
    'detectors.pii.types',
    'detectors.secrets.types',
    'detectors.unicode.types',
    'rules[0].when.all[0].field',
  ]);
  t.match(ps[0]?.message, /unknown pii type "emial" \(known: email, phone/);
  t.match(ps[3]?.message, /unknown injection category "jailbrake"/);
  compileOk({
    rules: [
      {
        id: 'r',
        when: { all: [{ field: 'detections.injection.jailbreak', op: 'gte', value: 0.5 }] },
        [THEN]: 'block',
      },
    ],
  });
});

t.test('then-specific keys', async (t) => {
  compileOk({ rules: [{ id: 'r', [THEN]: 'require_approval', tier: 'standard' }] });
  compileOk({ rules: [{ id: 'r', [THEN]: 'redact', redact: ['secret'] }] });
  t.same(paths(problemsOf({ rules: [{ id: 'r', [THEN]: 'require_approval', tier: 'gold' }] })), [
    'rules[0].tier',
  ]);
  t.same(paths(problemsOf({ rules: [{ id: 'r', [THEN]: 'redact', redact: ['ssn'] }] })), [
    'rules[0].redact[0]',
  ]);
  t.same(paths(problemsOf({ rules: [{ id: 'r', [THEN]: 'redact', redact: [] }] })), ['rules[0].redact']);
});

t.test('a disabled rule is validated but never matches', async (t) => {
  const p = compileOk({
    rules: [{ id: 'off', when: { type: 'TOOL_CALL' }, [THEN]: 'block', enabled: false }],
  });
  t.equal(evaluate(p, action()).outcome, 'allow');
  t.equal(p.rules[0]?.enabled, false);
  t.same(
    paths(problemsOf({ rules: [{ id: 'off', when: { type: 'NOPE' }, [THEN]: 'block', enabled: false }] })),
    ['rules[0].when.type'],
  );
});

t.test('problems are capped', async (t) => {
  const rules = Array.from({ length: 1500 }, () => ({ id: 'same', [THEN]: 'nope' }));
  const r = compilePolicy({ rules });
  t.equal(r.ok, false);
  if (!r.ok) {
    t.equal(r.problems.length, 1001);
    t.match(r.problems[1000]?.message, /and \d+ more problems/);
  }
});

t.test('index: rules are bucketed by type and exact tool', async (t) => {
  const p = compileOk({
    rules: [
      { id: 'transfer', when: { type: 'TOOL_CALL', tool: 'payments.transfer' }, [THEN]: 'block' },
      { id: 'any-payments', when: { type: 'TOOL_CALL', tool: 'payments.*' }, [THEN]: 'block' },
      { id: 'llm', when: { type: ['LLM_CALL', 'EMBEDDING_CALL'] }, [THEN]: 'redact' },
      { id: 'everything', when: { agent_id: 'x' }, [THEN]: 'block' },
      { id: 'untyped-tool', when: { tool: ['fs.write', 'payments.transfer'] }, [THEN]: 'block' },
    ],
  });
  const ids = (type: string, tool?: string) => candidates(p, type, tool).map((r) => r.id);
  t.same(ids('LLM_CALL'), ['llm', 'everything']);
  t.same(ids('LLM_CALL', 'payments.transfer'), ['llm', 'everything', 'untyped-tool']);
  t.same(ids('TOOL_CALL', 'payments.transfer'), ['transfer', 'any-payments', 'everything', 'untyped-tool']);
  t.same(ids('TOOL_CALL', 'payments.refund'), ['any-payments', 'everything']);
  t.same(ids('TOOL_CALL', 'fs.write'), ['any-payments', 'everything', 'untyped-tool']);
  t.same(ids('TOOL_CALL'), ['any-payments', 'everything']);
  t.same(ids('CODE_EXEC'), ['everything']);
  t.same(ids('NOT_A_TYPE'), ['everything'], 'unknown types still meet the untyped rules');
});

t.test('index: a TOOL_CALL/payments.transfer rule is never evaluated for other actions', async (t) => {
  const p = compileOk({
    rules: [
      {
        id: 'transfer',
        when: {
          type: 'TOOL_CALL',
          tool: 'payments.transfer',
          all: [{ field: 'args.amount', op: 'gt', value: 0 }],
        },
        [THEN]: 'block',
      },
    ],
  });
  let reads = 0;
  const args = {
    get amount() {
      reads++;
      return 10;
    },
  };
  t.equal(evaluate(p, action({ type: 'LLM_CALL', args })).outcome, 'allow');
  t.equal(evaluate(p, action({ type: 'LLM_CALL', tool: 'payments.transfer', args })).outcome, 'allow');
  t.equal(evaluate(p, action({ type: 'TOOL_CALL', tool: 'payments.refund', args })).outcome, 'allow');
  t.equal(reads, 0, 'the condition was never run');
  t.equal(evaluate(p, action({ type: 'TOOL_CALL', tool: 'payments.transfer', args })).outcome, 'block');
  t.equal(reads, 1, 'and it runs for its own bucket');
});
