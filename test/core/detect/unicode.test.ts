import t from 'tap';
import { detect } from '../../../src/core/detect/index.js';
import { checkCorpus } from './corpus.js';

function tricks(text: string): [string, number, number][] {
  return detect(text, { pii: false, secrets: false, injection: false }).findings.map((f) => [
    f.type,
    f.start,
    f.end,
  ]);
}

t.test('corpus: precision and recall', async (t) => {
  checkCorpus(t, 'unicode.json', 'unicode', 'unicode');
});

t.test('every listed code point is reported with its type', async (t) => {
  const invisible = [0x200b, 0x200c, 0x200d, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x180e, 0xfeff];
  const bidi = [
    0x200e, 0x200f, 0x061c, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069,
  ];
  for (const cp of invisible)
    t.same(tricks(`a${String.fromCodePoint(cp)}b`), [['invisible', 1, 2]], cp.toString(16));
  for (const cp of bidi) t.same(tricks(`a${String.fromCodePoint(cp)}b`), [['bidi', 1, 2]], cp.toString(16));
  t.same(tricks('a\u{E0041}\u{E0042}b'), [['invisible', 1, 5]], 'tag characters are two code units each');
  t.same(tricks('a\u{E0080}b'), [], 'just past the tag block');
});

t.test('runs: one finding per run of one type', async (t) => {
  t.same(tricks('x\u200b\u200c\u2060y'), [['invisible', 1, 4]]);
  t.same(tricks('x\u202e\u2066y'), [['bidi', 1, 3]]);
  t.same(tricks('x\u200b\u202ey'), [
    ['invisible', 1, 2],
    ['bidi', 2, 3],
  ]);
  t.same(tricks('x\u200b y\u200b'), [
    ['invisible', 1, 2],
    ['invisible', 4, 5],
  ]);
});

t.test('legitimate uses are not tricks', async (t) => {
  t.same(tricks('\ufeffhello'), [], 'BOM at the start');
  t.same(tricks('\ufeff\ufeffhello'), [['invisible', 0, 2]], 'but not two of them');
  t.same(tricks('👩‍💻 ❤️‍🔥'), [], 'emoji ZWJ sequences');
  t.same(tricks('a\u200d💻'), [['invisible', 1, 2]], 'ZWJ after a letter is not an emoji sequence');
  t.same(tricks('🏴\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}'), [], 'subdivision flag');
  t.same(tricks('🏴\u{E0067}\u{E0062}'), [['invisible', 2, 6]], 'flag tags without the cancel tag');
  t.same(tricks('می\u200cخواهم'), [], 'Persian ZWNJ');
});

t.test('unicode: false hides the findings but the other detectors still see through them', async (t) => {
  const text = 'key AKIAIOSFODNN7\u200bEXAMPLE';
  const r = detect(text, { unicode: false });
  t.same(
    r.findings.map((f) => [f.type, text.slice(f.start, f.end)]),
    [['aws_access_key', 'AKIAIOSFODNN7\u200bEXAMPLE']],
  );
});
