import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Store } from '../store/db.js';
import { AUDIT_KEYS_FOLDER } from './audit-keys.js';
import { MANDATE_KEYS_FOLDER } from './mandate-keys.js';

const META_KEY = 'keys_binding';

/** The keys dir does not belong to the data dir: starting would make keys that fit nothing stored. */
export class KeysDirMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KeysDirMismatchError';
  }
}

interface Binding {
  /** SHA-256 of the vault key, in hex (the key itself is never stored). */
  readonly vault_key_sha256: string;
}

/**
 * A data dir and its keys dir belong together: the store holds provider keys sealed with the
 * vault key and an audit chain signed with the audit keys. Started with another keys dir (the
 * default `keys` is relative to the working directory), govgate would make new keys, every stored
 * provider key would fail to open, and every seal would read as forged, for good. So the first
 * start records which vault key the data dir has (bindKeysDir), and each later one checks, before
 * any key is loaded or made, that the keys dir holds it and the audit and mandate keys.
 */
export function checkKeysDir(store: Store, keysDir: string): void {
  const binding = store.meta.get(META_KEY) as Binding | undefined;
  const dir = resolve(keysDir);
  const data = resolve(store.dataDir);
  const fix = `point SERVICE_KEYS_DIR at the keys dir that belongs to ${data} (new keys would leave its sealed provider keys unreadable and its audit chain unverifiable)`;
  const vaultPath = join(dir, 'vault.key');
  // A store started before bindings were recorded had a vault key all the same.
  const started = binding !== undefined || store.meta.get('bootstrapped') !== undefined;
  if (started && !existsSync(vaultPath))
    throw new KeysDirMismatchError(
      `the keys dir ${dir} holds no vault.key, but the data dir ${data} was started with one: ${fix}`,
    );
  if (binding === undefined) return;
  if (vaultFingerprint(readFileSync(vaultPath, 'utf8')) !== binding.vault_key_sha256)
    throw new KeysDirMismatchError(
      `the keys dir ${dir} holds another vault key than the data dir ${data} was started with: ${fix}`,
    );
  for (const folder of [AUDIT_KEYS_FOLDER, MANDATE_KEYS_FOLDER])
    if (!existsSync(join(dir, folder, 'keys.json')))
      throw new KeysDirMismatchError(
        `the keys dir ${dir} has lost its ${folder} keys (${folder}/keys.json): restore them from a backup of ${dir}`,
      );
}

/** Records the vault key the data dir is started with (once; later starts are checked against it). */
export function bindKeysDir(store: Store, keysDir: string): void {
  if (store.meta.get(META_KEY) !== undefined) return;
  const binding: Binding = {
    vault_key_sha256: vaultFingerprint(readFileSync(join(keysDir, 'vault.key'), 'utf8')),
  };
  store.meta.putSync(META_KEY, binding);
}

function vaultFingerprint(text: string): string {
  return createHash('sha256').update(Buffer.from(text.trim(), 'base64')).digest('hex');
}
