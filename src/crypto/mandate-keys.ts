import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
} from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JWK } from 'jose';
import { KeyMaterialError } from './key-errors.js';
import { encryptIfPlain, PEM_CIPHER } from './pem-at-rest.js';

/** The folder of `SERVICE_KEYS_DIR` that holds the mandate keys. */
export const MANDATE_KEYS_FOLDER = 'mandate';
const INDEX_FILE = 'keys.json';

/**
 * How long a retired key stays in the JWKS. A key signs nothing once retired, and a mandate
 * lives 60 s, so an hour is a wide margin for verifiers with skewed clocks.
 */
export const RETIRED_KEY_PUBLISH_MS = 3_600_000;

export interface Ed25519PublicJwk {
  readonly kty: 'OKP';
  readonly crv: 'Ed25519';
  readonly x: string;
}

/** One key as the index file records it (public half only; the private half is `<kid>.pem`). */
export interface MandateKeyEntry {
  readonly kid: string;
  readonly jwk: Ed25519PublicJwk;
  readonly created_at: string;
  readonly retired_at: string | null;
}

interface IndexFile {
  readonly v: 1;
  readonly active: string;
  /**
   * The key the next rotation makes active, published ahead (pre-publication): a verifier whose
   * copy of the JWKS is younger than the last rotation already holds it. Absent only in a keys
   * dir written before it existed and never writable since.
   */
  readonly next?: string;
  readonly keys: MandateKeyEntry[];
}

export interface ActiveMandateKey {
  readonly kid: string;
  readonly privateKey: KeyObject;
}

export interface MandateKeysOptions {
  /** How long a retired key stays published (default RETIRED_KEY_PUBLISH_MS). */
  readonly retiredPublishMs?: number;
  /** Clock, for tests. */
  readonly now?: () => number;
}

/** RFC 7638 thumbprint of an Ed25519 public JWK: SHA-256 over `{"crv","kty","x"}` in that order. */
export function ed25519Thumbprint(jwk: Ed25519PublicJwk): string {
  const canonical = `{"crv":"${jwk.crv}","kty":"${jwk.kty}","x":"${jwk.x}"}`;
  return createHash('sha256').update(canonical).digest('base64url');
}

function publicJwk(key: KeyObject): Ed25519PublicJwk {
  const jwk = key.export({ format: 'jwk' });
  if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string')
    throw new Error('mandate keys must be Ed25519');
  return { kty: 'OKP', crv: 'Ed25519', x: jwk.x };
}

function isEntry(value: unknown): value is MandateKeyEntry {
  if (value === null || typeof value !== 'object') return false;
  const e = value as Record<string, unknown>;
  const jwk = e.jwk as Record<string, unknown> | null | undefined;
  return (
    typeof e.kid === 'string' &&
    typeof e.created_at === 'string' &&
    (e.retired_at === null || typeof e.retired_at === 'string') &&
    jwk !== null &&
    typeof jwk === 'object' &&
    jwk.kty === 'OKP' &&
    jwk.crv === 'Ed25519' &&
    typeof jwk.x === 'string'
  );
}

function readIndex(path: string): IndexFile {
  const parsed: unknown = JSON.parse(readFileSync(path, 'utf8'));
  const index = parsed as Partial<IndexFile> | null;
  if (
    index === null ||
    typeof index !== 'object' ||
    typeof index.active !== 'string' ||
    !Array.isArray(index.keys) ||
    !index.keys.every(isEntry)
  ) {
    throw new Error(`${path} is not a mandate key index`);
  }
  if (
    index.next !== undefined &&
    (typeof index.next !== 'string' || !index.keys.some((e) => e.kid === index.next))
  )
    throw new Error(`${path} names an unknown next key`);
  return index.next === undefined
    ? { v: 1, active: index.active, keys: index.keys }
    : { v: 1, active: index.active, next: index.next, keys: index.keys };
}

/**
 * The Ed25519 key pairs that sign mandates, kept in `keysDir/mandate/`: `keys.json` lists every
 * key's public JWK with its kid (RFC 7638 thumbprint), `created_at` and `retired_at`; the private
 * halves of the active key and of the next one are `<kid>.pem` (PKCS#8, encrypted when a password
 * is given, mode 0600). The next key is published from the moment it is made, so a rotation
 * (which makes it active and makes a new next key) signs with a key verifiers already hold.
 * Rotation retires the active key (its private half is deleted; its public half stays published
 * for RETIRED_KEY_PUBLISH_MS so the mandates it signed verify until they expire).
 */
export class MandateKeys {
  private current: ActiveMandateKey;
  private gen = 0;

  private constructor(
    private readonly dir: string,
    private readonly password: string | undefined,
    private index: IndexFile,
    private readonly retiredPublishMs: number,
    private readonly clock: () => number,
  ) {
    this.current = this.readActive();
    // The next key is read now too, so a rotation never meets a file that cannot be used.
    if (index.next !== undefined) this.readKey(index.next, 'next');
  }

