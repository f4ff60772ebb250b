import t from 'tap';
import {
  evaluate,
  mergeFlags,
  parseFlags,
  policyFlags,
  type ServiceFlags,
} from '../../../src/core/policy/index.js';
import { action, compileOk, detections, expectDecision, THEN } from './helpers.js';

function parsed(header: string): ServiceFlags {
  const r = parseFlags(header);
  if (!r.ok) throw new Error(JSON.stringify(r.problems));
  return r.flags;
}

t.test('parseFlags: the documented example', async (t) => {
  t.same(
    parsed(
      'mode=enforce, pii=mask, secrets=block, tools=denylist:shell.exec:fs.write, ' +
        'tools=allowlist:a:b, budget=5.00',
    ),
    {
      mode: 'enforce',
      pii: 'redact',
      secrets: 'block',
      tools_deny: ['shell.exec', 'fs.write'],
      tools_allow: ['a', 'b'],
      budget_usd: 5,
    },
  );
  t.same(parsed(''), {});
  t.same(parsed(' mode = warn ,'), { mode: 'warn' }, 'spaces and a trailing comma are fine');
  t.same(parsed('pii=off,secrets=flag,tools=allowlist:payments.*'), {
    pii: 'off',
    secrets: 'flag',
    tools_allow: ['payments.*'],
  });
});

t.test('parseFlags: every problem is listed', async (t) => {
  const r = parseFlags(
    'mode=strict, colour=red, pii=shred, tools=blocklist:x, tools=allowlist:, budget=-1, nonsense, mode=warn',
  );
  t.equal(r.ok, false);
  if (r.ok) return;
  t.same(
    r.problems.map((p) => p.path),
    ['flags[0]', 'flags[1]', 'flags[2]', 'flags[3]', 'flags[4]', 'flags[5]', 'flags[6]', 'flags[7]'],
  );
  t.match(r.problems[0]?.message, /mode must be one of/);
  t.match(r.problems[1]?.message, /unknown flag "colour"/);
  t.match(r.problems[5]?.message, /budget/);
  t.match(r.problems[6]?.message, /expected key=value/);
  t.match(r.problems[7]?.message, /more than once/);
  for (const bad of [
    'budget=5.1234567',
    'budget=1e3',
    'budget=',
    'tools=allowlist:a::b',
    'tools=denylist',
    '=x',
    'pii=',
  ]) {
    t.equal(parseFlags(bad).ok, false, bad);
  }
  const long = parseFlags(`mode=warn,${' '.repeat(5000)}`);
  t.equal(long.ok, false, 'over-long header');
  t.equal(parseFlags('tools=allowlist:a, tools=allowlist:b').ok, false, 'one allowlist only');
});

const org = (extra: object = {}) =>
  compileOk({
    mode: 'warn',
    detectors: { pii: { action: 'redact' }, secrets: { action: 'flag' } },
    budget: { max_usd_per_call: 2 },
    rules: [{ id: 'no-shell', when: { tool: 'shell.exec' }, [THEN]: 'block' }],
    ...extra,
  });

t.test('mergeFlags: tighten applies, loosen is ignored while locked', async (t) => {
  const { flags, ignored } = mergeFlags(org(), parsed('mode=enforce, pii=block, secrets=redact, budget=1.5'));
  t.match(flags, { mode: 'enforce', pii: 'block', secrets: 'redact', budget_usd: 1.5 });
  t.same(ignored, []);

  const loose = mergeFlags(org(), parsed('mode=observe, pii=off, secrets=off, budget=10'));
  t.match(loose.flags, { mode: 'warn', pii: 'redact', secrets: 'flag', budget_usd: 2 });
  t.same(
    loose.ignored.map((i) => i.flag),
    ['mode', 'pii', 'secrets', 'budget'],
  );
  t.match(loose.ignored[0]?.reason, /would loosen/);

  const same = mergeFlags(org(), parsed('mode=warn, pii=mask'));
  t.same(same.ignored, [], 'equal values are not loosening');
});

t.test('mergeFlags: unlocked flags may loosen', async (t) => {
  const p = org({ unlocked: ['mode', 'pii', 'secrets', 'budget'] });
  const { flags, ignored } = mergeFlags(p, parsed('mode=observe, pii=off, secrets=off, budget=10'));
  t.match(flags, { mode: 'observe', pii: 'off', secrets: 'off', budget_usd: 10 });
  t.same(ignored, []);
  const partial = mergeFlags(org({ unlocked: ['pii'] }), parsed('mode=observe, pii=off'));
  t.match(partial.flags, { mode: 'warn', pii: 'off' });
  t.same(
    partial.ignored.map((i) => i.flag),
    ['mode'],
  );
});

t.test('mergeFlags: a budget flag sets a cap when the org has none', async (t) => {
  const p = compileOk({ rules: [] });
  t.equal(mergeFlags(p, parsed('budget=3')).flags.budget_usd, 3);
  t.equal(mergeFlags(p, {}).flags.budget_usd, null);
});

