import { createHash } from 'node:crypto';
import * as ed from '@noble/ed25519';
import { sha512 } from '@noble/hashes/sha2.js';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import { bytesEqual, concatBytes, fromBase64, toBase64, utf8 } from './bytes.js';
import { ChainError } from './errors.js';

// @noble/ed25519 needs a synchronous SHA-512 for its sync API (its README's setup).
ed.hashes.sha512 = sha512;

/** Signature algorithms of a govgate seal. */
export type SignatureAlg = 'ed25519' | 'ml-dsa-65';

/** Both must verify for a seal to be valid. */
export const SEAL_ALGS: readonly SignatureAlg[] = ['ed25519', 'ml-dsa-65'];

export interface NoteSigner {
  name: string;
  keyId: Uint8Array;
  sign: (message: Uint8Array) => Uint8Array;
}

/** A signature already computed (e.g. ML-DSA-65 in a worker) for `assembleNote`. */
export interface NoteSignature {
  name: string;
  keyId: Uint8Array;
  signature: Uint8Array;
}

export interface NoteVerifier {
  name: string;
  keyId: Uint8Array;
  alg: SignatureAlg;
  publicKey: Uint8Array;
  /**
   * Optional native implementation for this key (e.g. node:crypto's Ed25519, some 20x faster
   * than the pure-JS default). Without it: @noble/ed25519 (RFC 8032 strict) or
   * @noble/post-quantum ML-DSA-65, which run anywhere.
   */
  verify?: (signature: Uint8Array, message: Uint8Array) => boolean;
}

export interface ParsedNote {
  /** The signed text, including its final newline. */
  body: string;
  signatures: NoteSignature[];
}

export type NoteVerification =
  | { ok: true; body: string; verified: Array<{ name: string; keyId: Uint8Array; alg: SignatureAlg }> }
  | { ok: false; error: 'malformed' | 'signature_invalid' | 'signature_missing'; message: string };

/** C2SP signed-note asks verifiers to accept at least 16 signatures; we cap at 32. */
export const MAX_NOTE_SIGNATURES = 32;

const EM_DASH = '\u2014';
const NAME_FORBIDDEN = /[\s+]/u;
const CONTROL = /[\u0000-\u0009\u000b-\u001f]/;
const KEY_LENGTH: Record<SignatureAlg, number> = { ed25519: 32, 'ml-dsa-65': 1952 };
const SIG_LENGTH: Record<SignatureAlg, number> = { ed25519: 64, 'ml-dsa-65': 3309 };

/**
 * Signature type bytes for key IDs. Ed25519 is C2SP signed-note's assigned 0x01. ML-DSA-65 has no
 * assigned byte, so per the spec it uses 0xff followed by an identifier: the ASCII text
 * `ML-DSA-65` (FIPS 204 ML-DSA-65, pure mode, empty context, signing the note text).
 */
const KEY_TYPE: Record<SignatureAlg, Uint8Array> = {
  ed25519: Uint8Array.of(0x01),
  'ml-dsa-65': concatBytes(Uint8Array.of(0xff), utf8.encode('ML-DSA-65')),
};

function checkName(name: string): void {
  if (name.length === 0 || NAME_FORBIDDEN.test(name) || CONTROL.test(name) || name.includes('\n')) {
    throw new ChainError('invalid_key_name', 'a key name is non-empty, without spaces or "+"');
  }
}

/** key ID = SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4] (C2SP signed-note). */
export function keyIdFor(name: string, alg: SignatureAlg, publicKey: Uint8Array): Uint8Array {
  checkName(name);
  if (publicKey.length !== KEY_LENGTH[alg]) {
    throw new ChainError('invalid_key_id', `a ${alg} public key is ${KEY_LENGTH[alg]} bytes`);
  }
  const h = createHash('sha256').update(name, 'utf8').update('\n').update(KEY_TYPE[alg]).update(publicKey);
  return new Uint8Array(h.digest().subarray(0, 4));
}

/** A verifier whose key ID is derived with `keyIdFor`. */
export function noteVerifier(name: string, alg: SignatureAlg, publicKey: Uint8Array): NoteVerifier {
  return { name, alg, publicKey, keyId: keyIdFor(name, alg, publicKey) };
}

function checkBody(body: string): void {
  if (body.length === 0 || !body.endsWith('\n'))
    throw new ChainError('invalid_note', 'note text ends in a newline');
  if (CONTROL.test(body)) throw new ChainError('invalid_note', 'note text has a control character');
}

