import { createPrivateKey, type KeyObject } from 'node:crypto';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { KeyMaterialError } from './key-errors.js';

/** How a private key PEM is encrypted under SERVICE_AUDIT_KEY_PASSWORD. */
export const PEM_CIPHER = 'aes-256-cbc';

/** Written to a temporary file and renamed, so a crash never leaves a half-written file. */
export function writeAtomic(path: string, data: string, mode: number): void {
  const tmp = `${path}.tmp`;
  rmSync(tmp, { force: true });
  writeFileSync(tmp, data, { mode, flag: 'wx' });
  renameSync(tmp, path);
}

/**
 * A private key file read in the clear (`pem`) while a password is set is written back encrypted:
 * a password set after the first start then protects the keys made before it too, not only the
 * ones generated from then on. A file that cannot be written (keys mounted read only, from a
 * Kubernetes Secret) is left as it is: the start does not fail for it.
 */
export function encryptIfPlain(
  path: string,
  pem: string,
  key: KeyObject,
  password: string | undefined,
): void {
  if (password === undefined || pem.includes('-----BEGIN ENCRYPTED PRIVATE KEY-----')) return;
  const sealed = key.export({ type: 'pkcs8', format: 'pem', cipher: PEM_CIPHER, passphrase: password });
  try {
    writeAtomic(path, sealed.toString(), 0o600);
  } catch {
    // read-only: kept in the clear, as the operator mounted it
  }
}

/**
 * A private key PEM file, encrypted under `password` when one is set (and written back encrypted
 * if it was in the clear: encryptIfPlain). One that cannot be read is a KeyMaterialError naming
 * `what` and the password setting, never a new key made in its place.
 */
export function readKeyAtRest(path: string, password: string | undefined, what: string): KeyObject {
  try {
    const pem = readFileSync(path, 'utf8');
    const key = createPrivateKey({
      key: pem,
      format: 'pem',
      ...(password === undefined ? {} : { passphrase: password }),
    });
    encryptIfPlain(path, pem, key, password);
    return key;
  } catch (err) {
    throw new KeyMaterialError(
      `cannot read ${what} ${path} (is SERVICE_AUDIT_KEY_PASSWORD right?): ${(err as Error).message}`,
      { cause: err },
    );
  }
}
