import { createPrivateKey, generateKeyPairSync, type KeyObject, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { createSecureContext, type SecureContext } from 'node:tls';
import type * as Forge from 'node-forge';
import { PEM_CIPHER, readKeyAtRest, writeAtomic } from '../crypto/pem-at-rest.js';

// node-forge is CommonJS without a default export in its typings: required, typed as its module.
const forge = createRequire(import.meta.url)('node-forge') as typeof Forge;

const DAY_MS = 86_400_000;
const CA_DAYS = 730;
/**
 * A CA certificate with less than this left is renewed (`ProxyCa.load`, `renewIfDue`). Renewed
 * with the same key and name, so an agent still holding the old certificate keeps accepting the
 * host certificates until that copy expires: this is the time operators have to restart agents
 * (they read the CA file once, when they start) after a renewal, which the sidecar logs.
 */
export const CA_RENEW_BEFORE_MS = 30 * DAY_MS;
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
 * REQUESTS_CA_BUNDLE). Its certificate is renewed with the same key within CA_RENEW_BEFORE_MS of
 * its end, and no host certificate outlives it. Certificates are signed with node-forge over RSA
 * keys node:crypto makes.
 */
export class ProxyCa {
  #certPem: string;
  #cert: Forge.pki.Certificate;
  readonly #key: Forge.pki.rsa.PrivateKey;
  readonly #certPath: string;
  /** Set when `load` found the certificate expired or near its end: the end of the one it replaced. */
  #renewedFrom: Date | undefined;
  /** One key for every host's certificate (made at start, never written). */
  readonly #leafKeyPem: string;
  readonly #leafPublic: Forge.pki.rsa.PublicKey;
  readonly #hosts = new Map<string, { context: SecureContext; madeAt: number }>();

  private constructor(certPem: string, key: KeyObject, certPath: string) {
    this.#certPem = certPem;
    this.#cert = forge.pki.certificateFromPem(certPem);
    this.#certPath = certPath;
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
   * trust this one. A certificate expired, or within CA_RENEW_BEFORE_MS of its end, at `now` is
   * renewed with the same key and written back (`renewedFrom` says so): used as it was, every
   * agent's TLS check failed with CERT_HAS_EXPIRED and nothing said why.
   */
  static load(keysDir: string, password?: string, now = Date.now()): ProxyCa {
    const pw = password === '' ? undefined : password;
    const dir = join(keysDir, 'proxy');
    const certPath = join(dir, 'ca.pem');
    const keyPath = join(dir, 'ca-key.pem');
    if (!existsSync(certPath) || !existsSync(keyPath)) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const made = makeCa(now);
      const keyPem = made.key.export({
        type: 'pkcs8',
        format: 'pem',
        ...(pw === undefined ? {} : { cipher: PEM_CIPHER, passphrase: pw }),
      });
      writeAtomic(keyPath, keyPem.toString(), 0o600);
      writeAtomic(certPath, made.certPem, 0o644);
    }
    const ca = new ProxyCa(
      readFileSync(certPath, 'utf8'),
      readKeyAtRest(keyPath, pw, 'the proxy CA key'),
      certPath,
    );
    ca.#renewedFrom = ca.renewIfDue(now);
    return ca;
  }

  /** The CA certificate (PEM) the agents trust: the renewed one after a renewal. */
  get certPem(): string {
    return this.#certPem;
  }

  /** When the CA certificate stops being valid. */
  get notAfter(): Date {
    return this.#cert.validity.notAfter;
  }

  /** Set when `load` renewed the certificate: when the one it replaced ends (or ended). */
  get renewedFrom(): Date | undefined {
    return this.#renewedFrom;
  }

  /**
   * Renews the certificate when it has expired or ends within CA_RENEW_BEFORE_MS of `now`: the
   * same key and name, a new serial, valid CA_DAYS from `now`, written over `proxy/ca.pem`.
   * Answers the end of the certificate it replaced, or undefined when none was due. Host
   * certificates made before are dropped, so each is made again under the renewed one. A new key
   * would have failed every agent that read the old certificate at once; with the same key they
   * go on until their copy expires, and read the renewed one when they restart. Whoever exported
   * the certificate (SERVICE_PROXY_CA_EXPORT_DIR) exports it again.
   */
  renewIfDue(now = Date.now()): Date | undefined {
    const previous = this.notAfter;
    if (previous.getTime() - now > CA_RENEW_BEFORE_MS) return undefined;
    const cert = caCertificate(
      this.#cert.publicKey as Forge.pki.rsa.PublicKey,
      this.#cert.subject.attributes,
      now,
    );
    cert.sign(this.#key, forge.md.sha256.create());
    const pem = forge.pki.certificateToPem(cert);
    writeAtomic(this.#certPath, pem, 0o644);
    // Read back from the PEM, as at start: its times are whole seconds there, as agents see them.
    this.#cert = forge.pki.certificateFromPem(pem);
    this.#certPem = pem;
    this.#hosts.clear();
    return previous;
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
    // Within the CA's validity: a host certificate that outlived its CA would be accepted by no
    // client past the CA's end anyway, and some clients refuse one that claims to.
    const ca = this.#cert.validity;
    cert.validity.notBefore = new Date(Math.max(now - 3_600_000, ca.notBefore.getTime()));
    cert.validity.notAfter = new Date(Math.min(now + LEAF_DAYS * DAY_MS, ca.notAfter.getTime()));
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
      cert: forge.pki.certificateToPem(cert) + this.#certPem,
      minVersion: 'TLSv1.2',
    });
    if (this.#hosts.size >= MAX_CACHED_HOSTS) this.#hosts.clear();
    this.#hosts.set(host, { context, madeAt: now });
    return context;
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

/**
 * A proxy CA certificate (unsigned) for `publicKey` named `name`, valid CA_DAYS from `now`: only
 * end-entity certificates below it (pathlen 0), for signing certificates and CRLs only.
 */
function caCertificate(
  publicKey: Forge.pki.rsa.PublicKey,
  name: Forge.pki.CertificateField[],
  now: number,
): Forge.pki.Certificate {
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = serial();
  cert.validity.notBefore = new Date(now - 3_600_000);
  cert.validity.notAfter = new Date(now + CA_DAYS * DAY_MS);
  cert.setSubject(name);
  cert.setIssuer(name);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  return cert;
}

function makeCa(now: number): { certPem: string; key: KeyObject } {
  const pair = rsaPair();
  const cert = caCertificate(
    forge.pki.publicKeyFromPem(pair.publicPem) as Forge.pki.rsa.PublicKey,
    [
      { name: 'commonName', value: `govgate sidecar proxy CA ${randomBytes(4).toString('hex')}` },
      { name: 'organizationName', value: 'govgate' },
    ],
    now,
  );
  cert.sign(forge.pki.privateKeyFromPem(pair.privatePem), forge.md.sha256.create());
  return { certPem: forge.pki.certificateToPem(cert), key: createPrivateKey(pair.privatePem) };
}
