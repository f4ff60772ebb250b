import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  scryptSync,
} from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import type { SigningKeyDocument } from '../audit/types.js';
import { keyIdFor, type SignatureAlg, toBase64, toHex } from '../core/chain/index.js';
import { KeyMaterialError } from './key-errors.js';
import { PEM_CIPHER, readKeyAtRest, writeAtomic } from './pem-at-rest.js';

/** The folder of `SERVICE_KEYS_DIR` that holds the audit (seal) keys. */
export const AUDIT_KEYS_FOLDER = 'audit';
const INDEX_FILE = 'keys.json';
const SEED_LABEL = 'GOVGATE ML-DSA-65 SEED';
const SEED_BYTES = 32;
const SEED_ENCRYPTION = 'scrypt-aes-256-gcm';
/** scrypt cost for the seed file (about 100 ms, 32 MiB); recorded in the file so it can change. */
const SCRYPT = { N: 1 << 15, r: 8, p: 1 } as const;
const SCRYPT_MAXMEM = 256 * 1024 * 1024;
/** BEGIN line, `Name: value` header lines, an optional blank line, base64, END line. */
const ARMOR = new RegExp(
  `^-----BEGIN ${SEED_LABEL}-----\\n((?:[A-Za-z-]+: [^\\n]*\\n)*)\\n?` +
    `([A-Za-z0-9+/=\\n]+?)\\n?-----END ${SEED_LABEL}-----\\n?$`,
);
const HEADER = /^([A-Za-z-]+): (.*)$/;
const KDF_PARAMS = /^N=(\d+),r=(\d+),p=(\d+)$/;
const ESCAPED_NEWLINE = /\\n/g;

export interface AuditKeysOptions {
  readonly keysDir: string;
  /** SERVICE_AUDIT_KEY_PASSWORD: encrypts the private key files at rest. */
  readonly password?: string;
  /** SERVICE_AUDIT_SIGNING_KEY: an Ed25519 private key PEM used instead of a generated one. */
  readonly signingKeyPem?: string;
  /** Clock, for tests. */
  readonly now?: () => number;
}

export interface ActiveEd25519Key {
  readonly name: string;
  readonly keyId: Uint8Array;
  readonly privateKey: KeyObject;
  /** Raw 32-byte public key. */
  readonly publicKey: Uint8Array;
}

export interface ActiveMlDsaKey {
  readonly name: string;
  readonly keyId: Uint8Array;
  readonly secretKey: Uint8Array;
  /** FIPS 204 encoding, 1,952 bytes. */
  readonly publicKey: Uint8Array;
  /** The 32-byte keygen seed the key pair is derived from (what the signing worker receives). */
  readonly seed: Uint8Array;
}

export interface ActiveAuditKeys {
  readonly ed25519: ActiveEd25519Key;
  readonly mldsa: ActiveMlDsaKey;
}

/** One key as the index file records it (public half only). */
export interface AuditKeyEntry {
  readonly name: string;
  readonly alg: SignatureAlg;
  /** C2SP key ID, 8 hex characters. */
  readonly key_id: string;
  /** Raw public key, base64. */
  readonly public_key: string;
  /** `env`: the Ed25519 key came from SERVICE_AUDIT_SIGNING_KEY and has no file here. */
  readonly source: 'generated' | 'env';
  readonly created_at: string;
  readonly retired_at: string | null;
}

/** What a rotation changed: the keys made active, the ones they retired, and any left as it was. */
export interface AuditKeyRotation {
  readonly active: readonly AuditKeyEntry[];
  readonly retired: readonly AuditKeyEntry[];
  /** The Ed25519 key from SERVICE_AUDIT_SIGNING_KEY, which only that variable rotates. */
  readonly kept: readonly AuditKeyEntry[];
}

interface IndexFile {
  readonly v: 1;
  readonly active: { readonly ed25519: string; readonly 'ml-dsa-65': string };
  readonly keys: AuditKeyEntry[];
}

/** A freshly made or read key with its private material. */
interface Ed25519Material {
  readonly entry: AuditKeyEntry;
  readonly privateKey: KeyObject;
  readonly publicKey: Uint8Array;
}

interface MlDsaMaterial {
  readonly entry: AuditKeyEntry;
  readonly seed: Uint8Array;
  readonly secretKey: Uint8Array;
  readonly publicKey: Uint8Array;
}

