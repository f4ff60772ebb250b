import t from 'tap';
import { type Action, evaluate } from '../../../src/core/policy/index.js';
import { action, compileOk, holds, offDetectors, THEN } from './helpers.js';

const a = action({
  tool: 'payments.transfer',
  model: 'gpt-4o',
  args: {
    amount: 1500,
    currency: 'EUR',
    note: 'invoice 42 for ACME',
    tags: ['urgent', 'q3', 7],
    flag: true,
    nothing: null,
    nested: { deep: { er: 'x' } },
    items: [{ sku: 'A-1' }, { sku: 'B-2' }],
  },
  payload: { x: { y: 'hello' } },
});
const leaf = (field: string, op: string, value?: unknown) =>
  value === undefined ? { all: [{ field, op }] } : { all: [{ field, op, value }] };

t.test('eq / ne', async (t) => {
  t.ok(holds(leaf('args.amount', 'eq', 1500), a));
  t.notOk(holds(leaf('args.amount', 'eq', 1501), a));
  t.notOk(holds(leaf('args.amount', 'eq', '1500'), a), 'string vs number is a mismatch');
  t.ok(holds(leaf('args.flag', 'eq', true), a));
  t.ok(holds(leaf('args.nothing', 'eq', null), a));
  t.notOk(holds(leaf('args.missing', 'eq', null), a), 'missing is not null');
  t.ok(holds(leaf('args.currency', 'ne', 'USD'), a));
  t.notOk(holds(leaf('args.currency', 'ne', 'EUR'), a));
  t.notOk(holds(leaf('args.amount', 'ne', 'USD'), a), 'type mismatch is false');
  t.notOk(holds(leaf('args.missing', 'ne', 'USD'), a), 'missing field is false');
  t.notOk(holds(leaf('args.nested', 'eq', 'x'), a), 'object never equals a primitive');
});

t.test('in / not_in', async (t) => {
  t.ok(holds(leaf('args.currency', 'in', ['USD', 'EUR']), a));
  t.notOk(holds(leaf('args.currency', 'in', ['USD', 'GBP']), a));
  t.notOk(holds(leaf('args.tags', 'in', ['urgent']), a), 'arrays are not members');
  t.ok(holds(leaf('args.currency', 'not_in', ['USD', 'GBP']), a));
  t.notOk(holds(leaf('args.currency', 'not_in', ['EUR']), a));
  t.notOk(holds(leaf('args.amount', 'not_in', ['EUR']), a), 'number vs list of strings is a mismatch');
  t.notOk(holds(leaf('args.missing', 'not_in', ['EUR']), a), 'missing field is false');
  t.ok(holds(leaf('args.amount', 'not_in', [1, 2]), a));
});

t.test('gt / gte / lt / lte', async (t) => {
  t.ok(holds(leaf('args.amount', 'gt', 1000), a));
  t.notOk(holds(leaf('args.amount', 'gt', 1500), a));
  t.ok(holds(leaf('args.amount', 'gte', 1500), a));
  t.notOk(holds(leaf('args.amount', 'gte', 1501), a));
  t.ok(holds(leaf('args.amount', 'lt', 1501), a));
  t.notOk(holds(leaf('args.amount', 'lt', 1500), a));
  t.ok(holds(leaf('args.amount', 'lte', 1500), a));
  t.notOk(holds(leaf('args.amount', 'lte', 1499), a));
  // A value that is there but is not a number cannot be compared; it must not slip past a
  // threshold, so a restrictive rule's comparison fails closed, an allow rule's does not hold.
  const allows = (cond: unknown, x: Action): boolean => {
    const policy = compileOk({
      detectors: offDetectors,
      default: 'block',
      rules: [{ id: 'r', when: cond, [THEN]: 'allow' }],
    });
    return evaluate(policy, x).effect === 'allow';
  };
  for (const op of ['gt', 'gte', 'lt', 'lte']) {
    t.ok(holds(leaf('args.currency', op, 0), a), `${op} on a string: a block rule holds`);
    t.ok(holds(leaf('args.tags', op, 0), a), `${op} on an array: a block rule holds`);
    t.notOk(holds(leaf('args.missing', op, 0), a), `${op} on a missing field is false`);
    t.notOk(holds(leaf('args.nothing', op, 0), a), `${op} on null is false`);
    t.notOk(allows(leaf('args.currency', op, 0), a), `${op} on a string: an allow rule does not hold`);
    t.ok(
      allows(leaf('args.amount', op, 1500), a) === (op === 'gte' || op === 'lte'),
      `${op}: allow on a number compares`,
    );
    // Under `not` the value flips, so the rule still matches.
    t.ok(holds({ not: leaf('args.currency', op, 0) }, a), `${op} under not: the block rule holds`);
    t.notOk(allows({ not: leaf('args.currency', op, 0) }, a), `${op} under not: the allow rule does not`);
  }
  t.ok(
    holds(leaf('args.amount', 'gt', 1000), action({ args: { amount: '5' } })),
    'a numeric string is not a number: a block rule on it holds (fail closed)',
  );
});

t.test('contains', async (t) => {
  t.ok(holds(leaf('args.note', 'contains', 'ACME'), a), 'substring');
  t.notOk(holds(leaf('args.note', 'contains', 'acme'), a), 'case sensitive');
  t.ok(holds(leaf('args.tags', 'contains', 'urgent'), a), 'array membership');
  t.ok(holds(leaf('args.tags', 'contains', 7), a), 'array membership, number');
  t.notOk(holds(leaf('args.tags', 'contains', 'q4'), a));
  t.notOk(holds(leaf('args.amount', 'contains', '1'), a), 'number does not contain');
  t.notOk(holds(leaf('args.note', 'contains', 4), a), 'number in a string is a mismatch');
  t.notOk(holds(leaf('args.missing', 'contains', 'x'), a));
});