/** Signs `body` with each signer (synchronously) and assembles the signed note. */
export function signNote(body: string, signers: readonly NoteSigner[]): string {
  checkBody(body);
  const msg = utf8.encode(body);
  return assembleNote(
    body,
    signers.map((s) => ({ name: s.name, keyId: s.keyId, signature: s.sign(msg) })),
  );
}

/**
 * The signed note: `body`, a blank line, then one line per signature:
 * `— <name> <base64(keyId ‖ signature)>` (U+2014 em dash, spaces, newline-terminated).
 */
export function assembleNote(body: string, signatures: readonly NoteSignature[]): string {
  checkBody(body);
  if (signatures.length === 0) throw new ChainError('invalid_note', 'a signed note has a signature');
  let out = `${body}\n`;
  for (const s of signatures) {
    checkName(s.name);
    if (s.keyId.length !== 4) throw new ChainError('invalid_key_id', 'a key ID is 4 bytes');
    out += `${EM_DASH} ${s.name} ${toBase64(concatBytes(s.keyId, s.signature))}\n`;
  }
  return out;
}

/** Splits a signed note into its text and signature lines; throws `ChainError` if malformed. */
export function parseNote(text: string): ParsedNote {
  if (CONTROL.test(text)) throw new ChainError('invalid_note', 'note has a control character');
  const split = text.lastIndexOf('\n\n');
  if (split < 0) throw new ChainError('invalid_note', 'note has no blank line before its signatures');
  const body = text.slice(0, split + 1);
  const block = text.slice(split + 2);
  if (!block.endsWith('\n')) throw new ChainError('invalid_note', 'signature lines end in a newline');
  const lines = block.slice(0, -1).split('\n');
  if (lines.length > MAX_NOTE_SIGNATURES) throw new ChainError('invalid_note', 'too many signatures');
  const signatures: NoteSignature[] = [];
  for (const line of lines) {
    const parts = line.split(' ');
    const [dash, name, b64] = parts;
    if (parts.length !== 3 || dash !== EM_DASH || name === undefined || b64 === undefined) {
      throw new ChainError('invalid_note', 'malformed signature line');
    }
    checkName(name);
    const raw = fromBase64(b64);
    if (raw === undefined || raw.length < 5) throw new ChainError('invalid_note', 'malformed signature');
    signatures.push({ name, keyId: raw.subarray(0, 4), signature: raw.subarray(4) });
  }
  return { body, signatures };
}

function verifyOne(v: NoteVerifier, sig: Uint8Array, msg: Uint8Array): boolean {
  if (sig.length !== SIG_LENGTH[v.alg] || v.publicKey.length !== KEY_LENGTH[v.alg]) return false;
  try {
    if (v.verify !== undefined) return v.verify(sig, msg) === true;
    return v.alg === 'ed25519'
      ? ed.verify(sig, msg, v.publicKey, { zip215: false })
      : ml_dsa65.verify(sig, msg, v.publicKey);
  } catch {
    return false;
  }
}

/**
 * Verifies a signed note against trusted keys, per C2SP signed-note: signatures from unknown keys
 * (name and key ID not both matching a verifier) are ignored; any known-key signature that fails
 * rejects the note; and at least one verified signature per algorithm in `require` (default:
 * both `ed25519` and `ml-dsa-65`, a govgate seal) must be present.
 */
export function verifyNote(
  text: string,
  verifiers: readonly NoteVerifier[],
  opts: { require?: readonly SignatureAlg[] } = {},
): NoteVerification {
  let note: ParsedNote;
  try {
    note = parseNote(text);
  } catch (err) {
    return { ok: false, error: 'malformed', message: err instanceof Error ? err.message : 'malformed note' };
  }
  const msg = utf8.encode(note.body);
  const verified: Array<{ name: string; keyId: Uint8Array; alg: SignatureAlg }> = [];
  for (const s of note.signatures) {
    const v = verifiers.find((k) => k.name === s.name && bytesEqual(k.keyId, s.keyId));
    if (v === undefined) continue;
    if (!verifyOne(v, s.signature, msg)) {
      return { ok: false, error: 'signature_invalid', message: `the ${v.alg} signature of ${s.name} fails` };
    }
    verified.push({ name: v.name, keyId: v.keyId, alg: v.alg });
  }
  const required = opts.require ?? SEAL_ALGS;
  for (const alg of required) {
    if (!verified.some((x) => x.alg === alg)) {
      return {
        ok: false,
        error: 'signature_missing',
        message: `no verified ${alg} signature from a known key`,
      };
    }
  }
  if (verified.length === 0) {
    return { ok: false, error: 'signature_missing', message: 'no signature from a known key' };
  }
  return { ok: true, body: note.body, verified };
}
