import { createPrivateKey } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, createServer } from 'node:tls';
import type { Test } from 'tap';
import t from 'tap';
import { runKeys } from '../../src/cli-keys.js';
import { ProxyCa } from '../../src/sidecar/proxy-ca.js';
import { freePort, startTestSidecar } from '../helpers/sidecar.js';

function tempKeysDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-proxy-ca-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const keyFile = (keysDir: string): string => join(keysDir, 'proxy', 'ca-key.pem');

/**
 * A TLS handshake with a server presenting `ca`'s certificate for `host`, by a client that trusts
 * only `trusted` (the agent's NODE_EXTRA_CA_CERTS): resolves once the client accepted it.
 */
async function handshake(t: Test, ca: ProxyCa, host: string, trusted: string): Promise<void> {
  const server = createServer({ SNICallback: (_name, cb) => cb(null, ca.contextFor(host)) }, (s) => s.end());
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
