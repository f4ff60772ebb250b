import { createHash } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import {
  ChainError,
  canonicalEventBytes,
  canonicalEventParts,
  canonicalEventString,
  canonicalize,
  GENESIS,
  hashEvent,
  linkEvent,
  personalField,
} from '../../../src/core/chain/index.js';
import { draft } from './helpers.js';

t.test('GENESIS is 64 zeros', async (t) => {
  t.equal(GENESIS, '0000000000000000000000000000000000000000000000000000000000000000');
});

t.test('canonical form: JCS without hash and seal, personal reduced to commitments', async (t) => {
  const event = {
    seq: 1,
    id: 'ae_1',
    hash: 'ignored',
    seal: { seq: 3 },
    personal: { end_user: { value: 'a@b.c', salt: 's', c: 'c0ffee' } },
    prev_hash: GENESIS,
    _chain_version: 2,
    cost: 1.5,
    details: null,
  };
  const text = canonicalEventString(event);
  t.equal(
    text,
    `{"_chain_version":2,"cost":1.5,"details":null,"id":"ae_1","personal":{"end_user":"c0ffee"},` +
      `"prev_hash":"${GENESIS}","seq":1}`,
  );
  t.same(canonicalEventBytes(event), new Uint8Array(Buffer.from(text, 'utf8')));
});

t.test('canonical parts: head + committed + rest + } is the canonical text, cut at personal', async (t) => {
  const key = fc.oneof(
    fc.constantFrom('personal', 'id', 'seq', 'hash', 'seal', '_chain_version', 'zeta', 'a', 'p\u00e9rsonal'),
    fc.string({ maxLength: 6 }),
  );
  const personal = fc.dictionary(
    fc.string({ maxLength: 5 }),
    fc.record({
      value: fc.jsonValue({ maxDepth: 2 }),
      salt: fc.string(),
      c: fc.string({ unit: fc.constantFrom(...'0123456789abcdef') }),
    }),
  );
  fc.assert(
    fc.property(fc.dictionary(key, fc.jsonValue({ maxDepth: 2 })), fc.option(personal), (fields, p) => {
      const event: Record<string, unknown> = { ...fields };
      if (p !== null) event.personal = p;
      else delete event.personal;
      // Reference: plain JCS of the event without hash and seal, personal reduced to commitments.
      const reference: Record<string, unknown> = { ...event };
      delete reference.hash;
      delete reference.seal;
      if (p !== null) {
        const commitments: Record<string, unknown> = Object.create(null);
        for (const f of Object.keys(p)) commitments[f] = (p[f] as { c: string }).c;
        reference.personal = commitments;
      }
      const { head, committed, rest } = canonicalEventParts(event);
      const text = canonicalize(reference);
      if (`${head}${committed}${rest}}` !== text || canonicalEventString(event) !== text) return false;
      return p === null ? head === '' && committed === '' : head.endsWith('"personal":');
    }),
    { numRuns: 2_000 },
  );
  const parts = canonicalEventParts({
    seq: 1,
    personal: { e: { value: 'x', salt: 's', c: 'ab' } },
    id: 'ae_1',
  });
  t.same(parts, { head: '{"id":"ae_1","personal":', committed: '{"e":"ab"}', rest: ',"seq":1' });
});

t.test('hash = SHA-256(prev_hash as 64 ASCII hex ‖ UTF-8 canonical)', async (t) => {
  const e = linkEvent(GENESIS, draft(1, { reason: 'ünïcödé' }));
  const expected = createHash('sha256')
    .update(Buffer.concat([Buffer.from(GENESIS, 'ascii'), Buffer.from(canonicalEventString(e), 'utf8')]))
    .digest('hex');
  t.equal(e.hash, expected);
  t.equal(e._chain_version, 2);
  t.equal(e.prev_hash, GENESIS);
  t.equal(hashEvent(e.prev_hash, e), e.hash);
  t.equal(hashEvent(e.prev_hash, { ...e, seal: { seq: 9 }, hash: 'x' }), e.hash, 'seal and hash excluded');
});

t.test('every hashed field matters', async (t) => {
  const e = linkEvent(GENESIS, draft(1, { personal: { p: personalField('p', 'v', 's') } }));
  const mutations: Array<[string, object]> = [
    ['seq', { ...e, seq: 2 }],
    ['outcome', { ...e, outcome: 'block' }],
    ['usage', { ...e, usage: { total_tokens: 43 } }],
    ['details', { ...e, details: { latency_ms: 99 } }],
    ['commitment', { ...e, personal: { p: { value: 'v', salt: 's', c: 'f'.repeat(64) } } }],
    ['extra field', { ...e, injected: true }],
    ['chain version', { ...e, _chain_version: 3 }],
  ];
  for (const [name, m] of mutations) t.not(hashEvent(e.prev_hash, m), e.hash, name);
  t.not(hashEvent('1'.repeat(64), e), e.hash, 'prev_hash prefix');
  // The personal value itself is outside the hash (only its commitment is in).
  t.equal(
    hashEvent(e.prev_hash, { ...e, personal: { p: { value: 'w', salt: 's', c: e.personal?.p?.c } } }),
    e.hash,
  );
});

t.test('hashEvent validates prev_hash', async (t) => {
  t.throws(() => hashEvent('abc', {}), ChainError);
  t.throws(() => hashEvent(GENESIS.toUpperCase().replace(/0/g, 'A'), {}), { code: 'invalid_hash' });
});

t.test('chained events link', async (t) => {
  const a = linkEvent(GENESIS, draft(1));
  const b = linkEvent(a.hash, draft(2));
  t.equal(b.prev_hash, a.hash);
  t.not(a.hash, b.hash);
});

t.test('a personal field named __proto__ is covered by the hash like any other', async (t) => {
  const { hashEvent: h, GENESIS: g } = await import('../../../src/core/chain/index.js');
  const make = (c: string) =>
    JSON.parse(
      `{"id":"ae_x","org_id":"o","seq":1,"_chain_version":2,"personal":{"__proto__":{"value":"v","salt":"s","c":"${c}"}}}`,
    );
  t.not(h(g, make('a'.repeat(64))), h(g, make('b'.repeat(64))), 'changing the commitment changes the hash');
});
