import t from 'tap';
import { DEFAULT_POLICY, evaluate, type Mode } from '../../../src/core/policy/index.js';
import { action, compileOk, detections, expectDecision, offDetectors, THEN } from './helpers.js';

const transfer = (amount: number) => action({ tool: 'payments.transfer', args: { amount } });

t.test('effects combine by severity regardless of rule order', async (t) => {
  const rules = [
    { id: 'allow-all', when: { type: 'TOOL_CALL' }, [THEN]: 'allow', reason: 'tools are fine' },
    { id: 'redact', when: { tool: 'payments.*' }, [THEN]: 'redact' },
    {
      id: 'approve',
      when: { tool: 'payments.transfer' },
      [THEN]: 'require_approval',
      reason: 'needs a human',
    },
    { id: 'block-big', when: { all: [{ field: 'args.amount', op: 'gt', value: 1000 }] }, [THEN]: 'block' },
  ];
  for (const order of [rules, [...rules].reverse(), [rules[2], rules[0], rules[3], rules[1]]]) {
    const p = compileOk({ detectors: offDetectors, rules: order });
    const big = evaluate(p, transfer(5000));
    t.equal(big.effect, 'block');
    t.equal(big.rule_id, 'block-big');
    t.equal(big.reason, 'blocked by rule block-big', 'generated reason');
    t.same([...big.matched].sort(), ['allow-all', 'approve', 'block-big', 'redact']);
    const small = evaluate(p, transfer(10));
    t.equal(small.outcome, 'needs_approval');
    t.equal(small.rule_id, 'approve');
    t.equal(small.reason, 'needs a human');
    t.equal(small.tier, 'standard');
    const refund = evaluate(p, action({ tool: 'payments.refund' }));
    t.equal(refund.effect, 'redact');
    t.equal(refund.outcome, 'allow');
    t.same(refund.redact, ['pii', 'secret']);
    t.equal(refund.rule_id, 'redact');
    const other = evaluate(p, action({ tool: 'calendar.read' }));
    t.equal(other.effect, 'allow');
    t.equal(other.rule_id, 'allow-all');
    t.equal(other.reason, 'tools are fine');
    t.same(other.redact, []);
  }
});

t.test('equal severity: the first rule in the rule set decides; signed beats standard', async (t) => {
  const p = compileOk({
    rules: [
      { id: 'first', when: { type: 'TOOL_CALL' }, [THEN]: 'block', reason: 'one' },
      { id: 'second', when: { type: 'TOOL_CALL' }, [THEN]: 'block', reason: 'two' },
    ],
  });
  t.equal(evaluate(p, action()).rule_id, 'first');
  const q = compileOk({
    rules: [
      { id: 'std', when: { type: 'TOOL_CALL' }, [THEN]: 'require_approval' },
      { id: 'sig', when: { type: 'TOOL_CALL' }, [THEN]: 'require_approval', tier: 'signed' },
    ],
  });
  const d = evaluate(q, action());
  t.equal(d.rule_id, 'sig');
  t.equal(d.tier, 'signed');
});

t.test('redact categories are the union of redact rules and redacting detectors', async (t) => {
  const p = compileOk({
    detectors: { pii: { action: 'off' }, secrets: { action: 'redact' } },
    rules: [{ id: 'gpt', when: { model: 'gpt-*' }, [THEN]: 'redact', redact: ['pii'] }],
  });
  t.same(evaluate(p, action({ type: 'LLM_CALL', model: 'gpt-4o' })).redact, ['pii']);
  const both = evaluate(
    p,
    action({ type: 'LLM_CALL', model: 'gpt-4o', detections: detections({ secrets: ['aws_access_key'] }) }),
  );
  t.same(both.redact, ['pii', 'secret']);
  t.equal(both.rule_id, 'gpt', 'a rule wins a tie with a detector');
  const onlySecret = evaluate(
    p,
    action({ type: 'LLM_CALL', detections: detections({ secrets: ['aws_access_key'] }) }),
  );
  t.same(onlySecret.redact, ['secret']);
  t.equal(onlySecret.rule_id, 'detector:secrets');
  t.equal(onlySecret.reason, 'secret detected: aws_access_key');
});

t.test('nothing matched: allow with no rule id', async (t) => {
  const p = compileOk({ rules: [{ id: 'x', when: { type: 'CODE_EXEC' }, [THEN]: 'block' }] });
  const d = evaluate(p, action());
  expectDecision(t, d, {
    outcome: 'allow',
    effect: 'allow',
    rule_id: null,
    reason: '',
    alert: false,
    redact: [],
    matched: [],
  });
  t.equal(d.would_outcome, undefined);
});

