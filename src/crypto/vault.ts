import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** An AES-256-GCM sealed secret. `aad` binds it to its owner (org and slot), so it cannot be moved. */
export interface SealedSecret {
  readonly v: 1;
  readonly iv: Uint8Array;
  readonly ct: Uint8Array;
  readonly tag: Uint8Array;
}

export interface Vault {
  seal(plaintext: string, aad: string): SealedSecret;
  open(sealed: SealedSecret, aad: string): string;
}

/** Loads the vault key from `keysDir/vault.key`, creating it (mode 0600) on first use. */
export function loadVaultKey(keysDir: string): Buffer {
  mkdirSync(keysDir, { recursive: true, mode: 0o700 });
  const path = join(keysDir, 'vault.key');
  if (!existsSync(path)) {
    writeFileSync(path, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  }
  const key = Buffer.from(readFileSync(path, 'utf8').trim(), 'base64');
  if (key.length !== 32) throw new Error(`${path} does not hold a 32-byte key`);
  return key;
}

export function createVault(key: Uint8Array): Vault {
  return {
    seal(plaintext, aad) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(Buffer.from(aad));
      const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return { v: 1, iv, ct, tag: cipher.getAuthTag() };
    },
    open(sealed, aad) {
      const decipher = createDecipheriv('aes-256-gcm', key, sealed.iv);
      decipher.setAAD(Buffer.from(aad));
      decipher.setAuthTag(sealed.tag);
      return Buffer.concat([decipher.update(sealed.ct), decipher.final()]).toString('utf8');
    },
  };
}

/** Keys shorter than this are masked whole: their last four would give most of them away. */
const SHOWN_FROM = 12;

/**
 * What of a secret may be shown again (as `****last4`): its last four characters, or nothing for
 * a short one.
 */
export function lastFour(secret: string): string {
  return secret.length < SHOWN_FROM ? '' : secret.slice(-4);
}

/**
 * Why a secret sent in an HTTP header (an API key, a bearer token) cannot be one, or undefined: a
 * control character (CR, LF, NUL, …) cannot go in a header value, so such a secret would fail
 * every call (or, pasted with a line break, split the request).
 */
export function headerSecretProblem(value: string): string | undefined {
  return /[\u0000-\u001f\u007f]/.test(value)
    ? 'must not hold control characters (a line break, a NUL): an HTTP header cannot carry them'
    : undefined;
}

/**
 * Reads a value sent where a stored secret is shown masked: `echo` when it is that secret's mask
 * (keep the stored secret), `foreign` when it looks like a mask but is not this one's (another
 * secret's, or one changed meanwhile: stored as given, it would replace the secret with a string
 * that still reads as a mask), `new` otherwise.
 */
export function maskedEcho(value: string, last4: string | null | undefined): 'echo' | 'foreign' | 'new' {
  if (!value.startsWith('****')) return 'new';
  return last4 != null && value === `****${last4}` ? 'echo' : 'foreign';
}
