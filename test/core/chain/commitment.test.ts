import { createHash } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import {
  buildPersonal,
  checkPersonalField,
  commit,
  ERASED,
  erasePersonal,
  hashEvent,
  isTombstone,
  linkEvent,
  personalField,
} from '../../../src/core/chain/index.js';
import { draft } from './helpers.js';

const FC = { seed: 17, numRuns: 200 };

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n, 0);
  return b;
}

t.test('commit frames salt and path with big-endian u32 byte lengths, then JCS(value)', async (t) => {
  const salt = 'sälty';
  const path = 'end_user';
  const value = { b: 1, a: 'x' };
  const bytes = Buffer.concat([
    u32(Buffer.byteLength(salt)),
    Buffer.from(salt),
    u32(Buffer.byteLength(path)),
    Buffer.from(path),
    Buffer.from('{"a":"x","b":1}'),
  ]);
  t.equal(commit(salt, path, value), createHash('sha256').update(bytes).digest('hex'));
  t.match(commit(salt, path, value), /^[0-9a-f]{64}$/);
});

t.test('framing is unambiguous and every input matters', async (t) => {
  t.not(commit('ab', 'c', 1), commit('a', 'bc', 1));
  t.not(commit('s', 'p', '1'), commit('s', 'p', 1));
  t.not(commit('s', 'p', 1), commit('s', 'q', 1));
  t.not(commit('s', 'p', 1), commit('t', 'p', 1));
  t.equal(commit('s', 'p', { a: 1, b: 2 }), commit('s', 'p', { b: 2, a: 1 }));
  fc.assert(
    fc.property(fc.string(), fc.string(), fc.string(), fc.string(), (s1, p1, s2, p2) => {
      if (s1 === s2 && p1 === p2) return true;
      return commit(s1, p1, 'v') !== commit(s2, p2, 'v');
    }),
    FC,
  );
});

t.test('build, check, erase', async (t) => {
  let n = 0;
  const personal = buildPersonal({ end_user: 'alice@example.com', prompt: 'hi', skipped: undefined }, () => {
    n++;
    return `salt${n}`;
  });
  t.same(Object.keys(personal), ['end_user', 'prompt']);
  t.equal(personal.end_user?.salt, 'salt1');
  t.equal(personal.end_user?.c, commit('salt1', 'end_user', 'alice@example.com'));
  t.equal(checkPersonalField('end_user', personal.end_user), 'ok');
  // A value checked under another path does not match.
  t.equal(checkPersonalField('prompt', personal.end_user), 'mismatch');

  const erased = erasePersonal(personal, ['end_user']);
  t.same(erased.end_user, { value: ERASED, c: personal.end_user?.c });
  t.equal(erased.prompt?.value, 'hi', 'other fields untouched');
  t.equal(personal.end_user?.value, 'alice@example.com', 'input not mutated');
  t.equal(checkPersonalField('end_user', erased.end_user), 'erased');
  t.ok(isTombstone(erased.end_user));

  t.equal(checkPersonalField('end_user', { ...personal.end_user, value: 'bob@example.com' }), 'mismatch');
  t.equal(
    checkPersonalField('end_user', { value: 'x', c: personal.end_user?.c }),
    'mismatch',
    'salt gone, not ERASED',
  );
  t.equal(checkPersonalField('end_user', { value: ERASED, c: 'nope' }), 'mismatch', 'bad commitment');
  t.equal(checkPersonalField('end_user', null), 'mismatch');
  t.equal(
    checkPersonalField('end_user', { value: [1, undefined], salt: 's', c: personal.end_user?.c }),
    'mismatch',
  );
});

t.test('a real value equal to the marker is not a tombstone', async (t) => {
  const f = personalField('note', ERASED, 'salt');
  t.notOk(isTombstone(f));
  t.equal(checkPersonalField('note', f), 'ok');
});

t.test('erasure keeps the event hash valid', async (t) => {
  fc.assert(
    fc.property(fc.jsonValue(), fc.string({ minLength: 1 }), (value, salt) => {
      const e = linkEvent(
        '0'.repeat(64),
        draft(1, { personal: { prompt: personalField('prompt', value, salt) } }),
      );
      const erased = { ...e, personal: erasePersonal(e.personal ?? {}) };
      return (
        hashEvent(erased.prev_hash, erased) === e.hash &&
        checkPersonalField('prompt', erased.personal.prompt) === 'erased'
      );
    }),
    FC,
  );
  t.pass('hash unchanged after erasure');
});