const INSTRUCTIONS: readonly string[] = Object.freeze([
  'Every org audit chain is sealed with two signatures: Ed25519 and ML-DSA-65 (post-quantum). ' +
    'A seal is valid only if BOTH verify with the keys listed here.',
  '1. Export the chain: GET /api/audit/export?format=jsonl and save the response as chain.jsonl ' +
    '(with curl, use -f: a failed download must not leave an error body or an empty file behind).',
  '2. Save this document (the response of GET /api/audit/signing-key) as keys.json.',
  '3. In a checkout of govgate (npm ci builds it), run: ' +
    'node dist/src/cli.js verify chain.jsonl --keys keys.json ' +
    '(run it there: outside a checkout, npm exec would fetch a package of that name from the npm registry).',
  '4. "intact" (exit 0) means every event hash, every link to the previous event and every seal ' +
    'checked out, and a valid seal covers every event. "compromised" (exit 1) means at least one ' +
    'did not: broken_events lists each line (the event seq) with its reason (content_modified, ' +
    'chain_broken, checkpoint_mismatch, signature_invalid or unauthorized_erasure). "unsealed" ' +
    '(exit 3) means nothing is wrong but some events are covered by no valid seal ' +
    '(unsealed_events, after seq sealed_through): hashes and links alone prove nothing, since ' +
    'anyone can compute them; export again once the chain is quiet. "empty" (exit 0) means there ' +
    'were no events: an empty file reads so too, so check the download.',
  '5. To check a seal by hand: a seal is a C2SP signed note. Its text is the lines up to the ' +
    'blank line: origin (govgate/<org_id>), tree size, base64 Merkle root, "head <hash of the ' +
    'last event>", "alg ed25519+ml-dsa-65", each ending in a newline. After the blank line comes ' +
    'one signature line per key: an em dash (U+2014), a space, the key name, a space, and base64 ' +
    'of the 4-byte key ID followed by the signature.',
  '6. Match each signature line to a key here by name and key_id (hex of those first 4 bytes). ' +
    'The signed message is the UTF-8 bytes of the note text, final newline included, blank line ' +
    'excluded. Check the Ed25519 line (RFC 8032, 64-byte signature) with the ed25519 public_key ' +
    'and the ML-DSA-65 line (FIPS 204, pure mode, empty context, 3,309-byte signature) with the ' +
    'ml-dsa-65 public_key. BOTH must verify; one alone does not make a valid seal.',
  '7. Retired keys stay listed forever: seals made before a key rotation verify with the keys ' +
    'that were active then.',
]);

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** `govgate-audit-<alg>-<first 8 hex of SHA-256(public key)>`: a valid C2SP note key name. */
function keyName(alg: SignatureAlg, publicKey: Uint8Array): string {
  const short = createHash('sha256').update(publicKey).digest('hex').slice(0, 8);
  return `govgate-audit-${alg === 'ed25519' ? 'ed25519' : 'mldsa65'}-${short}`;
}

function makeEntry(
  alg: SignatureAlg,
  publicKey: Uint8Array,
  source: AuditKeyEntry['source'],
  at: string,
): AuditKeyEntry {
  const name = keyName(alg, publicKey);
  return {
    name,
    alg,
    key_id: toHex(keyIdFor(name, alg, publicKey)),
    public_key: toBase64(publicKey),
    source,
    created_at: at,
    retired_at: null,
  };
}

