import { createPrivateKey, generateKeyPairSync, X509Certificate } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { connect, createServer, type DetailedPeerCertificate } from 'node:tls';
import type * as Forge from 'node-forge';
import type { Test } from 'tap';
import t from 'tap';
import { runKeys } from '../../src/cli-keys.js';
import { ProxyCa } from '../../src/sidecar/proxy-ca.js';
import { createLogger } from '../../src/util/log.js';
import { freePort, startTestSidecar } from '../helpers/sidecar.js';
import { tempDir } from '../helpers/tmp.js';

const forge = createRequire(import.meta.url)('node-forge') as typeof Forge;
const DAY = 86_400_000;

function tempKeysDir(t: Test): string {
  const dir = tempDir('govgate-proxy-ca-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const keyFile = (keysDir: string): string => join(keysDir, 'proxy', 'ca-key.pem');
const notAfterOf = (pem: string): number => Date.parse(new X509Certificate(pem).validTo);
const publicKeyOf = (pem: string): string =>
  new X509Certificate(pem).publicKey.export({ type: 'spki', format: 'pem' }).toString();

/**
 * A proxy CA in `keysDir` as a sidecar made it `ageDays` ago (valid two years from then, its key
 * in the clear): what a keys dir kept across restarts holds when that CA nears its end.
 */
function seedProxyCa(keysDir: string, ageDays: number): string {
  const made = Date.now() - ageDays * DAY;
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }) as string);
  cert.serialNumber = '01';
  cert.validity.notBefore = new Date(made - 3_600_000);
  cert.validity.notAfter = new Date(made + 730 * DAY);
  const name = [
    { name: 'commonName', value: 'govgate sidecar proxy CA seeded' },
    { name: 'organizationName', value: 'govgate' },
  ];
  cert.setSubject(name);
  cert.setIssuer(name);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  const keyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  cert.sign(forge.pki.privateKeyFromPem(keyPem), forge.md.sha256.create());
  const certPem = forge.pki.certificateToPem(cert);
  mkdirSync(join(keysDir, 'proxy'), { recursive: true, mode: 0o700 });
  writeFileSync(keyFile(keysDir), keyPem, { mode: 0o600 });
  writeFileSync(ProxyCa.certPath(keysDir), certPem, { mode: 0o644 });
  return certPem;
}

/** The certificate a server presenting `ca`'s context for `host` made at `now` shows a client (chain unchecked). */
async function leafAt(t: Test, ca: ProxyCa, host: string, now: number): Promise<DetailedPeerCertificate> {
  // The client ends the connection: ended by the server as its handshake completes, it could be
  // reset before the client's side of the handshake completed (TLS 1.3).
  const server = createServer({ SNICallback: (_name, cb) => cb(null, ca.contextFor(host, now)) }, (s) =>
    s.on('error', () => undefined),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const port = (server.address() as { port: number }).port;
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, servername: host, rejectUnauthorized: false }, () => {
      const peer = socket.getPeerCertificate(true);
      socket.end();
      resolve(peer);
    });
    socket.on('error', reject);
  });
}

/**
 * A TLS handshake with a server presenting `ca`'s certificate for `host`, by a client that trusts
 * only `trusted` (the agent's NODE_EXTRA_CA_CERTS): resolves once the client accepted it.
 */
async function handshake(t: Test, ca: ProxyCa, host: string, trusted: string): Promise<void> {
  // The client ends the connection (see leafAt).
  const server = createServer({ SNICallback: (_name, cb) => cb(null, ca.contextFor(host)) }, (s) =>
    s.on('error', () => undefined),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, servername: host, ca: trusted }, () => {
      socket.end();
      resolve();
    });
    socket.on('error', reject);
  });
}

t.test('with a password the CA key is encrypted at rest, and the same CA comes back', async (t) => {
  const dir = tempKeysDir(t);
  const ca = ProxyCa.load(dir, 'correct horse');
  const pem = readFileSync(keyFile(dir), 'utf8');
  t.match(pem, /^-----BEGIN ENCRYPTED PRIVATE KEY-----\n/, 'encrypted, as the audit and mandate keys are');
  t.notMatch(pem, /BEGIN RSA PRIVATE KEY/);
  t.equal(statSync(keyFile(dir)).mode & 0o777, 0o600);
  const again = ProxyCa.load(dir, 'correct horse');
  t.equal(again.certPem, ca.certPem, 'the CA the agents trust is kept');
  await handshake(t, again, 'api.openai.com', ca.certPem);
  t.pass('its host certificates chain to that CA');

  t.throws(() => ProxyCa.load(dir, 'wrong'), {
    name: 'KeyMaterialError',
    message: /SERVICE_AUDIT_KEY_PASSWORD/,
  });
  t.throws(() => ProxyCa.load(dir), { name: 'KeyMaterialError' }, 'nor without the password');
  t.equal(readFileSync(keyFile(dir), 'utf8'), pem, 'a key it cannot read is never replaced');
  t.equal(ProxyCa.load(dir, 'correct horse').certPem, ca.certPem);
});

