import t from 'tap';
import { compileGlob, compileNameMatcher } from '../../../src/core/policy/glob.js';

t.test('globs', async (t) => {
  const cases: [string, string, boolean][] = [
    ['payments.transfer', 'payments.transfer', true],
    ['payments.transfer', 'payments.transfers', false],
    ['payments.*', 'payments.transfer', true],
    ['payments.*', 'payments.', true],
    ['payments.*', 'payment.x', false],
    ['*.exec', 'shell.exec', true],
    ['*.exec', 'shell.execute', false],
    ['gpt-*-mini', 'gpt-4o-mini', true],
    ['gpt-*-mini', 'gpt-mini', false],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'axxbyyc', true],
    ['a*b*c', 'acb', false],
    ['a*bc*bc', 'abcbc', true],
    ['a*bc*bc', 'abc', false],
    ['a*b*b', 'axb', false],
    ['a*b*b', 'abb', true],
    ['*', '', true],
    ['**', 'anything', true],
    ['*x*', 'aaxaa', true],
    ['*x*', 'aaaa', false],
  ];
  for (const [pattern, name, want] of cases)
    t.equal(compileGlob(pattern)(name), want, `${pattern} ~ ${name}`);
});

t.test('name matchers', async (t) => {
  const m = compileNameMatcher(['shell.exec', 'fs.*']);
  t.ok(m.test('shell.exec'));
  t.ok(m.test('fs.write'));
  t.notOk(m.test('payments.transfer'));
  t.same(m.patterns, ['shell.exec', 'fs.*']);
  t.ok(compileNameMatcher(['a']).test('a'));
  t.notOk(compileNameMatcher(['a', 'b']).test('c'));
});