t.test('default: block', async (t) => {
  const p = compileOk({
    default: 'block',
    detectors: offDetectors,
    rules: [
      { id: 'read', when: { tool: 'fs.read' }, [THEN]: 'allow' },
      { id: 'pay', when: { tool: 'payments.transfer' }, [THEN]: 'require_approval' },
      { id: 'gpt', when: { model: 'gpt-*' }, [THEN]: 'redact' },
    ],
  });
  expectDecision(t, evaluate(p, action({ tool: 'fs.read' })), { outcome: 'allow', rule_id: 'read' });
  expectDecision(t, evaluate(p, action({ tool: 'payments.transfer' })), {
    outcome: 'needs_approval',
    rule_id: 'pay',
  });
  const other = evaluate(p, action({ tool: 'fs.write' }));
  expectDecision(t, other, { outcome: 'block', rule_id: 'default', matched: ['default'] });
  t.match(other.reason, /default: block/);
  expectDecision(
    t,
    evaluate(p, action({ type: 'LLM_CALL', model: 'gpt-4o' })),
    { outcome: 'block', rule_id: 'default' },
    'redact does not permit',
  );
});

t.test('modes', async (t) => {
  const rules = [
    { id: 'no-shell', when: { tool: 'shell.exec' }, [THEN]: 'block', reason: 'no shell' },
    { id: 'pay', when: { tool: 'payments.transfer' }, [THEN]: 'require_approval', tier: 'signed' },
    { id: 'gpt', when: { model: 'gpt-*' }, [THEN]: 'redact' },
  ];
  const at = (mode: Mode) => compileOk({ mode, detectors: offDetectors, rules });
  const shell = action({ tool: 'shell.exec' });
  const pay = action({ tool: 'payments.transfer' });
  const gpt = action({ type: 'LLM_CALL', model: 'gpt-4o' });
  const ok = action({ tool: 'fs.read' });

  expectDecision(t, evaluate(at('enforce'), shell), {
    outcome: 'block',
    effect: 'block',
    alert: false,
    mode: 'enforce',
  });
  expectDecision(t, evaluate(at('enforce'), pay), { outcome: 'needs_approval', tier: 'signed' });
  expectDecision(t, evaluate(at('enforce'), gpt), {
    outcome: 'allow',
    effect: 'redact',
    redact: ['pii', 'secret'],
  });
  t.equal(evaluate(at('enforce'), shell).would_outcome, undefined);

  const o = evaluate(at('observe'), shell);
  expectDecision(t, o, {
    outcome: 'allow',
    effect: 'block',
    would_outcome: 'block',
    rule_id: 'no-shell',
    alert: false,
  });
  expectDecision(t, evaluate(at('observe'), pay), {
    outcome: 'allow',
    would_outcome: 'needs_approval',
    tier: 'signed',
  });
  expectDecision(t, evaluate(at('observe'), gpt), {
    outcome: 'allow',
    effect: 'redact',
    redact: [],
    alert: false,
  });
  t.equal(evaluate(at('observe'), gpt).would_outcome, undefined);

  expectDecision(t, evaluate(at('warn'), shell), {
    outcome: 'allow',
    would_outcome: 'block',
    alert: true,
    mode: 'warn',
  });
  expectDecision(t, evaluate(at('warn'), pay), {
    outcome: 'allow',
    would_outcome: 'needs_approval',
    alert: true,
  });
  expectDecision(t, evaluate(at('warn'), gpt), {
    outcome: 'allow',
    effect: 'redact',
    redact: [],
    alert: true,
  });
  expectDecision(t, evaluate(at('warn'), ok), { outcome: 'allow', effect: 'allow', alert: false });

  expectDecision(t, evaluate(at('lockdown'), shell), { outcome: 'block', mode: 'lockdown' });
  expectDecision(
    t,
    evaluate(at('lockdown'), ok),
    { outcome: 'allow' },
    'lockdown without detections decides as enforce',
  );
});

t.test('detectors: pii and secrets actions', async (t) => {
  const withPii = action({ type: 'LLM_CALL', detections: detections({ pii: ['email', 'iban'] }) });
  const at = (pii: unknown) => compileOk({ detectors: { pii }, rules: [] });
  expectDecision(t, evaluate(at({ action: 'block' }), withPii), {
    outcome: 'block',
    rule_id: 'detector:pii',
    reason: 'personal data detected: email, iban',
  });
  expectDecision(t, evaluate(at({ action: 'redact' }), withPii), {
    outcome: 'allow',
    effect: 'redact',
    redact: ['pii'],
  });
  expectDecision(
    t,
    evaluate(at({ action: 'mask' }), withPii),
    { effect: 'redact', redact: ['pii'] },
    'mask = redact',
  );
  expectDecision(t, evaluate(at({ action: 'flag' }), withPii), {
    outcome: 'allow',
    effect: 'allow',
    alert: true,
    rule_id: 'detector:pii',
    matched: ['detector:pii'],
    redact: [],
  });
  expectDecision(t, evaluate(at({ action: 'off' }), withPii), {
    effect: 'allow',
    alert: false,
    rule_id: null,
    matched: [],
  });
  expectDecision(
    t,
    evaluate(at({ action: 'block', types: ['ssn'] }), withPii),
    { effect: 'allow' },
    'types filter',
  );
  expectDecision(t, evaluate(at({ action: 'block', types: ['ssn', 'iban'] }), withPii), {
    effect: 'block',
    reason: 'personal data detected: iban',
  });
  expectDecision(
    t,
    evaluate(at({ action: 'block' }), action({ type: 'LLM_CALL', detections: detections({}) })),
    {
      effect: 'allow',
    },
  );
  const sec = compileOk({ detectors: { secrets: { action: 'block' } }, rules: [] });
  expectDecision(t, evaluate(sec, action({ detections: detections({ secrets: ['github_token'] }) })), {
    outcome: 'block',
    rule_id: 'detector:secrets',
  });
  const flagged = compileOk({ mode: 'observe', detectors: { pii: { action: 'flag' } }, rules: [] });
  t.equal(evaluate(flagged, withPii).alert, false, 'observe never alerts');
});

