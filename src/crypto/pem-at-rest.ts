import type { KeyObject } from 'node:crypto';
import { renameSync, rmSync, writeFileSync } from 'node:fs';

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
