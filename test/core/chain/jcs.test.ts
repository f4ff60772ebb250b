import fc from 'fast-check';
import t from 'tap';
import { ChainError, canonicalize } from '../../../src/core/chain/index.js';

const FC = { seed: 8785, numRuns: 300 };

t.test('RFC 8785 §3.2.2 example: literals, numbers, string escaping', async (t) => {
  // The RFC's input text, parsed as any stored event is.
  const input: unknown = JSON.parse(
    `{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],` +
      String.raw`"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}`,
  );
  t.equal(
    canonicalize(input),
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
      '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
  );
});

t.test('RFC 8785 §3.2.3 example: members sorted by UTF-16 code units', async (t) => {
  const input = {
    '\u20ac': 'Euro Sign',
    '\r': 'Carriage Return',
    '\ufb33': 'Hebrew Letter Dalet With Dagesh',
    '1': 'One',
    '\ud83d\ude00': 'Emoji: Grinning Face',
    '\u0080': 'Control',
    '\u00f6': 'Latin Small Letter O With Diaeresis',
  };
  t.equal(
    canonicalize(input),
    '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",' +
      '"\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
  );
});

t.test('ECMAScript number serialization (RFC 8785 appendix B values)', async (t) => {
  const cases: Array<[number, string]> = [
    [0, '0'],
    [-0, '0'],
    [1, '1'],
    [-1.5, '-1.5'],
    [1e21, '1e+21'],
    [1e20, '100000000000000000000'],
    [999999999999999900000, '999999999999999900000'],
    [0.000001, '0.000001'],
    [1e-7, '1e-7'],
    [5e-324, '5e-324'],
    [1.7976931348623157e308, '1.7976931348623157e+308'],
    [-1.7976931348623157e308, '-1.7976931348623157e+308'],
    [9007199254740992, '9007199254740992'],
    [295147905179352830000, '295147905179352830000'],
    [0.1 + 0.2, '0.30000000000000004'],
    [4.35, '4.35'],
    [1e23, '1e+23'],
  ];
  for (const [n, text] of cases) t.equal(canonicalize(n), text, `${text}`);
});

t.test('string escaping: controls, quotes, backslash; non-ASCII as is', async (t) => {
  t.equal(canonicalize('\b\t\n\f\r'), '"\\b\\t\\n\\f\\r"');
  t.equal(canonicalize('\u0000\u001f\u007f'), '"\\u0000\\u001f\u007f"');
  t.equal(canonicalize('</script>\u2028\u2029é漢字😀'), '"</script>\u2028\u2029é漢字😀"');
  // Extension: a lone surrogate is escaped (injective), never replaced by U+FFFD.
  t.equal(canonicalize('a\ud800b'), '"a\\ud800b"');
  t.not(canonicalize('\ud800'), canonicalize('\ufffd'));
});

t.test('structure: no whitespace, nested sorting, undefined members dropped', async (t) => {
  t.equal(canonicalize({ b: [1, { z: 1, a: 2 }], a: {} }), '{"a":{},"b":[1,{"a":2,"z":1}]}');
  t.equal(canonicalize({ a: undefined, b: 1 }), '{"b":1}');
  t.equal(canonicalize([]), '[]');
  // Key order ignores insertion order; "10" < "9" as code units.
  t.equal(canonicalize({ 9: 'a', 10: 'b', B: 1, a: 2 }), '{"10":"b","9":"a","B":1,"a":2}');
});

t.test('refusals are typed', async (t) => {
  const code = (v: unknown): string | undefined => {
    try {
      canonicalize(v);
      return undefined;
    } catch (err) {
      return err instanceof ChainError ? err.code : 'untyped';
    }
  };
  t.equal(code(Number.NaN), 'jcs_non_finite_number');
  t.equal(code({ x: [1, Number.POSITIVE_INFINITY] }), 'jcs_non_finite_number');
  t.equal(code(-Infinity), 'jcs_non_finite_number');
  t.equal(code([1, undefined]), 'jcs_undefined_in_array');
  // biome-ignore lint/suspicious/noSparseArray: a hole reads as undefined
  t.equal(code([1, , 2]), 'jcs_undefined_in_array');
  t.equal(code(undefined), 'jcs_unsupported_type');
  t.equal(code(10n), 'jcs_unsupported_type');
  t.equal(code({ f: () => 1 }), 'jcs_unsupported_type');
  t.equal(code(new Uint8Array(2)), 'jcs_unsupported_type');
  let deep: unknown = 1;
  for (let i = 0; i < 600; i++) deep = [deep];
  t.equal(code(deep), 'jcs_too_deep');
});

// Reference: sorted members by hand, everything else by JSON.stringify (the ECMAScript rules JCS
// adopts). Not via JSON.stringify of a re-keyed object: integer-like keys ("0") always enumerate
// first in JS objects, whatever the insertion order.
function sortedJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(sortedJson).join(',')}]`;
  if (typeof v === 'object' && v !== null) {
    const rec = v as Record<string, unknown>;
    const keys = Object.keys(rec).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${sortedJson(rec[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

// defineProperty, so a generated "__proto__" key stays an own data property.
function define(o: Record<string, unknown>, k: string, value: unknown): void {
  Object.defineProperty(o, k, { value, enumerable: true, writable: true, configurable: true });
}

function shuffleKeysDeep(v: unknown, flip: boolean): unknown {
  if (Array.isArray(v)) return v.map((x) => shuffleKeysDeep(x, !flip));
  if (typeof v === 'object' && v !== null) {
    const keys = Object.keys(v);
    if (flip) keys.reverse();
    const out: Record<string, unknown> = {};
    for (const k of keys) define(out, k, shuffleKeysDeep((v as Record<string, unknown>)[k], !flip));
    return out;
  }
  return v;
}

t.test('properties over random JSON', async (t) => {
  const json = fc.jsonValue();
  fc.assert(
    fc.property(json, (v) => {
      const c = canonicalize(v);
      if (c !== sortedJson(v)) return false;
      // Round trip and idempotence.
      if (canonicalize(JSON.parse(c)) !== c) return false;
      // Insertion order does not matter.
      return canonicalize(shuffleKeysDeep(v, true)) === c;
    }),
    FC,
  );
  t.pass('canonical text is sorted JSON, round-trips, and ignores insertion order');
});

t.test('numbers: output parses back to the same double', async (t) => {
  fc.assert(
    fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (n) => {
      const s = canonicalize(n);
      return Object.is(Number(s), n === 0 ? 0 : n) && s === JSON.stringify(n);
    }),
    { ...FC, numRuns: 2000 },
  );
  t.pass('round trip');
});

t.test(
  'member order over any UTF-16 names, every object size, as Array.prototype.sort orders them',
  async (t) => {
    // Names of any code units (lone surrogates, astral pairs, controls, prefixes of each other) and
    // objects of 0–20 members: the small ones are sorted by insertion, the larger ones memoised.
    const name = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 4 }),
      fc.constantFrom('a', 'ab', 'b', 'B', '_', '\ud800', '\udc00', '\ud83d\ude00', '\uffff', 'é', ''),
    );
    const obj = fc.dictionary(name, fc.integer(), { maxKeys: 20 });
    fc.assert(
      fc.property(obj, (o) => {
        const want = `{${Object.keys(o)
          .sort()
          .map((k) => `${JSON.stringify(k)}:${o[k]}`)
          .join(',')}}`;
        return canonicalize(o) === want && canonicalize({ x: [o, o] }) === `{"x":[${want},${want}]}`;
      }),
      { numRuns: 2000 },
    );
    t.pass('2,000 objects agree with a default sort of their names');
  },
);