t.test('detectors: injection threshold', async (t) => {
  const at = (injection: unknown) => compileOk({ detectors: { injection }, rules: [] });
  const scored = (s: number) =>
    action({ type: 'PROMPT_SUBMIT', detections: detections({ injection: { a: 0.1, jb: s } }) });
  expectDecision(t, evaluate(at({ action: 'block' }), scored(0.8)), {
    outcome: 'block',
    rule_id: 'detector:injection',
  });
  t.match(evaluate(at({ action: 'block' }), scored(0.8)).reason, /jb score 0.8 ≥ 0.8/);
  expectDecision(t, evaluate(at({ action: 'block' }), scored(0.79)), { outcome: 'allow', rule_id: null });
  expectDecision(t, evaluate(at({ action: 'block', threshold: 0.5 }), scored(0.6)), { outcome: 'block' });
  expectDecision(t, evaluate(at({ action: 'flag', threshold: 0.5 }), scored(0.6)), {
    outcome: 'allow',
    alert: true,
  });
  expectDecision(t, evaluate(at({ action: 'off' }), scored(1)), { outcome: 'allow', alert: false });
});

t.test('detectors: unicode', async (t) => {
  const a = action({ type: 'PROMPT_SUBMIT', detections: detections({ unicode: ['bidi'] }) });
  expectDecision(t, evaluate(DEFAULT_POLICY, a), {
    outcome: 'allow',
    alert: true,
    rule_id: 'detector:unicode',
  });
  const p = compileOk({ detectors: { unicode: { action: 'block', types: ['bidi'] } }, rules: [] });
  expectDecision(t, evaluate(p, a), { outcome: 'block', rule_id: 'detector:unicode' });
  const q = compileOk({ detectors: { unicode: { action: 'block', types: ['invisible'] } }, rules: [] });
  expectDecision(t, evaluate(q, a), { outcome: 'allow' });
});

t.test('lockdown blocks on any detection, whatever the detector settings', async (t) => {
  const p = compileOk({
    mode: 'lockdown',
    detectors: { ...offDetectors, pii: { action: 'redact', types: ['ssn'] } },
    rules: [],
  });
  for (const d of [
    { pii: ['email'] },
    { secrets: ['aws_access_key'] },
    { unicode: ['invisible'] },
    { injection: { x: 0.95 } },
  ]) {
    const dec = evaluate(p, action({ type: 'LLM_CALL', detections: detections(d) }));
    t.equal(dec.outcome, 'block', JSON.stringify(d));
    t.match(dec.rule_id, /^detector:/);
  }
  t.equal(
    evaluate(p, action({ detections: detections({ injection: { x: 0.2 } }) })).outcome,
    'allow',
    'score below threshold',
  );
  t.equal(evaluate(p, action({ detections: detections({}) })).outcome, 'allow');
});

t.test('DEFAULT_POLICY', async (t) => {
  t.equal(DEFAULT_POLICY.mode, 'enforce');
  t.equal(DEFAULT_POLICY.default, 'allow');
  expectDecision(t, evaluate(DEFAULT_POLICY, action()), { outcome: 'allow', rule_id: null });
  expectDecision(
    t,
    evaluate(
      DEFAULT_POLICY,
      action({ detections: detections({ pii: ['email'], secrets: ['aws_access_key'] }) }),
    ),
    {
      outcome: 'allow',
      effect: 'redact',
      redact: ['pii', 'secret'],
    },
  );
  expectDecision(
    t,
    evaluate(DEFAULT_POLICY, action({ detections: detections({ injection: { jailbreak: 0.8 } }) })),
    {
      outcome: 'block',
      rule_id: 'detector:injection',
    },
  );
});

t.test('never throws on odd but well-typed input', async (t) => {
  const p = compileOk({
    rules: [
      { id: 'r', when: { all: [{ field: 'args.a.b.c', op: 'matches', value: '^x' }] }, [THEN]: 'block' },
      { id: 's', when: { any: [{ field: 'payload.0', op: 'contains', value: 'x' }] }, [THEN]: 'block' },
    ],
  });
  for (const args of [null, 5, 'str', [], { a: null }, { a: { b: [] } }, { a: { b: { c: 7 } } }]) {
    t.doesNotThrow(() => evaluate(p, action({ args, payload: args })));
  }
  t.equal(evaluate(p, action({ args: { a: { b: { c: 'xyz' } } } })).outcome, 'block');
});
