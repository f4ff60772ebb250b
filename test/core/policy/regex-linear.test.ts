import t from 'tap';
import { MAX_MATCH_INPUT } from '../../../src/core/policy/conditions.js';
import { compilePolicy, evaluate } from '../../../src/core/policy/index.js';
import { checkRegex, foldCase } from '../../../src/core/policy/regex-safety.js';
import { action, compileOk, problemsOf, THEN } from './helpers.js';

// The reviewer's pattern: safe-regex2 accepts it, V8's backtracking engine is O(n^3) on it.
const SQL = '(delete|update).*from.*where.*1\\s*=\\s*1';
const POLYNOMIAL: [string, string, string][] = [
  [SQL, 'i', 'delete from where '],
  ['a.*b.*c.*d', '', 'abc'],
  ['.*.*.*.*.*.*.*.*.*.*X', '', 'a'],
  ['^(\\w+\\s?)*$', '', 'ab '],
];
// Up to the longest string a `matches` reads (longer ones fail closed: below).
const ADVERSARIAL = MAX_MATCH_INPUT;

const rule = (value: string, flags = '', then = 'block') => ({
  rules: [
    {
      id: 'r',
      when: { all: [{ field: 'args.s', op: 'matches', value, ...(flags ? { flags } : {}) }] },
      [THEN]: then,
    },
  ],
});

t.test('every accepted rule regex runs on the linear-time engine', async (t) => {
  for (const [p, flags] of [...POLYNOMIAL, ['^prod[-_]', 'i', ''], ['^a$', 'ms', '']]) {
    const r = checkRegex(p as string, flags);
    if (!r.ok) continue; // refused at compile time is the other safe answer
    t.ok(r.regex.flags.includes('l'), `${p} /${flags}: linear engine`);
    t.notOk(r.regex.flags.includes('i'), 'the engine has no i: case is folded into the pattern');
  }
});

t.test('polynomial patterns are refused or linear on a 64 KB adversarial input', async (t) => {
  for (const [p, flags, unit] of POLYNOMIAL) {
    const c = compilePolicy(rule(p, flags));
    const ps = c.ok ? [] : c.problems;
    if (ps.length > 0) {
      t.same(
        ps.map((x) => x.path),
        ['rules[0].when.all[0].value'],
        `${p}: refused`,
      );
      continue;
    }
    const checked = checkRegex(p, flags);
    // Without the linear engine the match below would run for hours: fail instead of hanging.
    if (!checked.ok || !checked.regex.flags.includes('l')) {
      t.fail(`${p}: accepted but not on the linear engine`);
      continue;
    }
    const policy = compileOk(rule(p, flags));
    const s = unit.repeat(Math.ceil(ADVERSARIAL / unit.length)).slice(0, ADVERSARIAL);
    const start = process.hrtime.bigint();
    const d = evaluate(policy, action({ args: { s } }));
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    t.equal(d.outcome, 'allow', `${p}: no match`);
    // Orders of magnitude only (a loaded CI machine must not flake it): ~0.1-0.3 s here, while
    // the backtracking engine needed 25 s for 7.2 KB of the first pattern and hours for this.
    t.ok(ms < 20_000, `${p}: ${s.length} characters in ${ms.toFixed(0)} ms`);
  }
  // Still matching what it should.
  t.equal(
    evaluate(compileOk(rule(SQL, 'i')), action({ args: { s: 'DELETE FROM t WHERE 1 = 1' } })).outcome,
    'block',
  );
});

t.test('a string past MAX_MATCH_INPUT is not searched: the condition fails closed', async (t) => {
  const long = `${'x'.repeat(MAX_MATCH_INPUT)}y`;
  const on = (r: unknown, s: string) => evaluate(compileOk(r), action({ args: { s } })).outcome;
  // A deny rule fires whether or not the pattern is in it (padding does not slip past it)...
  t.equal(on(rule('^nothing-like-this$'), long), 'block');
  t.equal(on(rule('^nothing-like-this$'), 'short'), 'allow', 'a short one is searched');
  // ...an allow rule does not, and under `not` the polarity flips.
  const allowIt = {
    rules: [{ id: 'a', when: { field: 'args.s', op: 'matches', value: 'x' }, [THEN]: 'allow' }],
  };
  t.not(evaluate(compileOk(allowIt), action({ args: { s: long } })).rule_id, 'a');
  const notRule = {
    rules: [{ id: 'n', when: { not: { field: 'args.s', op: 'matches', value: 'x' } }, [THEN]: 'block' }],
  };
  t.equal(
    evaluate(compileOk(notRule), action({ args: { s: long } })).outcome,
    'block',
    'not: fails closed too',
  );
  // And it costs nothing: the string is not read.
  const huge = 'delete from where '.repeat(250_000);
  const start = process.hrtime.bigint();
  on(rule(SQL, 'i'), huge);
  t.ok(Number(process.hrtime.bigint() - start) / 1e6 < 1_000, '4.5 MB is not searched');
});

t.test('what the linear-time engine cannot run is refused with the rule path', async (t) => {
  const cases: [string, string, RegExp][] = [
    ['(a)\\1', '', /backreferences/],
    ['(?<q>a)\\k<q>', '', /backreferences/],
    ['a(?=b)', '', /linear time/],
    ['(?<!a)b', '', /linear time|backtrack/],
    ['a{1000}', '', /linear time/],
    ['x', 'u', /flag/],
    ['\\p{L}', 'u', /flag/],
    ['(x+x+)+y', '', /backtrack/],
    ['(a)\\1', 'i', /backreferences/],
  ];
  for (const [p, flags, message] of cases) {
    const ps = problemsOf(rule(p, flags));
    t.same(
      ps.map((x) => x.path),
      ['rules[0].when.all[0].value'],
      `${p} /${flags}`,
    );
    t.match(ps[0]?.message, message, `${p} /${flags}: ${ps[0]?.message}`);
  }
});

