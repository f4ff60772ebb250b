import { createHash } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import {
  ChainError,
  consistencyProof,
  EMPTY_ROOT,
  fromHex,
  inclusionProof,
  leafHash,
  leafHashOf,
  MerkleBuilder,
  type NodeReader,
  nodeHash,
  rootAt,
  toHex,
  verifyConsistency,
  verifyInclusion,
} from '../../../src/core/chain/index.js';

const FC = { seed: 6962, numRuns: 150 };

// ---- naive reference, straight from RFC 6962 §2.1 ----
function sha(...parts: Uint8Array[]): Uint8Array {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
}
function k(n: number): number {
  let p = 1;
  while (p * 2 < n) p *= 2;
  return p;
}
function mth(d: Uint8Array[]): Uint8Array {
  if (d.length === 0) return sha();
  if (d.length === 1) return d[0] as Uint8Array; // d holds leaf hashes already
  const s = k(d.length);
  return sha(Uint8Array.of(1), mth(d.slice(0, s)), mth(d.slice(s)));
}
function path(m: number, d: Uint8Array[]): Uint8Array[] {
  if (d.length <= 1) return [];
  const s = k(d.length);
  return m < s
    ? [...path(m, d.slice(0, s)), mth(d.slice(s))]
    : [...path(m - s, d.slice(s)), mth(d.slice(0, s))];
}
function subproof(m: number, d: Uint8Array[], b: boolean): Uint8Array[] {
  if (m === d.length) return b ? [] : [mth(d)];
  const s = k(d.length);
  return m <= s
    ? [...subproof(m, d.slice(0, s), b), mth(d.slice(s))]
    : [...subproof(m - s, d.slice(s), false), mth(d.slice(0, s))];
}

function leaves(n: number, salt: number): Uint8Array[] {
  return Array.from({ length: n }, (_, i) =>
    leafHashOf(Uint8Array.of(i & 0xff, (i >> 8) & 0xff, salt & 0xff)),
  );
}

function store(ls: Uint8Array[]): { builder: MerkleBuilder; reader: NodeReader; count: number } {
  const nodes = new Map<string, Uint8Array>();
  const builder = new MerkleBuilder();
  for (const l of ls) for (const n of builder.append(l)) nodes.set(`${n.level}:${n.index}`, n.hash);
  return { builder, reader: (level, index) => nodes.get(`${level}:${index}`), count: nodes.size };
}

const hex = (xs: Uint8Array[]): string[] => xs.map(toHex);

// ---- Certificate Transparency reference vectors ----
const CT_DATA = [
  '',
  '00',
  '10',
  '2021',
  '3031',
  '40414243',
  '5051525354555657',
  '606162636465666768696a6b6c6d6e6f',
];
const CT_ROOTS = [
  'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];

t.test('CT reference vectors', async (t) => {
  const ls = CT_DATA.map((h) => leafHashOf(fromHex(h) as Uint8Array));
  const { builder, reader } = store(ls);
  t.equal(toHex(EMPTY_ROOT), CT_ROOTS[0]);
  for (let n = 0; n <= 8; n++) t.equal(toHex(rootAt(n, reader)), CT_ROOTS[n], `root ${n}`);
  t.equal(toHex(builder.root()), CT_ROOTS[8]);
  t.same(hex(inclusionProof(0, 8, reader)), [
    '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
    '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
    '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
  ]);
  t.same(hex(inclusionProof(5, 8, reader)), [
    'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
    'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  ]);
  t.same(hex(consistencyProof(6, 8, reader)), [
    '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
    'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
    'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  ]);
  t.same(hex(consistencyProof(2, 5, reader)), [
    '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
    'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
  ]);
  t.same(consistencyProof(1, 1, reader), []);
});

t.test('leaf and node hashing', async (t) => {
  const h = 'ab'.repeat(32);
  t.same(leafHash(h), sha(Uint8Array.of(0), fromHex(h) as Uint8Array));
  t.same(nodeHash(Uint8Array.of(1), Uint8Array.of(2)), sha(Uint8Array.of(1, 1, 2)));
  t.throws(() => leafHash('AB'.repeat(32)), ChainError);
});

t.test('builder, roots and proofs agree with the naive reference', async (t) => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 300 }), fc.nat(), fc.nat(), (n, a, b) => {
      const ls = leaves(n, a);
      const { builder, reader, count } = store(ls);
      const idx = a % n;
      const m = (b % n) + 1;
      const rootN = mth(ls);
      const rootM = mth(ls.slice(0, m));
      if (count !== 2 * n - popcountOf(n)) return false; // every perfect subtree stored once
      if (toHex(builder.root()) !== toHex(rootN) || toHex(rootAt(n, reader)) !== toHex(rootN)) return false;
      if (toHex(rootAt(m, reader)) !== toHex(rootM)) return false;

      const proof = inclusionProof(idx, n, reader);
      if (hex(proof).join() !== hex(path(idx, ls)).join()) return false;
      if (!verifyInclusion(ls[idx] as Uint8Array, idx, n, proof, rootN)) return false;
      // Wrong leaf, wrong index, wrong root, truncated or extended proof all fail. (A wrong size can
      // share the path's shape, e.g. leaf 0 of sizes 9 and 10; the root then tells them apart.)
      const other = ls[(idx + 1) % n] as Uint8Array;
      if (n > 1 && verifyInclusion(other, idx, n, proof, rootN)) return false;
      if (n > 1 && verifyInclusion(ls[idx] as Uint8Array, (idx + 1) % n, n, proof, rootN)) return false;
      if (verifyInclusion(ls[idx] as Uint8Array, idx, n, proof, sha(rootN))) return false;
      if (proof.length > 0 && verifyInclusion(ls[idx] as Uint8Array, idx, n, proof.slice(1), rootN))
        return false;
      if (verifyInclusion(ls[idx] as Uint8Array, idx, n, [...proof, rootN], rootN)) return false;

      const cproof = consistencyProof(m, n, reader);
      const expected = m === n ? [] : subproof(m, ls, true);
      if (hex(cproof).join() !== hex(expected).join()) return false;
      if (!verifyConsistency(m, n, rootM, rootN, cproof)) return false;
      if (verifyConsistency(m, n, sha(rootM), rootN, cproof)) return false;
      if (verifyConsistency(m, n, rootM, sha(rootN), cproof)) return false;
      if (cproof.length > 0) {
        const bad = cproof.map((x, i) => (i === cproof.length - 1 ? sha(x) : x));
        if (verifyConsistency(m, n, rootM, rootN, bad)) return false;
        if (verifyConsistency(m, n, rootM, rootN, cproof.slice(0, -1))) return false;
      }
      return true;
    }),
    FC,
  );
  t.pass('all sizes 1..300 agree with RFC 6962 recursion');
});

