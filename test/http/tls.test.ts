import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { Agent, request, setGlobalDispatcher } from 'undici';
import { ConfigError, loadConfig } from '../../src/config/index.js';
import { loadTlsFiles, TlsConfigError, trustWith } from '../../src/http/tls.js';
import { startAllInOne } from '../../src/server.js';
import { createLogger } from '../../src/util/log.js';
import { testServiceEnv } from '../helpers/env.js';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { ENGINES, startService, useMockUpstream } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar } from '../helpers/sidecar.js';
import { testCa } from '../helpers/tls.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('govgate-tls-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const ca = testCa(dir);
const leaf = ca.issue('govgate-api');
// This process's fetch (the test helpers', the openai client's) trusts the test CA, as an
// operator's agents would trust the cluster's issuer.
const trusting = new Agent({ connect: { ca: trustWith(ca.caFile) } });
setGlobalDispatcher(trusting);
const tlsEnv = { SERVICE_TLS_CERT: leaf.certFile, SERVICE_TLS_KEY: leaf.keyFile };

for (const engine of ENGINES) {
  t.test(`the API over HTTPS (${engine})`, async (t) => {
    const upstream = await startMockUpstream();
    const svc = await startService({
      engine,
      env: { ...tlsEnv, SERVICE_EGRESS_ALLOW: upstream.hostPort },
    });
    t.teardown(async () => {
      await svc.close();
      await upstream.close();
    });
    t.match(svc.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    await useMockUpstream(svc, svc.pat, upstream.url);
    const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });

    t.test('the openai client, a call and a stream; audit URLs name https', async (t) => {
      const res = await openai.chat.completions.create({
        model: 'gpt-test',
        messages: [{ role: 'user', content: 'over tls' }],
      });
      t.equal(res.choices[0]?.message.content, 'upstream-openai: over tls');
      const service = (res as unknown as { service: { audit_url: string } }).service;
      t.match(service.audit_url, new RegExp(`^${svc.url}/api/audit/pipeline/pl_`));
      const event = await svc.call(new URL(service.audit_url).pathname, { token: svc.pat });
      t.equal(event.status, 200);
      t.equal(event.body.data[0].event_type, 'llm_call');
      const stream = await openai.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'streamed over tls' }],
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      t.equal(text, 'upstream-openai: streamed over tls');
    });

    t.test('a client that does not trust the issuer gets no answer', async (t) => {
      const system = new Agent();
      t.teardown(() => system.close());
      await t.rejects(
        request(`${svc.url}/health`, { dispatcher: system }),
        { code: /SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT/ },
        'the certificate is checked against the system roots, and refused',
      );
    });

    t.test('plain HTTP on the HTTPS port is not served', async (t) => {
      const plain = svc.url.replace(/^https:/, 'http:');
      const answered = await request(`${plain}/health`).then(
        (r) => r.statusCode,
        () => 'refused',
      );
      t.not(answered, 200, `plain HTTP got ${answered}`);
    });

    t.test("the certificate's expiry is a metric", async (t) => {
      const metrics = await svc.call('/api/metrics');
      const expected = Math.floor(
        new Date(loadTlsFiles(leaf.certFile, leaf.keyFile).notAfter).getTime() / 1000,
      );
      t.match(
        metrics.body,
        new RegExp(`^govgate_tls_certificate_expiry_timestamp_seconds\\{listener="api"\\} ${expected}$`, 'm'),
      );
    });
  });
}

