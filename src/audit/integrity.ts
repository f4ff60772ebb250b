import { createHash, createPublicKey, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import {
  ChainVerifier,
  checkLine,
  checkpointOrigin,
  checkSeal,
  fromBase64,
  type IntegrityResult,
  type LineVerdict,
  type NoteVerifier,
  noteVerifier,
  type SealCheck,
  type SealRecord,
} from '../core/chain/index.js';
import type { ChainReader } from './chain-reader.js';
import type { LogLine } from './jsonl-log.js';
import { BRIDGE_KIND } from './layout.js';
import { lastSeal } from './org-head.js';
import type { SigningKeyDocument } from './types.js';

/**
 * ML-DSA-65 signatures that verified in this process, by SHA-256 of (public key ‖ message ‖
 * signature). Verifying one costs milliseconds in pure JS and a chain sealed every 250 ms holds
 * many; a repeated scan (the integrity cache expires every 5 minutes) then checks only new or
 * changed seals. Keyed on the exact bytes, so a swapped or edited signature is never a hit.
 */
export class VerifiedSignatures {
  readonly #seen = new Set<string>();

  constructor(private readonly max = 200_000) {}

  verify(publicKey: Uint8Array, sig: Uint8Array, msg: Uint8Array): boolean {
    const key = createHash('sha256').update(publicKey).update(msg).update(sig).digest('base64');
    if (this.#seen.has(key)) return true;
    const ok = ml_dsa65.verify(sig, msg, publicKey);
    if (ok) {
      if (this.#seen.size >= this.max) this.#seen.clear();
      this.#seen.add(key);
    }
    return ok;
  }
}

/**
 * Trusted seal keys from a signing-key document (active and retired: old seals must verify).
 * Ed25519 verifies with node:crypto (much faster than pure JS); ML-DSA-65 with @noble, through
 * `memo` when given.
 */
export function verifiersFor(doc: SigningKeyDocument, memo?: VerifiedSignatures): NoteVerifier[] {
  const out: NoteVerifier[] = [];
  for (const k of doc.keys) {
    const pk = fromBase64(k.public_key);
    if (pk === undefined) continue;
    let v: NoteVerifier;
    try {
      v = noteVerifier(k.name, k.alg, pk);
    } catch {
      continue; // a malformed key verifies nothing
    }
    if (k.alg === 'ed25519') {
      const key = ed25519Key(pk);
      if (key !== undefined) v.verify = (sig, msg) => cryptoVerify(null, msg, key, sig);
    } else if (memo !== undefined) {
      v.verify = (sig, msg) => memo.verify(pk, sig, msg);
    }
    out.push(v);
  }
  return out;
}

function ed25519Key(raw: Uint8Array): KeyObject | undefined {
  try {
    const x = Buffer.from(raw).toString('base64url');
    return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x }, format: 'jwk' });
  } catch {
    return undefined;
  }
}

/** One contiguous piece of an org chain's lines, checkable on its own (in a worker thread). */
export interface ScanChunk {
  readonly org: string;
  /** Events with lo ≤ seq ≤ hi… */
  readonly lo: number;
  readonly hi: number;
  /** …and seals with sealFrom ≤ size ≤ sealHi, in store order (`ChainReader#linesBetween`). */
  readonly sealFrom: number;
  readonly sealHi: number;
}

/** A checked line of a chunk: an event's verdict, or a seal with its signature check. */
export type CheckedLine =
  /** `key`: the seq the line is stored under (checked against the event's own). */
  | { readonly v: LineVerdict; readonly key: number }
  | { readonly seal: SealRecord; readonly check: SealCheck };

/**
 * The lines of `chunk` with their content and signature checks (`checkLine`, `checkSeal`): the
 * part of a scan that does not depend on the lines before, run by the integrity workers.
 */
export function checkChunk(
  reader: ChainReader,
  chunk: ScanChunk,
  verifiers: readonly NoteVerifier[],
): CheckedLine[] {
  const out: CheckedLine[] = [];
  for (const l of reader.linesBetween(chunk.org, chunk.lo, chunk.hi, chunk.sealFrom, chunk.sealHi)) {
    if ('seal' in l) {
      const seal = { seq: l.seal.seq, size: l.seal.size, note: l.seal.note };
      out.push({ seal, check: checkSeal(seal, verifiers) });
    } else {
      out.push({ v: checkLine(parseLine(l.line), l.line), key: l.seq });
    }
  }
  return out;
}

