import { bytesEqual, isHash, sha256 } from './bytes.js';
import { ChainError } from './errors.js';

/**
 * RFC 6962 / RFC 9162 Merkle tree over the event hashes of one chain.
 *
 * Node addressing: node (level, index) is the root of the perfect subtree over the leaves
 * [index·2^level, (index+1)·2^level). Level 0 nodes are the leaf hashes; leaf `index` is the
 * event with `seq = index + 1`. Only perfect subtrees are ever stored: they never change once
 * complete, and every root, inclusion proof and consistency proof of any tree size can be
 * assembled from O(log n) of them (the ragged right edge is recomputed on the fly).
 */
export type NodeReader = (level: number, index: number) => Uint8Array | undefined;

export interface MerkleNode {
  level: number;
  index: number;
  hash: Uint8Array;
}

// Scratch buffers for the fixed-size hash inputs (hashing consumes them synchronously).
const leafInput = Buffer.alloc(33);
const nodeInput = Buffer.alloc(65);

/** MTH of the empty tree: SHA-256 of the empty string. */
export const EMPTY_ROOT: Uint8Array = sha256('');

/** RFC 6962 leaf hash of an event: SHA-256(0x00 ‖ the 32 bytes the hex event hash encodes). */
export function leafHash(eventHashHex: string): Uint8Array {
  if (!isHash(eventHashHex))
    throw new ChainError('invalid_hash', 'an event hash is 64 lowercase hex characters');
  return leafHashUnchecked(eventHashHex);
}

/** `leafHash` for a string already known to be a hash. */
export function leafHashUnchecked(eventHashHex: string): Uint8Array {
  leafInput[0] = 0x00;
  leafInput.write(eventHashHex, 1, 'hex');
  return sha256(leafInput);
}

/** RFC 6962 leaf hash of arbitrary leaf data: SHA-256(0x00 ‖ data). */
export function leafHashOf(data: Uint8Array): Uint8Array {
  const input = Buffer.allocUnsafe(1 + data.length);
  input[0] = 0x00;
  input.set(data, 1);
  return sha256(input);
}

/** RFC 6962 interior node: SHA-256(0x01 ‖ left ‖ right). */
export function nodeHash(left: Uint8Array, right: Uint8Array): Uint8Array {
  const size = 1 + left.length + right.length;
  const input = size === 65 ? nodeInput : Buffer.allocUnsafe(size);
  input[0] = 0x01;
  input.set(left, 1);
  input.set(right, 1 + left.length);
  return sha256(input);
}

/** Number of set bits of a non-negative safe integer (the number of subtrees of a tree size). */
export function popcount(n: number): number {
  let c = 0;
  while (n > 0) {
    c += n % 2;
    n = Math.floor(n / 2);
  }
  return c;
}

/** Largest power of two strictly less than n (n ≥ 2). */
function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

function isPowerOfTwo(n: number): boolean {
  return n > 0 && n === 2 ** Math.round(Math.log2(n));
}

function log2Exact(n: number): number {
  return Math.round(Math.log2(n));
}

/**
 * Incremental tree builder: keeps only the compact range of the current size (the roots of the
 * perfect subtrees that the binary decomposition of `size` describes, left to right), so append
 * and root are O(log n) in time and memory. `append` returns the nodes that became complete (the
 * leaf itself and any parents it finished) for a store to persist and later serve to a
 * `NodeReader`. The same class is the verifier's memory-light Merkle state.
 */
export class MerkleBuilder {
  #size: number;
  readonly #stack: Uint8Array[];

  constructor() {
    this.#size = 0;
    this.#stack = [];
  }

  /** Resumes from a compact range (e.g. a `_chain_bridge` record's `subtree_hashes`). */
  static fromSubtrees(size: number, subtrees: readonly Uint8Array[]): MerkleBuilder {
    if (!Number.isSafeInteger(size) || size < 0) {
      throw new ChainError('invalid_tree_range', 'tree size must be a non-negative integer');
    }
    if (subtrees.length !== popcount(size)) {
      throw new ChainError(
        'invalid_tree_range',
        `a tree of size ${size} has ${popcount(size)} subtree roots`,
      );
    }
    for (const h of subtrees) {
      if (h.length !== 32) throw new ChainError('invalid_hash', 'subtree roots are 32 bytes');
    }
    const b = new MerkleBuilder();
    b.#size = size;
    for (const h of subtrees) b.#stack.push(h);
    return b;
  }

  get size(): number {
    return this.#size;
  }

  /** Appends a leaf hash; returns the newly complete nodes, lowest level first. */
  append(leaf: Uint8Array): MerkleNode[] {
    const nodes: MerkleNode[] = [];
    this.#add(leaf, nodes);
    return nodes;
  }

  /** Appends a leaf hash without reporting nodes (verifier use). */
  push(leaf: Uint8Array): void {
    this.#add(leaf, undefined);
  }

  #add(leaf: Uint8Array, out: MerkleNode[] | undefined): void {
    let index = this.#size;
    let level = 0;
    let node = leaf;
    out?.push({ level, index, hash: node });
    while (index % 2 === 1) {
      const left = this.#stack.pop() as Uint8Array;
      node = nodeHash(left, node);
      index = (index - 1) / 2;
      level++;
      out?.push({ level, index, hash: node });
    }
    this.#stack.push(node);
    this.#size++;
  }

  /** MTH of the current tree. */
  root(): Uint8Array {
    const s = this.#stack;
    if (s.length === 0) return EMPTY_ROOT;
    let r = s[s.length - 1] as Uint8Array;
    for (let i = s.length - 2; i >= 0; i--) r = nodeHash(s[i] as Uint8Array, r);
    return r;
  }

  /** The compact range: perfect subtree roots covering [0, size), largest (leftmost) first. */
  subtrees(): Uint8Array[] {
    return this.#stack.slice();
  }
}