t.test('a certificate that cannot serve stops the start, with the reason', async (t) => {
  const other = ca.issue('other');
  const expired = ca.issue('expired', {
    notBefore: new Date(Date.now() - 10 * 86_400_000),
    notAfter: new Date(Date.now() - 86_400_000),
  });
  const early = ca.issue('early', { notBefore: new Date(Date.now() + 86_400_000) });
  const notPem = join(dir, 'not.pem');
  writeFileSync(notPem, 'hello');
  const cases: Array<[string, Record<string, string>, RegExp]> = [
    [
      'a key of another certificate',
      { SERVICE_TLS_KEY: other.keyFile },
      /is not the private key of the certificate/,
    ],
    [
      'an expired certificate',
      { SERVICE_TLS_CERT: expired.certFile, SERVICE_TLS_KEY: expired.keyFile },
      /expired on/,
    ],
    [
      'a certificate not valid yet',
      { SERVICE_TLS_CERT: early.certFile, SERVICE_TLS_KEY: early.keyFile },
      /not valid before/,
    ],
    [
      'a missing file',
      { SERVICE_TLS_CERT: join(dir, 'nope.crt') },
      /cannot read the TLS certificate .*ENOENT/,
    ],
    ['a certificate that is not PEM', { SERVICE_TLS_CERT: notPem }, /is not a PEM certificate/],
    ['a key that is not PEM', { SERVICE_TLS_KEY: notPem }, /is not a PEM private key/],
  ];
  for (const [what, env, reason] of cases) {
    const dataDir = mkdtempSync(join(dir, 'data-'));
    const config = loadConfig({ ...testServiceEnv(dataDir, `gk_pat_${'a'.repeat(40)}`), ...tlsEnv, ...env });
    await t.rejects(
      startAllInOne(config, createLogger('silent')),
      { name: 'TlsConfigError', message: reason },
      what,
    );
  }
  // Both or neither.
  const only = (env: Record<string, string>) => {
    try {
      loadConfig({ ...testServiceEnv(mkdtempSync(join(dir, 'data-')), `gk_pat_${'a'.repeat(40)}`), ...env });
      return undefined;
    } catch (err) {
      return err;
    }
  };
  const e1 = only({ SERVICE_TLS_CERT: leaf.certFile }) as ConfigError;
  t.ok(e1 instanceof ConfigError);
  t.same(e1.problems, [
    { path: 'SERVICE_TLS_KEY', message: 'HTTPS needs both SERVICE_TLS_CERT and SERVICE_TLS_KEY' },
  ]);
  const e2 = only({ SERVICE_TLS_KEY: leaf.keyFile }) as ConfigError;
  t.same(
    e2.problems.map((p) => p.path),
    ['SERVICE_TLS_CERT'],
  );
  // An encrypted key is said to be one (govgate takes no passphrase for it).
  const { createPrivateKey } = await import('node:crypto');
  const encrypted = join(dir, 'encrypted.key');
  writeFileSync(
    encrypted,
    createPrivateKey(readFileSync(leaf.keyFile)).export({
      type: 'pkcs8',
      format: 'pem',
      cipher: 'aes-256-cbc',
      passphrase: 'secret',
    }),
  );
  t.throws(
    () => loadTlsFiles(leaf.certFile, encrypted),
    new TlsConfigError(
      `${encrypted} is encrypted: give the key without a passphrase (mount it from a Secret)`,
    ),
  );
  t.throws(() => trustWith(notPem), /holds no PEM certificate/);
});

t.test(
  'a sidecar and an HTTPS control plane: the issuer is trusted through SERVICE_CONTROL_CA',
  async (t) => {
    // The control plane's own process trusts the CA (this test's global dispatcher); the sidecar's
    // pool to it trusts only what SERVICE_CONTROL_CA and the system give it.
    const upstream = await startMockUpstream();
    const svc = await startService({ env: { ...tlsEnv, SERVICE_EGRESS_ALLOW: upstream.hostPort } });
    t.teardown(async () => {
      await svc.close();
      await upstream.close();
    });
    await useMockUpstream(svc, svc.pat, upstream.url);
    const { token } = await createSidecarToken(svc, svc.pat, 'tls-pod');

    t.test('without the issuer, the sidecar is not ready and refuses calls', async (t) => {
      const sc = await startTestSidecar({
        controlUrl: svc.url,
        token,
        env: { SERVICE_EGRESS_ALLOW: upstream.hostPort },
      });
      t.teardown(() => sc.close());
      t.notOk(sc.sidecar.snapshot.loaded, 'no snapshot from a control plane it cannot trust');
      t.equal((await sc.call('/api/health/ready')).status, 503);
      const chat = await sc.call('/v1/chat/completions', {
        token: svc.agentKey,
        body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] },
      });
      t.equal(chat.status, 503);
    });

    t.test('with it, calls are decided at the sidecar and shipped over TLS', async (t) => {
      const sc = await startTestSidecar({
        controlUrl: svc.url,
        token,
        env: { SERVICE_EGRESS_ALLOW: upstream.hostPort, SERVICE_CONTROL_CA: ca.caFile },
      });
      t.teardown(() => sc.close());
      t.ok(sc.sidecar.snapshot.loaded);
      const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
      const res = await openai.chat.completions.create({
        model: 'gpt-test',
        messages: [{ role: 'user', content: 'sidecar over tls' }],
      });
      t.equal(res.choices[0]?.message.content, 'upstream-openai: sidecar over tls');
      const pipeline = (res as unknown as { service: { audit_url: string } }).service.audit_url
        .split('/')
        .at(-1);
      let events: any[] = [];
      for (let i = 0; i < 500 && events.length === 0; i++) {
        const got = await svc.call(`/api/audit/pipeline/${pipeline}`, { token: svc.pat });
        events = got.body.data ?? [];
        if (events.length === 0) await new Promise((r) => setTimeout(r, 20));
      }
      t.equal(events.length, 1, 'the entry reached the control plane');
      t.equal(events[0].origin.epoch, sc.sidecar.epoch);
      // Paths the sidecar forwards go over the same trusted pool.
      const me = await sc.call('/api/me', { token: svc.pat });
      t.equal(me.status, 200);
      t.equal(me.body.role, 'super_admin');
    });
  },
);
