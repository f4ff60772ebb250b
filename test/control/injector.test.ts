import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as Forge from 'node-forge';
import t from 'tap';
import { loadConfig } from '../../src/config/index.js';
import { SETTINGS } from '../../src/config/schema.js';
import { startService } from '../helpers/service.js';

const forge = createRequire(import.meta.url)('node-forge') as typeof Forge;

/** A self-signed certificate for 127.0.0.1, as a webhook configuration's caBundle would trust. */
function selfSigned(dir: string): { cert: string; certFile: string; keyFile: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const c = forge.pki.createCertificate();
  c.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }) as string);
  c.serialNumber = '01';
  c.validity.notBefore = new Date(Date.now() - 60_000);
  c.validity.notAfter = new Date(Date.now() + 86_400_000);
  c.setSubject([{ name: 'commonName', value: 'govgate-injector' }]);
  c.setIssuer([{ name: 'commonName', value: 'govgate-injector' }]);
  c.setExtensions([{ name: 'subjectAltName', altNames: [{ type: 7, ip: '127.0.0.1' }] }]);
  const keyPem = privateKey.export({ type: 'pkcs1', format: 'pem' }) as string;
  c.sign(forge.pki.privateKeyFromPem(keyPem), forge.md.sha256.create());
  const cert = forge.pki.certificateToPem(c);
  const certFile = join(dir, 'tls.crt');
  const keyFile = join(dir, 'tls.key');
  writeFileSync(certFile, cert);
  writeFileSync(keyFile, keyPem, { mode: 0o600 });
  return { cert, certFile, keyFile };
}

/** Applies a JSON Patch of `add` operations (what the injector answers) to `doc`. */
function applyAdds(doc: any, ops: Array<{ op: string; path: string; value: unknown }>): any {
  const out = structuredClone(doc);
  for (const o of ops) {
    if (o.op !== 'add') throw new Error(`unexpected op ${o.op}`);
    const parts = o.path
      .split('/')
      .slice(1)
      .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    const last = parts.pop() as string;
    let at = out;
    for (const p of parts) at = at[p];
    if (Array.isArray(at)) at.splice(last === '-' ? at.length : Number(last), 0, structuredClone(o.value));
    else at[last] = structuredClone(o.value);
  }
  return out;
}

