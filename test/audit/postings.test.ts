import fc from 'fast-check';
import t from 'tap';
import { countSeqs, SortedSeqs, UnionIndex } from '../../src/audit/postings.js';

const sortedSet = fc
  .uniqueArray(fc.integer({ min: 1, max: 200 }), { maxLength: 60 })
  .map((a) => a.sort((x, y) => x - y));

t.test('a union of two seq indexes: ordered, each seq once, bounded by the window', async (t) => {
  fc.assert(
    fc.property(
      sortedSet,
      sortedSet,
      fc.integer({ min: 0, max: 210 }),
      fc.integer({ min: 0, max: 210 }),
      (a, b, x, y) => {
        const [lo, hi] = x <= y ? [x, y] : [y, x];
        const u = new UnionIndex(new SortedSeqs(a), new SortedSeqs(b));
        const want = [...new Set([...a, ...b])].filter((s) => s >= lo && s <= hi).sort((p, q) => p - q);
        const asc = [...u.seqs(lo, hi, 'asc')];
        const desc = [...u.seqs(lo, hi, 'desc')];
        const cap = Math.max(1, Math.floor(want.length / 2));
        return (
          JSON.stringify(asc) === JSON.stringify(want) &&
          JSON.stringify(desc) === JSON.stringify([...want].reverse()) &&
          countSeqs(u, lo, hi, cap) === Math.min(cap, want.length) &&
          [...Array(205).keys()].every((s) => u.has(s) === (a.includes(s) || b.includes(s)))
        );
      },
    ),
    { numRuns: 500 },
  );
  t.pass('500 random pairs of sets agree with a plain set union');
});