t.test('the i flag: the folded pattern matches exactly what V8 matches with i', async (t) => {
  const patterns = [
    'acme$',
    '^prod[-_]',
    'ſ',
    'K',
    '\\u212a',
    'é+',
    '[a-z]+',
    '[^a-z]',
    '[A-F0-9]',
    '[\\u00c0-\\u00ff]',
    '[^\\u0100-\\u017f]',
    'σ',
    '[Σ-Ω]',
    'ß',
    'İı',
    '\\x41\\u00e9',
    '\\q\\.',
    '[\\w-z]',
    '[^\\W]',
    '\\bk\\B',
    '[\\b]',
    '[]',
    '[^]',
    '(?<Name>n)x',
    '\\cA',
    'p{L}',
    '\\u{2}',
    'µ',
    'ϐ',
    '(?:ab|CD){2}',
  ];
  const chars = 'aAbBcCdDkKnNxXzZſ\u212aéÉßσΣςΩωµΜİıiIqQpPLl{}-_. 0\t\u0001\u00ffÿŸϐβΒ\u0130\u0100\u0101';
  let checked = 0;
  for (const p of patterns) {
    const want = new RegExp(p, 'i');
    const folded = foldCase(p);
    if (typeof folded !== 'string') {
      t.fail(`${p}: ${folded.message}`);
      continue;
    }
    const got = new RegExp(folded, 'l');
    // Every string of one or two characters from the alphabet, plus the characters in context.
    for (const a of chars) {
      for (const b of ['', ...chars]) {
        for (const s of [a + b, `x${a}${b}x`]) {
          checked++;
          if (want.test(s) !== got.test(s)) t.fail(`${p} on ${JSON.stringify(s)}: ${folded}`);
        }
      }
    }
  }
  t.ok(checked > 100_000, `${checked} comparisons`);
});

t.test('a stored version keeps loading: a refused regex fails closed', async (t) => {
  const a = action({ args: { s: 'anything' } });
  const stored = (r: unknown) => {
    const c = compilePolicy(r, { stored: true });
    if (!c.ok) throw new Error(JSON.stringify(c.problems));
    return c.policy;
  };
  t.notOk(compilePolicy(rule('(a)\\1')).ok, 'refused when submitted');
  t.equal(evaluate(stored(rule('(a)\\1')), a).outcome, 'block', 'a block rule matches');
  t.equal(evaluate(stored(rule('x', 'u', 'require_approval')), a).outcome, 'needs_approval');
  const notRule = {
    rules: [{ id: 'r', when: { not: { field: 'args.s', op: 'matches', value: 'a(?=b)' } }, [THEN]: 'block' }],
  };
  t.equal(evaluate(stored(notRule), a).outcome, 'block', 'under not, the leaf is flipped');
  const allow = { default: 'block', ...rule('(a)\\1', '', 'allow') };
  t.equal(evaluate(stored(allow), a).outcome, 'block', 'an allow rule does not match');
  // What was never accepted is still refused.
  t.notOk(compilePolicy(rule('(a+)+$'), { stored: true }).ok);
  t.notOk(compilePolicy(rule('(unclosed'), { stored: true }).ok);
  // A supported pattern in a stored version works as usual.
  t.equal(evaluate(stored(rule('^any', 'i')), a).outcome, 'block');
  t.equal(evaluate(stored(rule('^none')), a).outcome, 'allow');
});

t.test('legacy octal escapes name their character, as in JavaScript; the i flag refuses them', async (t) => {
  for (const [pattern, text] of [
    ['\\01', '\u0001'],
    ['a\\7', 'a\u0007'],
    ['\\101', 'A'],
  ] as const) {
    const checked = checkRegex(pattern);
    t.ok(checked.ok, pattern);
    if (checked.ok) {
      t.ok(checked.regex.test(text), `${pattern} matches its character`);
      t.notOk(checked.regex.test(pattern.slice(1)), `${pattern} does not match its digits`);
    }
  }
  const folded = checkRegex('\\01', 'i');
  t.equal(folded.ok, false);
  t.ok(checkRegex('\\x01', 'i').ok, 'the hex escape is the way under i');
});

t.test('a stored version lists the conditions that fail closed, for the operator', async (t) => {
  const stored = (r: unknown) => {
    const c = compilePolicy(r, { stored: true });
    if (!c.ok) throw new Error(JSON.stringify(c.problems));
    return c.policy;
  };
  t.same(stored(rule('(a)\\1')).failClosed, [
    {
      rule_id: 'r',
      effect: 'block',
      path: 'rules[0].when.all[0].value',
      reason:
        'regex cannot run in linear time: backreferences, lookarounds and large counted repeats such as {1000} are not supported',
      taken_as: true,
    },
  ]);
  t.match(stored(rule('x', 'u', 'allow')).failClosed, [
    { effect: 'allow', taken_as: false, reason: /flag u/ },
  ]);
  t.same(stored(rule('^fine$', 'i')).failClosed, [], 'a supported regex');
  const ok = compilePolicy(rule('^fine$'));
  t.same(ok.ok && ok.policy.failClosed, [], 'a rule set compiled for submission has none');
});