function readNode(reader: NodeReader, level: number, index: number): Uint8Array {
  const h = reader(level, index);
  if (h === undefined) throw new ChainError('missing_node', `Merkle node (${level}, ${index}) is not stored`);
  return h;
}

/** MTH of the leaves [start, start + n), n ≥ 1, where start is aligned as in RFC 6962 recursion. */
function rangeRoot(start: number, n: number, reader: NodeReader): Uint8Array {
  if (isPowerOfTwo(n)) return readNode(reader, log2Exact(n), start / n);
  const parts: Uint8Array[] = [];
  while (!isPowerOfTwo(n)) {
    const k = splitPoint(n);
    parts.push(readNode(reader, log2Exact(k), start / k));
    start += k;
    n -= k;
  }
  let r = readNode(reader, log2Exact(n), start / n);
  for (let i = parts.length - 1; i >= 0; i--) r = nodeHash(parts[i] as Uint8Array, r);
  return r;
}

function checkSize(size: number): void {
  if (!Number.isSafeInteger(size) || size < 0) {
    throw new ChainError('invalid_tree_range', 'tree size must be a non-negative integer');
  }
}

/** MTH of the first `size` leaves, read from stored perfect nodes (O(log n) reads). */
export function rootAt(size: number, reader: NodeReader): Uint8Array {
  checkSize(size);
  return size === 0 ? EMPTY_ROOT : rangeRoot(0, size, reader);
}

/** RFC 6962 §2.1.1 PATH(index, D[size]): sibling hashes from the leaf up to the root. */
export function inclusionProof(index: number, size: number, reader: NodeReader): Uint8Array[] {
  checkSize(size);
  if (!Number.isSafeInteger(index) || index < 0 || index >= size) {
    throw new ChainError('invalid_tree_range', `leaf ${index} is not in a tree of size ${size}`);
  }
  const topDown: Uint8Array[] = [];
  let start = 0;
  let n = size;
  let m = index;
  while (n > 1) {
    const k = splitPoint(n);
    if (m < k) {
      topDown.push(rangeRoot(start + k, n - k, reader));
      n = k;
    } else {
      topDown.push(rangeRoot(start, k, reader));
      start += k;
      m -= k;
      n -= k;
    }
  }
  return topDown.reverse();
}

/** RFC 6962 §2.1.2 PROOF(m, D[n]); empty when m is 0 or m equals n. */
export function consistencyProof(m: number, n: number, reader: NodeReader): Uint8Array[] {
  checkSize(m);
  checkSize(n);
  if (m > n) throw new ChainError('invalid_tree_range', `cannot prove size ${m} consistent with ${n}`);
  if (m === 0 || m === n) return [];
  const topDown: Uint8Array[] = [];
  let start = 0;
  let size = n;
  let first = m;
  let complete = true; // the `b` flag of SUBPROOF
  while (first !== size) {
    const k = splitPoint(size);
    if (first <= k) {
      topDown.push(rangeRoot(start + k, size - k, reader));
      size = k;
    } else {
      topDown.push(rangeRoot(start, k, reader));
      start += k;
      first -= k;
      size -= k;
      complete = false;
    }
  }
  if (!complete) topDown.push(rangeRoot(start, size, reader));
  return topDown.reverse();
}

function isHashBytes(h: unknown): h is Uint8Array {
  return h instanceof Uint8Array && h.length === 32;
}

/** RFC 9162 §2.1.3.2: does `proof` show `leaf` at `index` in the tree of `size` with `root`? */
export function verifyInclusion(
  leaf: Uint8Array,
  index: number,
  size: number,
  proof: readonly Uint8Array[],
  root: Uint8Array,
): boolean {
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(size) || index < 0 || index >= size) return false;
  if (!isHashBytes(leaf) || !isHashBytes(root)) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (!isHashBytes(p) || sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn /= 2;
        sn = Math.floor(sn / 2);
      }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && bytesEqual(r, root);
}

/**
 * RFC 9162 §2.1.4.2: does `proof` show the tree of size `m` with `rootM` is a prefix of the tree
 * of size `n` with `rootN`? Extends the RFC's 0 < m < n to m = n (empty proof, equal roots) and
 * m = 0 (empty proof, `rootM` is the empty-tree hash).
 */
export function verifyConsistency(
  m: number,
  n: number,
  rootM: Uint8Array,
  rootN: Uint8Array,
  proof: readonly Uint8Array[],
): boolean {
  if (!Number.isSafeInteger(m) || !Number.isSafeInteger(n) || m < 0 || n < m) return false;
  if (!isHashBytes(rootM) || !isHashBytes(rootN)) return false;
  if (m === 0) return proof.length === 0 && bytesEqual(rootM, EMPTY_ROOT);
  if (m === n) return proof.length === 0 && bytesEqual(rootM, rootN);
  if (proof.length === 0) return false;
  const path = isPowerOfTwo(m) ? [rootM, ...proof] : proof;
  let fn = m - 1;
  let sn = n - 1;
  while (fn % 2 === 1) {
    fn = (fn - 1) / 2;
    sn = Math.floor(sn / 2);
  }
  const head = path[0] as Uint8Array;
  if (!isHashBytes(head)) return false;
  let fr = head;
  let sr = head;
  for (let i = 1; i < path.length; i++) {
    const c = path[i] as Uint8Array;
    if (!isHashBytes(c) || sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (fn % 2 === 0 && fn !== 0) {
        fn /= 2;
        sn = Math.floor(sn / 2);
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && bytesEqual(fr, rootM) && bytesEqual(sr, rootN);
}
