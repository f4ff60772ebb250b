import fc from 'fast-check';
import t from 'tap';
import { countSeqs, PostingList, SortedSeqs, UnionIndex } from '../../src/audit/postings.js';
import { tempLog } from './helpers.js';

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

t.test("stored lists that repeat an older list's seqs (a crash between flushes) read once", async (t) => {
  const h = tempLog();
  t.teardown(() => h.close());
  const { store } = h;
  // Written per commit by one run ([101, 105], [110, 120]); the next run, restarted after a
  // crash, rebuilt the pending seqs from an older mark and stored them again with a new one.
  const lists: Array<[number, number[]]> = [
    [105, [101, 105]],
    [120, [110, 120]],
    [130, [101, 105, 110, 120, 130]],
    [140, [140]],
  ];
  await store.root.transaction(() => {
    for (const [last, seqs] of lists) store.auditIndex.putSync(['org_a', 's', 'v', last], seqs);
  });
  const all = [101, 105, 110, 120, 130, 140];
  const index = new PostingList(store, 'org_a', 's', 'v');
  for (const [lo, hi] of [
    [1, 200],
    [101, 140],
    [102, 125],
    [106, 130],
    [121, 135],
    [131, 131],
  ] as const) {
    const want = all.filter((s) => s >= lo && s <= hi);
    t.same([...index.seqs(lo, hi, 'asc')], want, `ascending in [${lo}, ${hi}]`);
    t.same([...index.seqs(lo, hi, 'desc')], [...want].reverse(), `descending in [${lo}, ${hi}]`);
    t.equal(countSeqs(index, lo, hi, 100), want.length, `count in [${lo}, ${hi}]`);
  }
  for (let s = 95; s <= 145; s++) t.equal(index.has(s), all.includes(s), `has(${s})`);
});
