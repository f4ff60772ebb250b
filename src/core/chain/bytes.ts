import { hash } from 'node:crypto';

const HEX64 = /^[0-9a-f]{64}$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** True for a lowercase hex SHA-256 digest (64 characters). */
export function isHash(s: unknown): s is string {
  return typeof s === 'string' && HEX64.test(s);
}

/**
 * SHA-256 as bytes. Goes through hex on purpose: `crypto.hash(…, 'buffer')` allocates its result
 * outside the Buffer pool and costs several times more than a hex digest plus a pooled decode.
 */
export function sha256(data: Uint8Array | string): Uint8Array {
  return Buffer.from(hash('sha256', data, 'hex'), 'hex');
}

export function toHex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}

/** Decodes lowercase or uppercase hex; `undefined` when the text is not whole bytes of hex. */
export function fromHex(hex: string): Uint8Array | undefined {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) return undefined;
  return new Uint8Array(Buffer.from(hex, 'hex'));
}

export function toBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

/** Strict RFC 4648 §4 base64 (padded, canonical); `undefined` for anything else. */
export function fromBase64(text: string): Uint8Array | undefined {
  if (!BASE64.test(text)) return undefined;
  const bytes = Buffer.from(text, 'base64');
  // Reject non-canonical trailing bits (e.g. "AB==" vs "AA=="): re-encoding must round-trip.
  if (bytes.toString('base64') !== text) return undefined;
  return new Uint8Array(bytes);
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= (a[i] as number) ^ (b[i] as number);
  return diff === 0;
}

export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

export const utf8 = new TextEncoder();
