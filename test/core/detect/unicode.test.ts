import t from 'tap';
import { detect, redact } from '../../../src/core/detect/index.js';
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
  t.same(tricks('a\u{E0080}b'), [['invisible', 1, 3]], 'past the tag block: still default-ignorable');
  t.same(tricks('a\u{E1000}b'), [], 'past the default-ignorable block');
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
  // Sequences whose last part is a symbol outside Misc Symbols and Dingbats (⬛ U+2B1B, ⭐ U+2B50).
  t.same(tricks('🐈‍⬛ 🐦‍⬛ 👨‍👩‍👧 🏳️‍⚧️ 🧑‍⚕️'), [], 'emoji ZWJ sequences ending in a BMP symbol');
  t.same(
    tricks('a\u200d⬛'),
    [['invisible', 1, 2]],
    'ZWJ after a letter, before a symbol, is not a sequence',
  );
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

t.test('every default-ignorable and format character is invisible, not only a hand list', async (t) => {
  const invisible = [
    0x00ad, // soft hyphen
    0x034f, // combining grapheme joiner
    0x115f, // Hangul choseong filler
    0x1160, // Hangul jungseong filler
    0x17b4, // Khmer vowel inherent aq
    0x17b5,
    0x2065, // unassigned, default-ignorable
    0x206a, // inhibit symmetric swapping … nominal digit shapes
    0x206f,
    0x3164, // Hangul filler
    0xffa0, // half-width Hangul filler
    0xfff0, // unassigned, default-ignorable
    0xfff9, // interlinear annotation anchor
    0xfffb,
    0x1bca0, // shorthand format letter overlap
    0x1d173, // musical symbol begin beam
    0xe0001, // language tag
    0xe0fff, // unassigned, default-ignorable
  ];
  for (const cp of invisible) {
    const ch = String.fromCodePoint(cp);
    t.same(tricks(`a${ch}b`), [['invisible', 1, 1 + ch.length]], cp.toString(16));
  }
  t.same(tricks('a\uFE0Fb'), [['invisible', 1, 2]], 'a variation selector after a Latin letter');
  t.same(tricks('a\u{E0100}b'), [['invisible', 1, 3]], 'a supplementary variation selector after a letter');
  t.same(tricks('Ig\u00AD\u034Fnore'), [['invisible', 2, 4]], 'one run of mixed invisible characters');
  t.same(tricks('a\u00AD\u202Eb'), [
    ['invisible', 1, 2],
    ['bidi', 2, 3],
  ]);
});

t.test('legitimate variation selectors and visible format characters are not tricks', async (t) => {
  t.same(tricks('☺\uFE0E ☺\uFE0F ❤️ ‼️ ©️ 1️⃣ #️⃣ 🏳️‍🌈 👍🏿'), [], 'emoji and text presentation, keycaps');
  t.same(tricks('葛\u{E0100}城市'), [], 'an ideographic variation sequence');
  t.same(tricks('ᠠ\u180Bᠢ'), [], 'a Mongolian free variation selector');
  t.same(tricks('\u0600١٢٣ and \u06DD١'), [], 'Arabic number signs are visible');
});

t.test('mixed-script words: Latin letters with Cyrillic or Greek look-alikes', async (t) => {
  t.same(tricks('Ign\u043Ere all'), [['mixed_script', 0, 6]], 'Cyrillic o');
  t.same(tricks('please \u0440ay now'), [['mixed_script', 7, 10]], 'Cyrillic er');
  t.same(tricks('the \u03B1dmin'), [['mixed_script', 4, 9]], 'Greek alpha');
  t.same(
    tricks('Ig\u00ADn\u043Ere'),
    [
      ['mixed_script', 0, 7],
      ['invisible', 2, 3],
    ],
    'a soft hyphen does not split the word',
  );
  t.same(tricks('Greek αβγ and Cyrillic текст, Привет мир, Καλημέρα'), [], 'whole words of one script');
  t.same(tricks('a PDF-файл and 10 μs, 5 μm'), [], 'words joined by a hyphen, micro units');
  t.same(tricks('Ｉｇｎｏｒｅ'), [], 'full-width Latin is one script (the detectors fold it)');
});

t.test('redact() removes invisible characters but keeps a mixed-script word', async (t) => {
  const text = 'Ign\u043Ere\u200B all';
  const r = detect(text, { pii: false, secrets: false, injection: false });
  t.equal(redact(text, r.findings), 'Ign\u043Ere all');
});