t.test('a CA key written in the clear is encrypted once a password is set, the CA kept', async (t) => {
  const dir = tempKeysDir(t);
  const plain = ProxyCa.load(dir);
  t.match(readFileSync(keyFile(dir), 'utf8'), /^-----BEGIN PRIVATE KEY-----\n/, 'no password: in the clear');
  // As earlier versions wrote it, whatever the password: PKCS#1 in the clear.
  const legacy = createPrivateKey(readFileSync(keyFile(dir), 'utf8')).export({
    type: 'pkcs1',
    format: 'pem',
  });
  writeFileSync(keyFile(dir), legacy, { mode: 0o600 });
  t.equal(ProxyCa.load(dir).certPem, plain.certPem, 'read as it is without a password');
  t.match(readFileSync(keyFile(dir), 'utf8'), /^-----BEGIN RSA PRIVATE KEY-----\n/, 'and left so');
  const sealed = ProxyCa.load(dir, 'set later');
  t.equal(sealed.certPem, plain.certPem, 'the same CA');
  t.match(
    readFileSync(keyFile(dir), 'utf8'),
    /^-----BEGIN ENCRYPTED PRIVATE KEY-----\n/,
    'written back encrypted',
  );
  t.equal(statSync(keyFile(dir)).mode & 0o777, 0o600);
  await handshake(t, ProxyCa.load(dir, 'set later'), 'api.anthropic.com', plain.certPem);
  t.pass('and it still signs for the agents that trust it');
});

t.test('the sidecar encrypts its proxy CA key with SERVICE_AUDIT_KEY_PASSWORD', async (t) => {
  // No control plane: the sidecar starts without a snapshot, its keys made all the same.
  const sc = await startTestSidecar({
    controlUrl: `http://127.0.0.1:${await freePort()}`,
    token: `gk_sc_${'P'.repeat(40)}`,
    env: { SERVICE_AUDIT_KEY_PASSWORD: 'pod secret' },
  });
  t.teardown(() => sc.close());
  const keysDir = join(sc.dir, 'keys');
  t.match(readFileSync(keyFile(keysDir), 'utf8'), /^-----BEGIN ENCRYPTED PRIVATE KEY-----\n/);

  // `govgate keys proxy-ca` prints the certificate, which is public: no password needed for it.
  let out = '';
  const code = runKeys(['proxy-ca'], {
    stdout: { write: (s: string) => (out += s) },
    stderr: { write: () => true },
    env: { SERVICE_KEYS_DIR: keysDir, SERVICE_LOG_LEVEL: 'error' },
  });
  t.equal(code, 0);
  t.equal(out, sc.sidecar.proxyCaPem);
});

t.test(
  'an expired proxy CA is renewed at start with its key; agents that trusted it must restart',
  async (t) => {
    const dir = tempKeysDir(t);
    const expired = seedProxyCa(dir, 731);
    t.ok(notAfterOf(expired) < Date.now(), 'the seeded CA has expired');
    const ca = ProxyCa.load(dir);
    t.not(ca.certPem, expired, 'not used as it is');
    t.ok(notAfterOf(ca.certPem) > Date.now() + 729 * DAY, 'valid two years from now');
    t.equal(publicKeyOf(ca.certPem), publicKeyOf(expired), 'the same key');
    t.equal(readFileSync(ProxyCa.certPath(dir), 'utf8'), ca.certPem, 'written where the agents read it');
    await handshake(t, ca, 'api.openai.com', ca.certPem);
    t.pass('an agent that reads the renewed certificate is served');
    await t.rejects(
      handshake(t, ca, 'api.openai.com', expired),
      { code: 'CERT_HAS_EXPIRED' },
      'one still holding the expired certificate is not, until it restarts',
    );
    t.equal(ProxyCa.load(dir).certPem, ca.certPem, 'renewed once, then kept');
  },
);

