import t from 'tap';
import { eventId, eventIdSeq, MAX_ID_SEQ, newId, sortableBody, sortableId } from '../../src/util/ids.js';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const msOf = (body: string): number => [...body.slice(0, 8)].reduce((v, c) => v * 62 + BASE62.indexOf(c), 0);

t.test('sortable ids sort by creation time, carry the ms, and stay unique within one ms', async (t) => {
  const times = [0, 1, 61, 62, 3843, 1_700_000_000_000, 1_764_000_000_123, 1_764_000_000_124, 9e12];
  const ids = times.map((ms) => sortableId('ae_', ms));
  for (const [i, id] of ids.entries()) {
    t.match(id, /^ae_[0-9A-Za-z]{20}$/, 'same shape as a random id');
    t.equal(msOf(id.slice(3)), times[i], `the body starts with the ms (${times[i]})`);
  }
  t.same([...ids].sort(), ids, 'text order is time order');
  // Text order must not depend on the random tail: a later ms sorts after every id of an earlier one.
  for (let i = 0; i < 200; i++) t.ok(sortableBody(5000) < sortableBody(5001), 'ms decides the order');
  const same = new Set(Array.from({ length: 20_000 }, () => sortableBody(42)));
  t.equal(same.size, 20_000, 'ids of one ms differ');
  t.match(sortableId('pl_'), /^pl_[0-9A-Za-z]{20}$/, 'the clock by default');
  t.ok(Math.abs(msOf(sortableBody()) - Date.now()) < 60_000);
  t.match(newId('apr_'), /^apr_[0-9A-Za-z]{20}$/);
});

t.test('audit event ids carry their ms and seq, sort by time, and decode back to the seq', async (t) => {
  const seqs = [1, 2, 61, 62, 3843, 238_327, 1_000_000, MAX_ID_SEQ];
  for (const seq of seqs) {
    const id = eventId(1_764_000_000_123, seq);
    t.match(id, /^ae_[0-9A-Za-z]{20}$/, 'the shape of every audit event id');
    t.equal(msOf(id.slice(3)), 1_764_000_000_123, 'the body starts with the ms');
    t.equal(eventIdSeq(id), seq, `decodes to seq ${seq}`);
  }
  const ids = Array.from({ length: 300 }, (_, i) => eventId(1_764_000_000_000 + Math.floor(i / 7), i + 1));
  t.same([...ids].sort(), ids, 'text order is chain order when time does not go back');
  t.equal(new Set(Array.from({ length: 5000 }, () => eventId(42, 7))).size, 5000, 'a random tail');
  // Past what 6 digits hold, or not a seq: a plain sortable id, to be indexed.
  for (const seq of [MAX_ID_SEQ + 1, 0, -3, 1.5, Number.NaN]) {
    const id = eventId(42, seq);
    t.match(id, /^ae_[0-9A-Za-z]{20}$/);
    t.not(eventIdSeq(id), seq, `seq ${seq} is not named`);
  }
  for (const bad of [
    '',
    'ae_',
    'ae_0000000000000000000',
    'ae_000000000000000000000',
    'pl_00000000000001000000',
    'ae_00000000-00001000000',
  ])
    t.equal(eventIdSeq(bad), undefined, `${JSON.stringify(bad)} names no seq`);
  t.equal(eventIdSeq('ae_00000000000001zzzzzz'), 1);
});
