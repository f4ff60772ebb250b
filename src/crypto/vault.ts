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

/** `****last4`: the only form in which a stored secret is ever shown again. */
export function mask(secret: string): string {
  return `****${secret.slice(-4)}`;
}

/** True when `value` is the masked form (`****last4`) of a stored secret: an echo, not a new value. */
export function isMaskOf(value: string, last4: string): boolean {
  return value === `****${last4}`;
}
