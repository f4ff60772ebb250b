import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import type * as Forge from 'node-forge';
import type { HttpHandler } from '../../src/http/types.js';

const forge = createRequire(import.meta.url)('node-forge') as typeof Forge;

export interface IssuedCert {
  readonly cert: string;
  readonly certFile: string;
  readonly keyFile: string;
}

export interface TestCa {
  readonly caPem: string;
  readonly caFile: string;
  /** A server certificate for 127.0.0.1 (and `localhost`) signed by this CA, written into the CA's dir. */
  issue(name: string, opts?: { notBefore?: Date; notAfter?: Date }): IssuedCert;
}

function rsaKey(): { pem: string; forgeKey: Forge.pki.rsa.PrivateKey; publicKey: Forge.pki.rsa.PublicKey } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const pem = privateKey.export({ type: 'pkcs1', format: 'pem' }) as string;
  return {
    pem,
    forgeKey: forge.pki.privateKeyFromPem(pem),
    publicKey: forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }) as string),
  };
}

let serial = 1;

/** A private certificate authority in `dir`, as a cluster's issuer (cert-manager, a mesh) would be. */
export function testCa(dir: string, cn = 'govgate test CA'): TestCa {
  const caKey = rsaKey();
  const ca = forge.pki.createCertificate();
  ca.publicKey = caKey.publicKey;
  ca.serialNumber = (serial++).toString(16).padStart(2, '0');
  ca.validity.notBefore = new Date(Date.now() - 60_000);
  ca.validity.notAfter = new Date(Date.now() + 7 * 86_400_000);
  ca.setSubject([{ name: 'commonName', value: cn }]);
  ca.setIssuer([{ name: 'commonName', value: cn }]);
  ca.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
  ]);
  ca.sign(caKey.forgeKey, forge.md.sha256.create());
  const caPem = forge.pki.certificateToPem(ca);
  const caFile = join(dir, `${cn.replace(/\W+/g, '-')}.crt`);
  writeFileSync(caFile, caPem);
  return {
    caPem,
    caFile,
    issue(name, opts = {}) {
      const key = rsaKey();
      const c = forge.pki.createCertificate();
      c.publicKey = key.publicKey;
      c.serialNumber = (serial++).toString(16).padStart(2, '0');
      c.validity.notBefore = opts.notBefore ?? new Date(Date.now() - 60_000);
      c.validity.notAfter = opts.notAfter ?? new Date(Date.now() + 86_400_000);
      c.setSubject([{ name: 'commonName', value: name }]);
      c.setIssuer(ca.subject.attributes);
      c.setExtensions([
        { name: 'basicConstraints', cA: false },
        { name: 'extKeyUsage', serverAuth: true },
        {
          name: 'subjectAltName',
          altNames: [
            { type: 7, ip: '127.0.0.1' },
            { type: 2, value: 'localhost' },
          ],
        },
      ]);
      c.sign(caKey.forgeKey, forge.md.sha256.create());
      const cert = forge.pki.certificateToPem(c);
      const certFile = join(dir, `${name}.crt`);
      const keyFile = join(dir, `${name}.key`);
      writeFileSync(certFile, cert);
      writeFileSync(keyFile, key.pem, { mode: 0o600 });
      return { cert, certFile, keyFile };
    },
  };
}

/**
 * A handler that answers `/held` only once `release()` is called (a request kept in flight across
 * a certificate renewal) and any other path at once with `ok <path>`.
 */
export function heldHandler(): { handler: HttpHandler; release(): void; arrived(): boolean } {
  let release = (): void => {};
  const held = new Promise<void>((r) => {
    release = r;
  });
  let arrived = false;
  const handler: HttpHandler = (req, res) => {
    if (req.path === '/held') {
      arrived = true;
      void held.then(() => res.send(200, { 'content-type': 'text/plain' }, 'held answer'));
    } else res.send(200, { 'content-type': 'text/plain' }, `ok ${req.path}`);
  };
  return { handler, release: () => release(), arrived: () => arrived };
}

/** The line of /api/metrics that shows `issued` as the certificate in force of `listener`. */
export function expiryLine(listener: 'api' | 'injector', issued: IssuedCert): RegExp {
  const seconds = Math.floor(new Date(new X509Certificate(issued.cert).validTo).getTime() / 1000);
  return new RegExp(
    `^govgate_tls_certificate_expiry_timestamp_seconds\\{listener="${listener}"\\} ${seconds}$`,
    'm',
  );
}