function popcountOf(n: number): number {
  let c = 0;
  for (let x = n; x > 0; x = Math.floor(x / 2)) c += x % 2;
  return c;
}

t.test('edge cases', async (t) => {
  const ls = leaves(5, 1);
  const { reader, builder } = store(ls);
  t.ok(verifyConsistency(0, 5, EMPTY_ROOT, builder.root(), []));
  t.notOk(verifyConsistency(0, 5, builder.root(), builder.root(), []));
  t.ok(verifyConsistency(5, 5, builder.root(), builder.root(), []));
  t.notOk(verifyConsistency(5, 5, builder.root(), builder.root(), [builder.root()]));
  t.notOk(verifyConsistency(3, 5, rootAt(3, reader), builder.root(), []));
  t.notOk(verifyConsistency(6, 5, builder.root(), builder.root(), []));
  t.notOk(verifyInclusion(ls[0] as Uint8Array, 5, 5, [], builder.root()));
  t.ok(verifyInclusion(ls[0] as Uint8Array, 0, 1, [], ls[0] as Uint8Array));
  t.throws(() => inclusionProof(5, 5, reader), { code: 'invalid_tree_range' });
  t.throws(() => consistencyProof(6, 5, reader), { code: 'invalid_tree_range' });
  t.throws(() => rootAt(6, reader), { code: 'missing_node' });
  t.throws(() => MerkleBuilder.fromSubtrees(5, [EMPTY_ROOT]), { code: 'invalid_tree_range' });
  const resumed = MerkleBuilder.fromSubtrees(5, builder.subtrees());
  const extra = leafHashOf(Uint8Array.of(9));
  resumed.push(extra);
  builder.push(extra);
  t.same(resumed.root(), builder.root(), 'a compact range resumes the tree');
  t.equal(resumed.size, 6);
});

t.test('append reports the completed nodes', async (t) => {
  const b = new MerkleBuilder();
  const ls = leaves(4, 3);
  t.same(
    b.append(ls[0] as Uint8Array).map((n) => [n.level, n.index]),
    [[0, 0]],
  );
  t.same(
    b.append(ls[1] as Uint8Array).map((n) => [n.level, n.index]),
    [
      [0, 1],
      [1, 0],
    ],
  );
  t.same(
    b.append(ls[2] as Uint8Array).map((n) => [n.level, n.index]),
    [[0, 2]],
  );
  const last = b.append(ls[3] as Uint8Array);
  t.same(
    last.map((n) => [n.level, n.index]),
    [
      [0, 3],
      [1, 1],
      [2, 0],
    ],
  );
  t.same(last[2]?.hash, b.root());
});