function rawEd25519Public(key: KeyObject): Uint8Array {
  const jwk = key.export({ format: 'jwk' });
  if (jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string') throw new Error('not an Ed25519 key');
  return new Uint8Array(Buffer.from(jwk.x, 'base64url'));
}

function writeIndex(dir: string, index: IndexFile): void {
  writeAtomic(join(dir, INDEX_FILE), `${JSON.stringify(index, null, 2)}\n`, 0o644);
}

function isEntry(value: unknown): value is AuditKeyEntry {
  if (value === null || typeof value !== 'object') return false;
  const e = value as Record<string, unknown>;
  return (
    typeof e.name === 'string' &&
    (e.alg === 'ed25519' || e.alg === 'ml-dsa-65') &&
    typeof e.key_id === 'string' &&
    /^[0-9a-f]{8}$/.test(e.key_id) &&
    typeof e.public_key === 'string' &&
    (e.source === 'generated' || e.source === 'env') &&
    typeof e.created_at === 'string' &&
    (e.retired_at === null || typeof e.retired_at === 'string')
  );
}

function readIndex(path: string): IndexFile {
  const parsed: unknown = JSON.parse(readFileSync(path, 'utf8'));
  const index = parsed as { active?: Record<string, unknown>; keys?: unknown } | null;
  const active = index?.active;
  if (
    index === null ||
    typeof index !== 'object' ||
    active === null ||
    typeof active !== 'object' ||
    typeof active.ed25519 !== 'string' ||
    typeof active['ml-dsa-65'] !== 'string' ||
    !Array.isArray(index.keys) ||
    !index.keys.every(isEntry)
  ) {
    throw new Error(`${path} is not an audit key index`);
  }
  return { v: 1, active: { ed25519: active.ed25519, 'ml-dsa-65': active['ml-dsa-65'] }, keys: index.keys };
}

/** Makes `next` the active key of its algorithm, retiring the previous one (at `at`). */
function activate(index: IndexFile, next: AuditKeyEntry, at: string): IndexFile {
  const old = index.active[next.alg];
  let found = false;
  const keys = index.keys.map((e) => {
    if (e.name === next.name) {
      found = true;
      return { ...next, created_at: e.created_at, retired_at: null };
    }
    return e.name === old && e.retired_at === null ? { ...e, retired_at: at } : e;
  });
  if (!found) keys.push(next);
  return { v: 1, active: { ...index.active, [next.alg]: next.name }, keys };
}

// ---------------------------------------------------------------------------------------------
// Ed25519: PKCS#8 PEM, encrypted with the password when one is given.

function generateEd25519(dir: string, password: string | undefined, at: string): Ed25519Material {
  const { privateKey, publicKey: pub } = generateKeyPairSync('ed25519');
  const publicKey = rawEd25519Public(pub);
  const entry = makeEntry('ed25519', publicKey, 'generated', at);
  const pem = privateKey.export({
    type: 'pkcs8',
    format: 'pem',
    ...(password === undefined ? {} : { cipher: PEM_CIPHER, passphrase: password }),
  });
  writeAtomic(join(dir, `${entry.name}.pem`), pem.toString(), 0o600);
  return { entry, privateKey, publicKey };
}

/**
 * Reads SERVICE_AUDIT_SIGNING_KEY. A PEM whose newlines were written as `\n` (common in env
 * files) is accepted. Only an Ed25519 private key is.
 */
export function parseSigningKeyPem(pem: string, password?: string): KeyObject {
  const text = pem.includes('\n') ? pem : pem.replace(ESCAPED_NEWLINE, '\n');
  let key: KeyObject;
  try {
    key = createPrivateKey({
      key: text,
      format: 'pem',
      ...(password === undefined || password === '' ? {} : { passphrase: password }),
    });
  } catch (err) {
    const hint = text.includes('ENCRYPTED')
      ? password === undefined || password === ''
        ? ' (it is encrypted: set SERVICE_AUDIT_KEY_PASSWORD)'
        : ' (is SERVICE_AUDIT_KEY_PASSWORD right?)'
      : text.includes('-----BEGIN')
        ? ''
        : ' (it takes the PEM text, not a file path: SERVICE_AUDIT_SIGNING_KEY="$(cat key.pem)")';
    throw new KeyMaterialError(
      `SERVICE_AUDIT_SIGNING_KEY is not a readable private key PEM${hint}: ${(err as Error).message}`,
      { cause: err },
    );
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    const type = key.asymmetricKeyType ?? 'unknown';
    throw new KeyMaterialError(
      `SERVICE_AUDIT_SIGNING_KEY must be an Ed25519 private key; this one is ${type}`,
    );
  }
  return key;
}

// ---------------------------------------------------------------------------------------------
// ML-DSA-65: the 32-byte keygen seed, armored, AES-256-GCM under scrypt(password) when one is given.

function seedAad(name: string): Buffer {
  return Buffer.from(`govgate-audit-seed\n${name}`, 'utf8');
}

function armorSeed(name: string, seed: Uint8Array, password: string | undefined): string {
  const begin = `-----BEGIN ${SEED_LABEL}-----\n`;
  const end = `-----END ${SEED_LABEL}-----\n`;
  if (password === undefined) return `${begin}${toBase64(seed)}\n${end}`;
  const salt = randomBytes(16);
  const iv = randomBytes(12);
  const key = scryptSync(password, salt, 32, { ...SCRYPT, maxmem: SCRYPT_MAXMEM });
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(seedAad(name));
  const ct = Buffer.concat([cipher.update(seed), cipher.final()]);
  return (
    `${begin}Encryption: ${SEED_ENCRYPTION}\nKDF-Params: N=${SCRYPT.N},r=${SCRYPT.r},p=${SCRYPT.p}\n` +
    `Salt: ${salt.toString('base64')}\nIV: ${iv.toString('base64')}\n` +
    `Tag: ${cipher.getAuthTag().toString('base64')}\n\n${ct.toString('base64')}\n${end}`
  );
}

function unarmorSeed(path: string, name: string, password: string | undefined): Uint8Array {
  const m = ARMOR.exec(readFileSync(path, 'utf8'));
  if (m === null) throw new Error(`${path} is not a ${SEED_LABEL} file`);
  const headers = new Map<string, string>();
  for (const line of (m[1] ?? '').split('\n')) {
    const h = HEADER.exec(line);
    if (h !== null) headers.set((h[1] as string).toLowerCase(), h[2] as string);
  }
  const body = Buffer.from((m[2] ?? '').replaceAll('\n', ''), 'base64');
  const encryption = headers.get('encryption');
  let seed: Buffer;
  if (encryption === undefined) {
    seed = body;
  } else {
    if (encryption !== SEED_ENCRYPTION) throw new Error(`${path}: unknown encryption ${encryption}`);
    if (password === undefined) {
      throw new KeyMaterialError(`${path} is encrypted: set SERVICE_AUDIT_KEY_PASSWORD`);
    }
    const kdf = KDF_PARAMS.exec(headers.get('kdf-params') ?? '');
    const salt = Buffer.from(headers.get('salt') ?? '', 'base64');
    const iv = Buffer.from(headers.get('iv') ?? '', 'base64');
    const tag = Buffer.from(headers.get('tag') ?? '', 'base64');
    const N = Number(kdf?.[1]);
    const r = Number(kdf?.[2]);
    const p = Number(kdf?.[3]);
    if (
      kdf === null ||
      N > 1 << 20 ||
      r > 32 ||
      p > 16 ||
      salt.length < 16 ||
      iv.length !== 12 ||
      tag.length !== 16
    ) {
      throw new Error(`${path}: malformed encryption headers`);
    }
    try {
      const key = scryptSync(password, salt, 32, { N, r, p, maxmem: SCRYPT_MAXMEM });
      const decipher = createDecipheriv('aes-256-gcm', key, iv);
      decipher.setAAD(seedAad(name));
      decipher.setAuthTag(tag);
      seed = Buffer.concat([decipher.update(body), decipher.final()]);
    } catch (err) {
      throw new KeyMaterialError(
        `cannot decrypt the audit ML-DSA-65 seed ${path} (is SERVICE_AUDIT_KEY_PASSWORD right?)`,
        { cause: err },
      );
    }
  }
  if (seed.length !== SEED_BYTES) throw new Error(`${path} does not hold a ${SEED_BYTES}-byte seed`);
  return new Uint8Array(seed);
}

function mlDsaFromSeed(entry: AuditKeyEntry, seed: Uint8Array): MlDsaMaterial {
  const { secretKey, publicKey } = ml_dsa65.keygen(seed);
  return { entry, seed, secretKey, publicKey };
}

function generateMlDsa(dir: string, password: string | undefined, at: string): MlDsaMaterial {
  const seed = new Uint8Array(randomBytes(SEED_BYTES));
  const { secretKey, publicKey } = ml_dsa65.keygen(seed);
  const entry = makeEntry('ml-dsa-65', publicKey, 'generated', at);
  writeAtomic(join(dir, `${entry.name}.seed`), armorSeed(entry.name, seed, password), 0o600);
  return { entry, seed, secretKey, publicKey };
}

function privateFile(dir: string, entry: AuditKeyEntry): string {
  return join(dir, `${entry.name}${entry.alg === 'ed25519' ? '.pem' : '.seed'}`);
}

// ---------------------------------------------------------------------------------------------

/**
 * The key pairs that sign seals, in `keysDir/audit/`: `keys.json` lists every key (name, C2SP key
 * ID, raw public key, `created_at`, `retired_at`); the active Ed25519 key is `<name>.pem` (PKCS#8,
 * encrypted when a password is given) unless SERVICE_AUDIT_SIGNING_KEY supplies it; the active
 * ML-DSA-65 key is `<name>.seed`. Private files are mode 0600. Retired public keys stay in the
 * published document forever; retired private files are deleted.
 */
export class AuditKeys {
  private current: ActiveAuditKeys;
  private doc: SigningKeyDocument;
  private gen = 0;

  private constructor(
    private readonly dir: string,
    private readonly password: string | undefined,
    private readonly envKey: KeyObject | undefined,
    private index: IndexFile,
    private readonly clock: () => number,
    ed: Ed25519Material,
    ml: MlDsaMaterial,
  ) {
    this.current = toActive(ed, ml);
    this.doc = buildDocument(index);
  }

  /** Opens the keys under `keysDir/audit/`, generating the first pair on first use. */
  static load(opts: AuditKeysOptions): AuditKeys {
    const dir = join(opts.keysDir, AUDIT_KEYS_FOLDER);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const pw = opts.password === '' ? undefined : opts.password;
    const clock = opts.now ?? Date.now;
    const envKey =
      opts.signingKeyPem === undefined || opts.signingKeyPem === ''
        ? undefined
        : parseSigningKeyPem(opts.signingKeyPem, pw);
    const indexPath = join(dir, INDEX_FILE);
    const at = iso(clock());

    let ed: Ed25519Material | undefined;
    let ml: MlDsaMaterial | undefined;
    let index: IndexFile;
    const stale: AuditKeyEntry[] = [];
    if (!existsSync(indexPath)) {
      ed = envKey === undefined ? generateEd25519(dir, pw, at) : fromEnv(envKey, at);
      ml = generateMlDsa(dir, pw, at);
      index = {
        v: 1,
        active: { ed25519: ed.entry.name, 'ml-dsa-65': ml.entry.name },
        keys: [ed.entry, ml.entry],
      };
      writeIndex(dir, index);
    } else {
      index = readIndex(indexPath);
      const previous = entryOf(index, index.active.ed25519, 'ed25519');
      // The Ed25519 key changed source: SERVICE_AUDIT_SIGNING_KEY set, changed or removed.
      if (envKey !== undefined) {
        const next = fromEnv(envKey, at);
        if (next.entry.public_key !== previous.public_key) ed = next;
      } else if (previous.source === 'env') {
        ed = generateEd25519(dir, pw, at);
      }
      if (ed !== undefined) {
        index = activate(index, ed.entry, at);
        writeIndex(dir, index);
        if (previous.source === 'generated') stale.push(previous);
      }
    }
    ed ??= readEd25519Material(dir, index, pw, envKey);
    ml ??= readMlDsaMaterial(dir, index, pw);
    for (const e of stale) rmSync(privateFile(dir, e), { force: true });
    return new AuditKeys(dir, pw, envKey, index, clock, ed, ml);
  }

  /** The keys new seals are signed with. */
  active(): ActiveAuditKeys {
    return this.current;
  }

  /** Bumped by every rotation, so a signer knows to pick up the new keys. */
  get generation(): number {
    return this.gen;
  }

  /** Every key, retired ones included (the index file's content). */
  entries(): readonly AuditKeyEntry[] {
    return this.index.keys;
  }

  /** The body of GET /api/audit/signing-key and the --keys file of `govgate verify`. */
  publicDocument(): SigningKeyDocument {
    return this.doc;
  }

  /**
   * Makes new keys active and retires the ones they replace: the retired public keys stay
   * published (old seals keep verifying), their private files are deleted. Both keys are replaced,
   * except an Ed25519 key from SERVICE_AUDIT_SIGNING_KEY, which is `kept` (it is rotated by
   * changing that variable). Seals cut after this are signed with the new keys.
   */
  rotate(): AuditKeyRotation {
    const at = iso(this.clock());
    const oldEd = this.entry(this.index.active.ed25519);
    const oldMl = this.entry(this.index.active['ml-dsa-65']);
    const ed =
      this.envKey === undefined
        ? generateEd25519(this.dir, this.password, at)
        : readEd25519Material(this.dir, this.index, this.password, this.envKey);
    const ml = generateMlDsa(this.dir, this.password, at);
    let index = activate(this.index, ml.entry, at);
    if (this.envKey === undefined) index = activate(index, ed.entry, at);
    writeIndex(this.dir, index);
    this.index = index;
    this.current = toActive(ed, ml);
    this.doc = buildDocument(index);
    this.gen++;
    const retired = this.envKey === undefined ? [oldEd, oldMl] : [oldMl];
    // The index no longer names them as active: a crash before this leaves stray files only.
    for (const e of retired) if (e.source === 'generated') rmSync(privateFile(this.dir, e), { force: true });
    return {
      active: this.envKey === undefined ? [ed.entry, ml.entry] : [ml.entry],
      retired: retired.map((e) => this.entry(e.name)),
      kept: this.envKey === undefined ? [] : [oldEd],
    };
  }

  private entry(name: string): AuditKeyEntry {
    const e = this.index.keys.find((k) => k.name === name);
    if (e === undefined) throw new Error(`audit key index names an unknown key ${name}`);
    return e;
  }
}

function entryOf(index: IndexFile, name: string, alg: SignatureAlg): AuditKeyEntry {
  const e = index.keys.find((k) => k.name === name);
  if (e === undefined || e.alg !== alg)
    throw new Error(`audit key index names an unknown ${alg} key ${name}`);
  return e;
}

function fromEnv(privateKey: KeyObject, at: string): Ed25519Material {
  const publicKey = rawEd25519Public(createPublicKey(privateKey));
  return { entry: makeEntry('ed25519', publicKey, 'env', at), privateKey, publicKey };
}

function readEd25519Material(
  dir: string,
  index: IndexFile,
  password: string | undefined,
  envKey: KeyObject | undefined,
): Ed25519Material {
  const entry = entryOf(index, index.active.ed25519, 'ed25519');
  const path = privateFile(dir, entry);
  const privateKey = envKey ?? readKeyAtRest(path, password, 'the audit signing key');
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error(`${path} is not an Ed25519 key`);
  const publicKey = rawEd25519Public(createPublicKey(privateKey));
  if (toBase64(publicKey) !== entry.public_key) {
    throw new Error(`${path} does not match the public key recorded for ${entry.name}`);
  }
  return { entry, privateKey, publicKey };
}

function readMlDsaMaterial(dir: string, index: IndexFile, password: string | undefined): MlDsaMaterial {
  const entry = entryOf(index, index.active['ml-dsa-65'], 'ml-dsa-65');
  const path = privateFile(dir, entry);
  const seed = unarmorSeed(path, entry.name, password);
  const material = mlDsaFromSeed(entry, seed);
  if (toBase64(material.publicKey) !== entry.public_key) {
    throw new Error(`${path} does not match the public key recorded for ${entry.name}`);
  }
  // A seed kept in the clear while a password is set is sealed now (a password set after the
  // first start), as encryptIfPlain does for the PEMs.
  if (password !== undefined && !readFileSync(path, 'utf8').includes('Encryption:')) {
    try {
      writeAtomic(path, armorSeed(entry.name, seed, password), 0o600);
    } catch {
      // read-only (keys mounted from a Secret): kept as it is, as encryptIfPlain keeps a PEM
    }
  }
  return material;
}

function toActive(ed: Ed25519Material, ml: MlDsaMaterial): ActiveAuditKeys {
  return {
    ed25519: {
      name: ed.entry.name,
      keyId: keyIdFor(ed.entry.name, 'ed25519', ed.publicKey),
      privateKey: ed.privateKey,
      publicKey: ed.publicKey,
    },
    mldsa: {
      name: ml.entry.name,
      keyId: keyIdFor(ml.entry.name, 'ml-dsa-65', ml.publicKey),
      secretKey: ml.secretKey,
      publicKey: ml.publicKey,
      seed: ml.seed,
    },
  };
}

function buildDocument(index: IndexFile): SigningKeyDocument {
  const keys = index.keys.map((e) =>
    Object.freeze({
      name: e.name,
      alg: e.alg,
      key_id: e.key_id,
      public_key: e.public_key,
      status: index.active[e.alg] === e.name ? ('active' as const) : ('retired' as const),
      created_at: e.created_at,
      retired_at: index.active[e.alg] === e.name ? null : e.retired_at,
    }),
  );
  return Object.freeze({
    algorithms: Object.freeze(['ed25519', 'ml-dsa-65'] as const),
    keys: Object.freeze(keys),
    instructions: INSTRUCTIONS,
  });
}