  /** Opens the keys under `keysDir/mandate/`, generating the first key pair on first use. */
  static load(keysDir: string, password?: string, opts: MandateKeysOptions = {}): MandateKeys {
    const dir = join(keysDir, MANDATE_KEYS_FOLDER);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const clock = opts.now ?? Date.now;
    const pw = password === '' ? undefined : password;
    const indexPath = join(dir, INDEX_FILE);
    let index: IndexFile;
    if (existsSync(indexPath)) {
      index = readIndex(indexPath);
      if (index.next === undefined) {
        // A keys dir from before pre-publication gains its next key; a read-only one (a Secret
        // mount) goes on without, and its rotations cannot be written anyway.
        try {
          const next = generateKey(dir, pw, clock());
          const withNext: IndexFile = {
            v: 1,
            active: index.active,
            next: next.kid,
            keys: [...index.keys, next],
          };
          writeIndex(dir, withNext);
          index = withNext;
        } catch {
          // kept as it is
        }
      }
    } else {
      const entry = generateKey(dir, pw, clock());
      const next = generateKey(dir, pw, clock());
      index = { v: 1, active: entry.kid, next: next.kid, keys: [entry, next] };
      writeIndex(dir, index);
    }
    return new MandateKeys(dir, pw, index, opts.retiredPublishMs ?? RETIRED_KEY_PUBLISH_MS, clock);
  }

  /** The key new mandates are signed with. */
  get active(): ActiveMandateKey {
    return this.current;
  }

  /** Bumped by every rotation; lets verifiers cache the key set. */
  get generation(): number {
    return this.gen;
  }

  /** Every key, retired ones included (the index file's content). */
  entries(): readonly MandateKeyEntry[] {
    return this.index.keys;
  }

  /**
   * The published key set: the active key, the next one, and the keys retired less than the
   * publish window ago.
   */
  jwks(now: number = this.clock()): { keys: JWK[] } {
    const keys: JWK[] = [];
    for (const e of this.index.keys) {
      if (e.retired_at !== null && Date.parse(e.retired_at) + this.retiredPublishMs <= now) continue;
      keys.push({ kty: e.jwk.kty, crv: e.jwk.crv, x: e.jwk.x, kid: e.kid, alg: 'EdDSA', use: 'sig' });
    }
    return { keys };
  }

  /** The key the next rotation makes active (published already), if the keys dir has one. */
  get next(): MandateKeyEntry | undefined {
    const next = this.index.next;
    return next === undefined ? undefined : this.index.keys.find((e) => e.kid === next);
  }

  /**
   * Makes the next key active (or, without one, a new key), retires the old active key (still
   * published, its private half deleted) and makes a new next key; returns the three as the
   * index now records them.
   */
  rotate(): {
    readonly active: MandateKeyEntry;
    readonly retired: MandateKeyEntry;
    readonly next: MandateKeyEntry;
  } {
    const now = this.clock();
    const old = this.index.active;
    // Both new files are written before the index names them: a failure changes nothing in force.
    const made = this.index.next === undefined ? generateKey(this.dir, this.password, now) : undefined;
    const active = made?.kid ?? (this.index.next as string);
    const next = generateKey(this.dir, this.password, now);
    const retiredAt = new Date(now).toISOString();
    const keys = this.index.keys.map((e) =>
      e.kid === old && e.retired_at === null ? { ...e, retired_at: retiredAt } : e,
    );
    if (made !== undefined) keys.push(made);
    keys.push(next);
    this.index = { v: 1, active, next: next.kid, keys };
    writeIndex(this.dir, this.index);
    this.current = this.readActive();
    this.gen++;
    // The index no longer names it as active: a crash before this line leaves a stray file only.
    rmSync(join(this.dir, `${old}.pem`), { force: true });
    const entry = (kid: string): MandateKeyEntry => keys.find((e) => e.kid === kid) as MandateKeyEntry;
    return { active: entry(active), retired: entry(old), next };
  }

  private readActive(): ActiveMandateKey {
    return { kid: this.index.active, privateKey: this.readKey(this.index.active, 'active') };
  }

  /**
   * Reads a private key file and checks it against the public key the index records; a plain
   * file is encrypted in place when a password is set (encryptIfPlain).
   */
  private readKey(kid: string, role: 'active' | 'next'): KeyObject {
    const entry = this.index.keys.find((e) => e.kid === kid);
    if (entry === undefined) throw new Error(`mandate key index names an unknown ${role} key ${kid}`);
    const path = join(this.dir, `${kid}.pem`);
    let privateKey: KeyObject;
    try {
      const pem = readFileSync(path, 'utf8');
      privateKey = createPrivateKey({
        key: pem,
        format: 'pem',
        ...(this.password === undefined ? {} : { passphrase: this.password }),
      });
      encryptIfPlain(path, pem, privateKey, this.password);
    } catch (err) {
      throw new KeyMaterialError(
        `cannot read the mandate ${role === 'active' ? 'signing' : 'next'} key ${path} (is SERVICE_AUDIT_KEY_PASSWORD right?): ` +
          (err as Error).message,
        { cause: err },
      );
    }
    if (publicJwk(createPublicKey(privateKey)).x !== entry.jwk.x)
      throw new Error(`${path} does not match the public key recorded for ${kid}`);
    return privateKey;
  }
}

function generateKey(dir: string, password: string | undefined, now: number): MandateKeyEntry {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const jwk = publicJwk(publicKey);
  const kid = ed25519Thumbprint(jwk);
  const pem = privateKey.export({
    type: 'pkcs8',
    format: 'pem',
    ...(password === undefined ? {} : { cipher: PEM_CIPHER, passphrase: password }),
  });
  writeFileSync(join(dir, `${kid}.pem`), pem, { mode: 0o600, flag: 'wx' });
  return { kid, jwk, created_at: new Date(now).toISOString(), retired_at: null };
}

/** Written to a temporary file and renamed, so a crash never leaves a half-written index. */
function writeIndex(dir: string, index: IndexFile): void {
  const path = join(dir, INDEX_FILE);
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(index, null, 2)}\n`, { mode: 0o644 });
  renameSync(tmp, path);
}