t.test('the sidecar injector: a mutating webhook over TLS', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-injector-'));
  const tls = selfSigned(dir);
  const svc = await startService({
    env: {
      SERVICE_INJECTOR_PORT: '0',
      SERVICE_INJECTOR_TLS_CERT: tls.certFile,
      SERVICE_INJECTOR_TLS_KEY: tls.keyFile,
      SERVICE_SIDECAR_IMAGE: 'registry.example/govgate:1.2.3',
      SERVICE_INJECT_CONTROL_URL: 'http://govgate-control.govgate.svc:8620',
    },
  });
  t.teardown(async () => {
    await svc.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const port = svc.service.injectorPort as number;
  const post = (body: unknown, opts: { method?: string; path?: string } = {}) =>
    new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          method: opts.method ?? 'POST',
          path: opts.path ?? '/mutate',
          ca: tls.cert,
        },
        (res) => {
          let text = '';
          res.on('data', (c) => {
            text += c;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      // (a GET carries no body: node frames none for it)
      req.end(opts.method === 'GET' ? undefined : typeof body === 'string' ? body : JSON.stringify(body));
    });
  const review = (pod: unknown) => ({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'uid-1', kind: { group: '', version: 'v1', kind: 'Pod' }, object: pod },
  });
  const agentPod = (annotations: Record<string, string>, env?: unknown[]) => ({
    metadata: { name: 'agent-7', annotations },
    spec: { containers: [{ name: 'agent', image: 'agent:1', ...(env === undefined ? {} : { env }) }] },
  });
  const patched = async (pod: any) => {
    const res = await post(review(pod));
    t.equal(res.status, 200);
    t.equal(res.body.response.uid, 'uid-1');
    t.equal(res.body.response.allowed, true);
    if (res.body.response.patch === undefined) return undefined;
    t.equal(res.body.response.patchType, 'JSONPatch');
    return applyAdds(pod, JSON.parse(Buffer.from(res.body.response.patch, 'base64').toString('utf8')));
  };

  t.test('a pod that asks gets the sidecar, and its containers point at it', async (t) => {
    const pod = await patched(agentPod({ 'govgate.io/inject': 'true' }));
    const [app, sidecar] = pod.spec.containers;
    t.equal(sidecar.name, 'govgate-sidecar');
    t.equal(sidecar.image, 'registry.example/govgate:1.2.3');
    t.same(sidecar.args, ['sidecar']);
    const env = Object.fromEntries(sidecar.env.map((e: any) => [e.name, e.value ?? e.valueFrom]));
    t.equal(env.SERVICE_CONTROL_URL, 'http://govgate-control.govgate.svc:8620');
    t.same(env.SERVICE_SIDECAR_TOKEN, { secretKeyRef: { name: 'govgate-sidecar', key: 'token' } });
    t.equal(env.SERVICE_HOST, '127.0.0.1');
    const known = new Set<string>(SETTINGS.map((s) => s.env));
    for (const name of Object.keys(env)) t.ok(known.has(name), `${name} is a govgate setting`);
    t.same(app.env, [
      { name: 'OPENAI_BASE_URL', value: 'http://127.0.0.1:8620/v1' },
      { name: 'ANTHROPIC_BASE_URL', value: 'http://127.0.0.1:8620' },
    ]);
    t.same(pod.spec.volumes, [{ name: 'govgate-data', emptyDir: {} }]);
    t.equal(pod.metadata.annotations['govgate.io/injected'], 'true');
    t.equal(await patched(pod), undefined, 'a pod injected already is left as it is');
  });

  t.test('what the pod sets stays; its own secret; the proxy mode', async (t) => {
    const pod = await patched(
      agentPod(
        {
          'govgate.io/inject': 'true',
          'govgate.io/sidecar-token-secret': 'team-a-sidecar',
          'govgate.io/proxy': 'true',
        },
        [
          { name: 'GOVGATE_AGENT_KEY', valueFrom: { secretKeyRef: { name: 'agent-key', key: 'key' } } },
          { name: 'OPENAI_BASE_URL', value: 'http://elsewhere/v1' },
        ],
      ),
    );
    const [app, sidecar] = pod.spec.containers;
    const token = sidecar.env.find((e: any) => e.name === 'SERVICE_SIDECAR_TOKEN');
    t.equal(token.valueFrom.secretKeyRef.name, 'team-a-sidecar');
    const env = Object.fromEntries(app.env.map((e: any) => [e.name, e.value]));
    t.equal(env.OPENAI_BASE_URL, 'http://elsewhere/v1', 'not replaced');
    t.equal(env.HTTPS_PROXY, 'http://agent:$(GOVGATE_AGENT_KEY)@127.0.0.1:15001');
    t.equal(env.NODE_EXTRA_CA_CERTS, '/var/run/govgate/keys/proxy/ca.pem');
    t.ok(
      app.env.findIndex((e: any) => e.name === 'GOVGATE_AGENT_KEY') <
        app.env.findIndex((e: any) => e.name === 'HTTPS_PROXY'),
      'the key is listed before the variable that expands it',
    );
    t.same(app.volumeMounts, [{ name: 'govgate-data', mountPath: '/var/run/govgate', readOnly: true }]);
  });

  t.test('pods that do not ask, and what is not a review', async (t) => {
    t.equal(await patched(agentPod({})), undefined);
    t.equal(await patched({ spec: { containers: [{ name: 'x' }] } }), undefined);
    const bad = await post('{not json');
    t.equal(bad.status, 400);
    t.equal((await post({ kind: 'Pod' })).status, 400);
    t.equal((await post(review({}), { method: 'GET' })).status, 405);
    t.equal((await post(review({}), { path: '/other' })).status, 404);
  });

  t.test(
    'the injector serves TLS only, so a port without a certificate is a configuration error',
    async (t) => {
      t.throws(() => loadConfig({ SERVICE_INJECTOR_PORT: '9443' }), /SERVICE_INJECTOR_TLS_CERT/);
    },
  );
});
