import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';

/**
 * A listener's certificate and key, read and checked at start, and again when the files change
 * (tls-reload.ts; docs/ops.md, "TLS").
 */
export interface TlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: Buffer;
  readonly key: Buffer;
  /** The leaf certificate's end of validity. */
  readonly notAfter: Date;
}

/** A certificate or key that cannot serve: an operator's to fix, said before anything listens. */
export class TlsConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TlsConfigError';
  }
}

function read(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new TlsConfigError(
      `cannot read the TLS ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? err}`,
    );
  }
}

/**
 * Reads a PEM certificate chain and its private key, and refuses, with the reason, a pair that
 * would fail at the first handshake instead: a file that is not PEM, a key that is not the
 * certificate's, an encrypted key, a leaf that has expired or is not valid yet.
 */
export function loadTlsFiles(certFile: string, keyFile: string, now = new Date()): TlsFiles {
  const cert = read(certFile, 'certificate');
  const key = read(keyFile, 'key');
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(cert);
  } catch {
    throw new TlsConfigError(`${certFile} is not a PEM certificate`);
  }
  let privateKey: ReturnType<typeof createPrivateKey>;
  try {
    privateKey = createPrivateKey(key);
  } catch {
    // PKCS#8 (`ENCRYPTED PRIVATE KEY`) or OpenSSL's traditional form (`Proc-Type: 4,ENCRYPTED`).
    const encrypted = /-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type:\s*4,ENCRYPTED/.test(
      key.toString('latin1'),
    );
    throw new TlsConfigError(
      encrypted
        ? `${keyFile} is encrypted: give the key without a passphrase (mount it from a Secret)`
        : `${keyFile} is not a PEM private key`,
    );
  }
  if (!leaf.checkPrivateKey(privateKey))
    throw new TlsConfigError(`${keyFile} is not the private key of the certificate in ${certFile}`);
  const notAfter = new Date(leaf.validTo);
  if (now > notAfter)
    throw new TlsConfigError(`the certificate in ${certFile} expired on ${notAfter.toISOString()}`);
  const notBefore = new Date(leaf.validFrom);
  if (now < notBefore)
    throw new TlsConfigError(`the certificate in ${certFile} is not valid before ${notBefore.toISOString()}`);
  return { certFile, keyFile, cert, key, notAfter };
}

/**
 * Whether the files still hold the bytes `files` read (an engine that reads the files itself, as
 * uWS does, checks it read what loadTlsFiles checked). A file that cannot be read has changed.
 */
export function unchangedOnDisk(files: TlsFiles): boolean {
  try {
    return readFileSync(files.certFile).equals(files.cert) && readFileSync(files.keyFile).equals(files.key);
  } catch {
    return false;
  }
}

/**
 * The certificates a client trusts: the system's, plus those in `caFile` (a PEM bundle: a private
 * CA, as a cluster's control plane has). Undefined with no file: the system's, as by default.
 */
export function trustWith(caFile: string | undefined): string[] | undefined {
  if (caFile === undefined) return undefined;
  const pem = read(caFile, 'CA bundle').toString('utf8');
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new TlsConfigError(`${caFile} holds no PEM certificate`);
  for (const b of blocks) {
    try {
      new X509Certificate(b);
    } catch {
      throw new TlsConfigError(`${caFile} holds a certificate that does not parse`);
    }
  }
  return [...rootCertificates, ...blocks];
}