t.test('matches', async (t) => {
  t.ok(holds(leaf('args.note', 'matches', '^invoice \\d+'), a));
  t.notOk(holds(leaf('args.note', 'matches', '^receipt'), a));
  t.ok(holds({ all: [{ field: 'args.note', op: 'matches', value: 'acme$', flags: 'i' }] }, a), 'flags i');
  t.notOk(holds(leaf('args.amount', 'matches', '1500'), a), 'non-string is false');
  t.notOk(holds(leaf('args.missing', 'matches', '.*'), a));
  t.ok(holds(leaf('tool', 'matches', '^payments\\.'), a), 'top-level field');
});

t.test('exists', async (t) => {
  t.ok(holds(leaf('args.amount', 'exists', true), a));
  t.ok(holds(leaf('args.amount', 'exists'), a), 'value defaults to true');
  t.notOk(holds(leaf('args.missing', 'exists', true), a));
  t.ok(holds(leaf('args.missing', 'exists', false), a));
  t.notOk(holds(leaf('args.nothing', 'exists', true), a), 'null does not exist');
  t.ok(holds(leaf('args.nothing', 'exists', false), a));
  t.notOk(holds(leaf('args.amount', 'exists', false), a));
});

t.test('field paths', async (t) => {
  t.ok(holds(leaf('args.nested.deep.er', 'eq', 'x'), a), 'three levels');
  t.ok(holds(leaf('args.items.1.sku', 'eq', 'B-2'), a), 'array index');
  t.ok(holds(leaf('payload.x.y', 'eq', 'hello'), a));
  t.notOk(holds(leaf('args.note.length', 'exists', true), a), 'no properties of strings');
  t.notOk(holds(leaf('args.constructor', 'exists', true), a), 'prototype not reachable');
  t.notOk(holds(leaf('args.__proto__', 'exists', true), a), '__proto__ not reachable');
  t.notOk(holds(leaf('args.amount', 'eq', 1500), action()), 'no args at all');
  t.ok(holds(leaf('args', 'exists', true), a));
  const deep = { a: { b: { c: { d: { e: 5 } } } } };
  t.ok(holds(leaf('args.a.b.c.d.e', 'eq', 5), action({ args: deep })), 'five levels');
  t.notOk(holds(leaf('args.a.b.x.d.e', 'eq', 5), action({ args: deep })));
  const det = { pii: ['email'], secrets: [], injection: { jailbreak: 0.4 }, unicode: [] };
  t.ok(holds(leaf('detections.pii', 'contains', 'email'), action({ detections: det })));
  t.ok(holds(leaf('detections.injection.jailbreak', 'gte', 0.3), action({ detections: det })));
  t.notOk(holds(leaf('detections.injection.jailbreak', 'gte', 0.5), action({ detections: det })));
  t.notOk(holds(leaf('detections.pii', 'contains', 'email'), a), 'no detections');
});

t.test('name conditions and globs', async (t) => {
  t.ok(holds({ tool: 'payments.transfer' }, a));
  t.notOk(holds({ tool: 'payments.refund' }, a));
  t.ok(holds({ tool: 'payments.*' }, a));
  t.ok(holds({ tool: '*.transfer' }, a));
  t.ok(holds({ tool: 'pay*trans*' }, a));
  t.notOk(holds({ tool: 'pay*x*' }, a));
  t.ok(holds({ tool: ['shell.exec', 'payments.*'] }, a), 'list = in');
  t.ok(holds({ model: 'gpt-*' }, a));
  t.notOk(holds({ model: 'claude-*' }, a));
  t.notOk(holds({ server: 'github' }, a), 'absent field never matches');
  t.ok(holds({ agent_id: 'agent-*' }, a));
  t.ok(holds({ type: ['LLM_CALL', 'TOOL_CALL'] }, a));
  t.notOk(holds({ type: 'LLM_CALL' }, a));
  t.ok(holds({ provider: 'openai' }, action({ provider: 'openai' })));
  t.ok(holds({}, a), 'empty when matches everything');
  t.ok(holds(undefined, a), 'absent when matches everything');
});

t.test('all / any / not nesting', async (t) => {
  const big = { field: 'args.amount', op: 'gt', value: 1000 };
  const usd = { field: 'args.currency', op: 'eq', value: 'USD' };
  t.ok(holds({ all: [big, { not: usd }] }, a));
  t.notOk(holds({ all: [big, usd] }, a));
  t.ok(holds({ any: [usd, big] }, a));
  t.notOk(holds({ any: [usd, { not: big }] }, a));
  t.ok(holds({ not: { all: [big, usd] } }, a));
  t.notOk(holds({ not: { any: [big, usd] } }, a));
  t.ok(
    holds({ any: [{ all: [usd] }, { all: [{ tool: 'payments.*' }, { not: { model: 'claude-*' } }] }] }, a),
  );
  t.ok(holds({ not: { field: 'args.amount', op: 'eq', value: 'x' } }, a), 'not of a mismatch is true');
  t.ok(holds({ all: [big, big, big, big, { any: [usd, usd, big] }] }, a), 'long lists');
  t.notOk(holds({ all: [big, big, big, usd] }, a));
  t.notOk(holds({ any: [usd, usd, usd] }, a));
  t.ok(
    holds({ tool: 'payments.*', field: 'args.amount', op: 'gt', value: 1, not: usd }, a),
    'keys AND together',
  );
  t.notOk(holds({ tool: 'shell.*', field: 'args.amount', op: 'gt', value: 1 }, a));
});
