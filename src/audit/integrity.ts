import { createHash, createPublicKey, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import {
  ChainVerifier,
  checkpointOrigin,
  fromBase64,
  type IntegrityResult,
  type NoteVerifier,
  noteVerifier,
} from '../core/chain/index.js';
import type { ChainReader } from './chain-reader.js';
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

/**
 * The integrity scan of one org chain, resumable in steps so the endpoint can yield to the event
 * loop between them: the stored lines go through `ChainVerifier` in store order (a retention
 * bridge first, then events with each seal after the event it ends at). Scans the events
 * committed when it started.
 */
export class IntegrityScan {
  readonly #verifier: ChainVerifier;
  readonly #lines: Iterator<
    { seq: number; line: string } | { seal: { seq: number; size: number; note: string } }
  >;
  #done = false;

  constructor(reader: ChainReader, org: string, verifiers: readonly NoteVerifier[]) {
    this.#verifier = new ChainVerifier({ verifiers, origin: checkpointOrigin(org) });
    const bridge: unknown = reader.store.auditMeta.get([org, BRIDGE_KIND]);
    if (bridge !== undefined) this.#verifier.pushEvent({ _chain_bridge: bridge });
    // Events committed now, and every seal committed now (seals commit after their events, so a
    // seal past the last event means events were removed).
    const hi = reader.lastSeq(org);
    const sealHi = Math.max(hi, lastSeal(reader.store, org)?.size ?? 0);
    this.#lines = reader.lines(org, 0, hi, 0, sealHi)[Symbol.iterator]();
  }

  /** Processes up to `n` lines; true when the scan is complete. */
  step(n: number): boolean {
    if (this.#done) return true;
    for (let i = 0; i < n; i++) {
      const r = this.#lines.next();
      if (r.done === true) {
        this.#done = true;
        return true;
      }
      const l = r.value;
      if ('seal' in l) this.#verifier.pushSeal({ seq: l.seal.seq, size: l.seal.size, note: l.seal.note });
      else this.#verifier.pushEvent(parseLine(l.line), l.line);
    }
    return false;
  }

  result(): IntegrityResult {
    return this.#verifier.result();
  }
}

function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return null; // reported by the verifier as content_modified
  }
}