t.test(
  'a proxy CA near its end is renewed with its key: agents holding the old one keep working',
  async (t) => {
    const dir = tempKeysDir(t);
    const old = seedProxyCa(dir, 729); // a day left
    const ca = ProxyCa.load(dir);
    t.not(ca.certPem, old, 'renewed');
    t.ok(notAfterOf(ca.certPem) > Date.now() + 729 * DAY);
    await handshake(t, ca, 'api.anthropic.com', old);
    t.pass('an agent started before the renewal still accepts the host certificates until its copy expires');
    await handshake(t, ca, 'api.anthropic.com', ca.certPem);
    t.pass('and one started after it reads the renewed one');

    const dir2 = tempKeysDir(t);
    const fresh = seedProxyCa(dir2, 730 - 45); // 45 days left: not yet
    t.equal(ProxyCa.load(dir2).certPem, fresh, 'a CA with more than 30 days left is kept as it is');
  },
);

t.test('a host certificate never outlives the CA that signs it', async (t) => {
  const dir = tempKeysDir(t);
  const ca = ProxyCa.load(dir);
  const caEnd = notAfterOf(ca.certPem);
  const early = await leafAt(t, ca, 'api.openai.com', Date.now());
  t.ok(Date.parse(early.valid_to) <= Date.now() + 7 * DAY + 1_000, 'seven days, far from the end');
  // A day before the CA's end (a sidecar that ran on without renewing it): clamped to the CA's.
  const late = await leafAt(t, ca, 'api.anthropic.com', caEnd - DAY);
  t.equal(Date.parse(late.valid_to), caEnd, "the CA's notAfter, not a week past it");
  t.equal(late.issuerCertificate.fingerprint256, new X509Certificate(ca.certPem).fingerprint256);
});

t.test('a running sidecar renews its CA once within 30 days of its end (renewIfDue)', async (t) => {
  const dir = tempKeysDir(t);
  const ca = ProxyCa.load(dir);
  const first = ca.certPem;
  const end = notAfterOf(first);
  t.equal(ca.renewIfDue(Date.now()), undefined, 'not due');
  t.equal(ca.renewIfDue(end - 31 * DAY), undefined, 'nor 31 days before its end');
  const at = end - 29 * DAY;
  const before = await leafAt(t, ca, 'api.openai.com', at - 3_600_000);
  t.equal(before.issuerCertificate.fingerprint256, new X509Certificate(first).fingerprint256);
  t.equal(ca.renewIfDue(at)?.getTime(), end, 'renewed, answering the end of the one it replaced');
  t.not(ca.certPem, first);
  t.equal(ca.notAfter.getTime(), notAfterOf(ca.certPem));
  t.ok(ca.notAfter.getTime() >= at + 729 * DAY, 'two years from then');
  t.equal(publicKeyOf(ca.certPem), publicKeyOf(first), 'the same key');
  t.equal(readFileSync(ProxyCa.certPath(dir), 'utf8'), ca.certPem, 'written back');
  const after = await leafAt(t, ca, 'api.openai.com', at);
  t.equal(
    after.issuerCertificate.fingerprint256,
    new X509Certificate(ca.certPem).fingerprint256,
    'host certificates made before are made again under the renewed certificate',
  );
  t.equal(ca.renewIfDue(at + DAY), undefined, 'once');
});

t.test('a sidecar started on an expired proxy CA renews it, exports it, says so', async (t) => {
  const dir = tempDir('govgate-sidecar-');
  const expired = seedProxyCa(join(dir, 'keys'), 740);
  const exportDir = join(dir, 'export');
  const lines: any[] = [];
  const sc = await startTestSidecar({
    controlUrl: `http://127.0.0.1:${await freePort()}`,
    token: `gk_sc_${'R'.repeat(40)}`,
    dir,
    env: { SERVICE_PROXY_CA_EXPORT_DIR: exportDir },
    logger: createLogger('warn', (line) => lines.push(JSON.parse(line))),
  });
  t.teardown(() => sc.close());
  const renewed = sc.sidecar.proxyCaPem;
  t.not(renewed, expired);
  t.equal(publicKeyOf(renewed), publicKeyOf(expired), 'the same key');
  t.equal(readFileSync(join(exportDir, 'ca.pem'), 'utf8'), renewed, 'the renewed certificate is exported');
  t.match(
    lines.find((l) => /proxy CA/.test(l.msg)),
    {
      level: 'warn',
      msg: /renewed/,
      expired: true,
      previous_not_after: new Date(notAfterOf(expired)).toISOString(),
      not_after: new Date(notAfterOf(renewed)).toISOString(),
    },
    'a warning names both ends: agents that hold the old certificate must restart',
  );
  const metrics = String((await sc.call('/api/metrics')).body);
  t.match(
    metrics,
    new RegExp(
      `\ngovgate_sidecar_proxy_ca_expiry_timestamp_seconds ${Math.floor(notAfterOf(renewed) / 1000)}\n`,
    ),
  );
  const ready = await sc.call('/api/health/ready');
  t.equal(ready.body.checks.proxy_ca, true, 'a CA within its validity');
});