/**
 * The integrity scan of one org chain, over the lines committed when it started: a retention
 * bridge first, then events in seq order with each seal after the event it ends at. Runs either
 * inline, resumable in steps so the endpoint can yield to the event loop between them (`step`),
 * or in chunks whose lines were checked elsewhere and are applied here in order (`chunks`,
 * `apply`): `ChainVerifier` keeps everything that depends on order (links, the Merkle tree,
 * checkpoints, tombstone authority), so both ways give the same result.
 */
export class IntegrityScan {
  readonly #verifier: ChainVerifier;
  readonly #reader: ChainReader;
  readonly #org: string;
  readonly #hi: number;
  readonly #sealHi: number;
  /** The seq retention pruned through: the scan starts after it, at the bridge. */
  readonly #pruned: number;
  #lines: Iterator<LogLine> | undefined;
  #done = false;

  constructor(reader: ChainReader, org: string, verifiers: readonly NoteVerifier[]) {
    this.#reader = reader;
    this.#org = org;
    // An org chain in the store is v2 only: a legacy v1 line in it is a finding (`legacy: false`),
    // and so is an event stored under a key that is not its seq (e.g. not a whole number).
    this.#verifier = new ChainVerifier({ verifiers, origin: checkpointOrigin(org), legacy: false });
    const bridge: unknown = reader.store.auditMeta.get([org, BRIDGE_KIND]);
    if (bridge !== undefined) this.#verifier.pushEvent({ _chain_bridge: bridge });
    this.#pruned = reader.prunedThrough(org);
    // Events committed now, and every seal committed now (seals commit after their events, so a
    // seal past the last event means events were removed).
    this.#hi = reader.lastSeq(org);
    this.#sealHi = Math.max(this.#hi, lastSeal(reader.store, org)?.size ?? 0);
  }

  /** Events in the scan (the last committed seq). */
  get size(): number {
    return this.#hi;
  }

  /** Processes up to `n` lines inline; true when the scan is complete. */
  step(n: number): boolean {
    if (this.#done) return true;
    const from = this.#pruned;
    this.#lines ??= this.#reader
      .lines(this.#org, from === 0 ? 0 : nextAbove(from), this.#hi, from, this.#sealHi)
      [Symbol.iterator]();
    for (let i = 0; i < n; i++) {
      const r = this.#lines.next();
      if (r.done === true) {
        this.#done = true;
        return true;
      }
      const l = r.value;
      if ('seal' in l) this.#verifier.pushSeal({ seq: l.seal.seq, size: l.seal.size, note: l.seal.note });
      else this.#verifier.pushEvent(parseLine(l.line), l.line, l.seq);
    }
    return false;
  }

  /**
   * The scan's lines cut into chunks of about `events` events each; applying the checked chunks in
   * this order (`apply`) is the same scan as `step`.
   */
  chunks(events: number): ScanChunk[] {
    const org = this.#org;
    const out: ScanChunk[] = [];
    const width = Math.max(1, Math.floor(events));
    // The chunks partition the whole scan's key ranges exactly (events 0 ≤ seq ≤ hi, seals
    // 1 ≤ size ≤ sealHi), stored keys that are not whole numbers (a tampered store) included.
    let lo = this.#pruned === 0 ? 0 : nextAbove(this.#pruned);
    let sealFrom = this.#pruned + 1;
    let hi = Math.max(this.#reader.firstSeq(org), 1) + width - 1;
    for (;;) {
      if (hi >= this.#hi) {
        out.push({ org, lo, hi: this.#hi, sealFrom, sealHi: this.#sealHi });
        return out;
      }
      out.push({ org, lo, hi, sealFrom, sealHi: hi });
      lo = nextAbove(hi);
      sealFrom = lo;
      hi += width;
    }
  }

  /** Applies checked lines `from` ≤ i < `to` of the next chunk (chunks in `chunks` order). */
  apply(lines: readonly CheckedLine[], from = 0, to = lines.length): void {
    for (let i = from; i < to; i++) {
      const l = lines[i] as CheckedLine;
      if ('v' in l) this.#verifier.pushChecked(l.v, undefined, l.key);
      else this.#verifier.pushSeal(l.seal, l.check);
    }
  }

  result(): IntegrityResult {
    return this.#verifier.result();
  }
}

/** The smallest double greater than `x` (x ≥ 1): the exclusive lower bound of the next chunk. */
function nextAbove(x: number): number {
  const f = new Float64Array([x]);
  const bits = new BigInt64Array(f.buffer);
  bits[0] = (bits[0] as bigint) + 1n;
  return f[0] as number;
}

function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return null; // reported by the verifier as content_modified
  }
}