t.test('evaluate under merged flags', async (t) => {
  const p = org();
  const enforce = mergeFlags(p, parsed('mode=enforce')).flags;
  t.equal(evaluate(p, action({ tool: 'shell.exec' })).outcome, 'allow', 'org mode is warn');
  t.equal(evaluate(p, action({ tool: 'shell.exec' }), enforce).outcome, 'block', 'flag tightened to enforce');

  const withPii = action({ type: 'LLM_CALL', detections: detections({ pii: ['email'] }) });
  const piiBlock = mergeFlags(p, parsed('mode=enforce, pii=block')).flags;
  expectDecision(t, evaluate(p, withPii, piiBlock), { outcome: 'block', rule_id: 'detector:pii' });
  const piiOff = mergeFlags(p, parsed('mode=enforce, pii=off')).flags;
  expectDecision(
    t,
    evaluate(p, withPii, piiOff),
    { effect: 'redact', redact: ['pii'] },
    'locked pii stays redact',
  );
  const unlocked = compileOk({ unlocked: ['pii'], rules: [] });
  expectDecision(t, evaluate(unlocked, withPii, mergeFlags(unlocked, parsed('pii=off')).flags), {
    effect: 'allow',
    redact: [],
  });

  const lock = mergeFlags(p, parsed('mode=lockdown')).flags;
  expectDecision(t, evaluate(p, action({ detections: detections({ secrets: ['aws_access_key'] }) }), lock), {
    outcome: 'block',
  });
  t.same(policyFlags(p), mergeFlags(p, {}).flags);
  t.equal(evaluate(p, action({ tool: 'shell.exec' }), policyFlags(p)).outcome, 'allow');
});

t.test('tools allowlist and denylist always tighten', async (t) => {
  const p = compileOk({ rules: [{ id: 'ok', when: { tool: 'fs.read' }, [THEN]: 'allow' }] });
  const deny = mergeFlags(p, parsed('tools=denylist:shell.*:fs.write')).flags;
  expectDecision(t, evaluate(p, action({ tool: 'shell.exec' }), deny), {
    outcome: 'block',
    rule_id: 'flags:tools',
    matched: ['flags:tools'],
  });
  expectDecision(t, evaluate(p, action({ tool: 'fs.write' }), deny), {
    outcome: 'block',
    rule_id: 'flags:tools',
  });
  expectDecision(t, evaluate(p, action({ tool: 'fs.read' }), deny), { outcome: 'allow', rule_id: 'ok' });
  const allow = mergeFlags(p, parsed('tools=allowlist:fs.*:calendar.read')).flags;
  expectDecision(t, evaluate(p, action({ tool: 'fs.read' }), allow), { outcome: 'allow' });
  expectDecision(t, evaluate(p, action({ tool: 'calendar.read' }), allow), { outcome: 'allow' });
  expectDecision(t, evaluate(p, action({ tool: 'payments.transfer' }), allow), {
    outcome: 'block',
    rule_id: 'flags:tools',
  });
  expectDecision(
    t,
    evaluate(p, action({ type: 'LLM_CALL' }), allow),
    { outcome: 'allow' },
    'actions without a tool pass',
  );
  const unlockedAll = compileOk({ unlocked: ['mode', 'pii', 'secrets', 'budget'], rules: [] });
  expectDecision(
    t,
    evaluate(unlockedAll, action({ tool: 'x' }), mergeFlags(unlockedAll, parsed('tools=denylist:x')).flags),
    { outcome: 'block' },
  );
  const warned = compileOk({ mode: 'warn', rules: [] });
  expectDecision(
    t,
    evaluate(warned, action({ tool: 'x' }), mergeFlags(warned, parsed('tools=denylist:x')).flags),
    {
      outcome: 'allow',
      would_outcome: 'block',
      alert: true,
    },
  );
});

t.test(
  'a denylist blocks a tool whose name holds ":" written as its parts; an allowlist fails closed',
  async (t) => {
    const p = compileOk({ rules: [{ id: 'ok', when: { tool: '*' }, [THEN]: 'allow' }] });
    const decide = (header: string, tool: string) =>
      evaluate(p, action({ tool }), mergeFlags(p, parsed(header)).flags).outcome;
    t.equal(
      decide('mode=enforce, tools=denylist:mcp:github/create_issue', 'mcp:github/create_issue'),
      'block',
    );
    t.equal(
      decide('mode=enforce, tools=denylist:shell.exec:mcp:github/*', 'mcp:github/delete_repo'),
      'block',
      'a glob in a part',
    );
    t.equal(
      decide('mode=enforce, tools=denylist:mcp:github/create_issue', 'github/create_issue'),
      'block',
      'each part too',
    );
    t.equal(decide('mode=enforce, tools=denylist:mcp:github/create_issue', 'mcp:slack/post'), 'allow');
    t.equal(
      decide('mode=enforce, tools=allowlist:mcp:github/create_issue', 'mcp:github/create_issue'),
      'block',
      'not allowed by its parts',
    );
    t.equal(
      decide('mode=enforce, tools=allowlist:mcp*create_issue', 'mcp:github/create_issue'),
      'allow',
      'a glob allows it',
    );
  },
);
