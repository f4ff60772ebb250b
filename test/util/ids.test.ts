import t from 'tap';
import { newId, sortableBody, sortableId } from '../../src/util/ids.js';

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
