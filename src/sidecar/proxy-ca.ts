import { createPrivateKey, generateKeyPairSync, type KeyObject, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import type * as Forge from 'node-forge';
import { KeyMaterialError } from '../crypto/key-errors.js';
import { encryptIfPlain, PEM_CIPHER, writeAtomic } from '../crypto/pem-at-rest.js';

// node-forge is CommonJS without a default export in its typings: required, typed as its module.
const forge = createRequire(import.meta.url)('node-forge') as typeof Forge;

const CA_DAYS = 730;
const LEAF_DAYS = 7;
/** A host's certificate is made again once it is this old (it stays valid days longer). */
const LEAF_RENEW_MS = 24 * 3_600_000;
const MAX_CACHED_HOSTS = 1_000;

/**
 * The sidecar forward proxy's certificate authority (docs/sidecar.md, "The forward proxy"): made
 * once per keys dir (`proxy/ca.pem`, and its key `proxy/ca-key.pem`, mode 0600, PKCS#8 encrypted
 * with SERVICE_AUDIT_KEY_PASSWORD when one is set, as the audit and mandate keys are), it signs a
 * certificate for each model-provider host an agent reaches through the proxy, so the sidecar can
 * read and govern the call. The agent trusts `proxy/ca.pem` (NODE_EXTRA_CA_CERTS, SSL_CERT_FILE,
 * REQUESTS_CA_BUNDLE). Certificates are signed with node-forge over RSA keys node:crypto makes.
 */
export class ProxyCa {
  readonly certPem: string;
  readonly #cert: Forge.pki.Certificate;
  readonly #key: Forge.pki.rsa.PrivateKey;
  /** One key for every host's certificate (made at start, never written). */
  readonly #leafKeyPem: string;
  readonly #leafPublic: Forge.pki.rsa.PublicKey;
  readonly #hosts = new Map<string, { context: SecureContext; madeAt: number }>();

  private constructor(certPem: string, key: KeyObject) {
    this.certPem = certPem;
    this.#cert = forge.pki.certificateFromPem(certPem);
    // node-forge reads no encrypted PKCS#8: it is handed the key node:crypto decrypted, in memory.
    this.#key = forge.pki.privateKeyFromPem(
      key.export({ type: 'pkcs1', format: 'pem' }) as string,
    ) as Forge.pki.rsa.PrivateKey;
    const leaf = rsaPair();
    this.#leafKeyPem = leaf.privatePem;
    this.#leafPublic = forge.pki.publicKeyFromPem(leaf.publicPem) as Forge.pki.rsa.PublicKey;
  }

  /**
   * The CA of `keysDir`, made on first use; its key encrypted with `password` (the audit keys'
   * SERVICE_AUDIT_KEY_PASSWORD) when one is given. A key kept in the clear from before a password
   * was set is written back encrypted (encryptIfPlain). A key that cannot be read (a wrong or a
   * missing password) is a KeyMaterialError, and the CA is never made anew for it: the agents
   * trust this one.
   */
  static load(keysDir: string, password?: string): ProxyCa {
    const pw = password === '' ? undefined : password;
    const dir = join(keysDir, 'proxy');
    const certPath = join(dir, 'ca.pem');
    const keyPath = join(dir, 'ca-key.pem');
    if (!existsSync(certPath) || !existsSync(keyPath)) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const made = makeCa();
      const keyPem = made.key.export({
        type: 'pkcs8',
        format: 'pem',
        ...(pw === undefined ? {} : { cipher: PEM_CIPHER, passphrase: pw }),
      });
      writeAtomic(keyPath, keyPem.toString(), 0o600);
      writeAtomic(certPath, made.certPem, 0o644);
    }
    return new ProxyCa(readFileSync(certPath, 'utf8'), readCaKey(keyPath, pw));
  }

  /** The CA certificate of `keysDir` (public: read without its key, so without a password). */
  static readCertificate(keysDir: string): string {
    return readFileSync(ProxyCa.certPath(keysDir), 'utf8');
  }

  /**
   * Writes the CA certificate (public, 0644) as `ca.pem` in `dir` (SERVICE_PROXY_CA_EXPORT_DIR),
   * where the agents' containers read it: a volume of its own, so they mount nothing of the keys
   * dir, whose private keys stay the sidecar's.
   */
  exportTo(dir: string): string {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    const path = join(dir, 'ca.pem');
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, this.certPem, { mode: 0o644 });
    renameSync(tmp, path);
    return path;
  }

  /** Where `load` keeps the CA certificate, for the agent to trust. */
  static certPath(keysDir: string): string {
    return join(keysDir, 'proxy', 'ca.pem');
  }

  /** The TLS context that presents a certificate for `host`, signed by this CA. */
  contextFor(host: string, now = Date.now()): SecureContext {
    const hit = this.#hosts.get(host);
    if (hit !== undefined && now - hit.madeAt < LEAF_RENEW_MS) return hit.context;
    const cert = forge.pki.createCertificate();
    cert.publicKey = this.#leafPublic;
    cert.serialNumber = serial();
    cert.validity.notBefore = new Date(now - 3_600_000);
    cert.validity.notAfter = new Date(now + LEAF_DAYS * 86_400_000);
    cert.setSubject([{ name: 'commonName', value: host }]);
    cert.setIssuer(this.#cert.subject.attributes);
    cert.setExtensions([
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [isIP(host) ? { type: 7, ip: host } : { type: 2, value: host }] },
    ]);
    cert.sign(this.#key, forge.md.sha256.create());
    const context = createSecureContext({
      key: this.#leafKeyPem,
      cert: forge.pki.certificateToPem(cert) + this.certPem,
      minVersion: 'TLSv1.2',
    });
    if (this.#hosts.size >= MAX_CACHED_HOSTS) this.#hosts.clear();
    this.#hosts.set(host, { context, madeAt: now });
    return context;
  }
}

function readCaKey(path: string, password: string | undefined): KeyObject {
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
      `cannot read the proxy CA key ${path} (is SERVICE_AUDIT_KEY_PASSWORD right?): ${(err as Error).message}`,
      { cause: err },
    );
  }
}

function rsaPair(): { privatePem: string; publicPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    privatePem: privateKey.export({ type: 'pkcs1', format: 'pem' }) as string,
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }) as string,
  };
}

/** A positive serial number (a leading 0 nibble keeps the DER integer positive). */
function serial(): string {
  return `0${randomBytes(15).toString('hex')}`;
}

function makeCa(): { certPem: string; key: KeyObject } {
  const pair = rsaPair();
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(pair.publicPem);
  cert.serialNumber = serial();
  const now = Date.now();
  cert.validity.notBefore = new Date(now - 3_600_000);
  cert.validity.notAfter = new Date(now + CA_DAYS * 86_400_000);
  const name = [
    { name: 'commonName', value: `govgate sidecar proxy CA ${randomBytes(4).toString('hex')}` },
    { name: 'organizationName', value: 'govgate' },
  ];
  cert.setSubject(name);
  cert.setIssuer(name);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(pair.privatePem), forge.md.sha256.create());
  return { certPem: forge.pki.certificateToPem(cert), key: createPrivateKey(pair.privatePem) };
}
