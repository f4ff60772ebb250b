import { rmSync } from 'node:fs';
import { request } from 'node:https';
import t from 'tap';
import { loadConfig } from '../../src/config/index.js';
import { SETTINGS } from '../../src/config/schema.js';
import { startService } from '../helpers/service.js';
import { testCa } from '../helpers/tls.js';
import { tempDir } from '../helpers/tmp.js';

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
  const dir = tempDir('govgate-injector-');
  const ca = testCa(dir);
  const tls = ca.issue('govgate-injector');
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
          ca: ca.caPem,
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
    // A native sidecar (an init container that keeps running): the kubelet starts the app's
    // containers only once its startup probe passes, so the API, the proxy and the CA file the
    // app reads at its start are there before it.
    t.equal(pod.spec.containers.length, 1, 'the app containers are the pod own');
    const [app] = pod.spec.containers;
    const [sidecar] = pod.spec.initContainers;
    t.equal(sidecar.restartPolicy, 'Always');
    t.same(sidecar.startupProbe.httpGet, { path: '/api/health/live', port: 15020 });
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
    // The kubelet probes the pod's IP: the probes go to the health listener, not the loopback API.
    t.equal(env.SERVICE_HEALTH_PORT, '15020');
    t.equal(env.SERVICE_HEALTH_HOST, '0.0.0.0');
    t.same(sidecar.readinessProbe.httpGet, { path: '/api/health/ready', port: 15020 });
    t.same(sidecar.livenessProbe.httpGet, { path: '/api/health/live', port: 15020 });
    // runAsNonRoot needs a numeric user to check.
    t.match(sidecar.securityContext, { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000 });
    t.equal(pod.metadata.annotations['govgate.io/injected'], 'true');
    t.equal(await patched(pod), undefined, 'a pod injected already is left as it is');
    const own = { name: 'migrate', image: 'agent:1' };
    const withInit = await patched({
      ...agentPod({ 'govgate.io/inject': 'true' }),
      spec: { ...agentPod({}).spec, initContainers: [own] },
    });
    t.same(
      withInit.spec.initContainers.map((c: any) => c.name),
      ['govgate-sidecar', 'migrate'],
      "first, before the pod's own init containers",
    );
    const { annotations: _, ...bare } = pod.metadata;
    t.equal(
      await patched({ metadata: { ...bare, annotations: { 'govgate.io/inject': 'true' } }, spec: pod.spec }),
      undefined,
      'a pod that has the sidecar among its init containers is left as it is',
    );
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
    const [app] = pod.spec.containers;
    const [sidecar] = pod.spec.initContainers;
    const token = sidecar.env.find((e: any) => e.name === 'SERVICE_SIDECAR_TOKEN');
    t.equal(token.valueFrom.secretKeyRef.name, 'team-a-sidecar');
    const env = Object.fromEntries(app.env.map((e: any) => [e.name, e.value]));
    t.equal(env.OPENAI_BASE_URL, 'http://elsewhere/v1', 'not replaced');
    t.equal(env.HTTPS_PROXY, 'http://agent:$(GOVGATE_AGENT_KEY)@127.0.0.1:15001');
    t.equal(env.NODE_EXTRA_CA_CERTS, '/var/run/govgate-ca/ca.pem');
    t.ok(
      app.env.findIndex((e: any) => e.name === 'GOVGATE_AGENT_KEY') <
        app.env.findIndex((e: any) => e.name === 'HTTPS_PROXY'),
      'the key is listed before the variable that expands it',
    );
    // The app mounts the CA's own volume, never the sidecar's data (its private keys are there).
    t.same(app.volumeMounts, [
      { name: 'govgate-proxy-ca', mountPath: '/var/run/govgate-ca', readOnly: true },
    ]);
    t.same(pod.spec.volumes, [
      { name: 'govgate-data', emptyDir: {} },
      { name: 'govgate-proxy-ca', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } },
    ]);
    const sidecarEnv = Object.fromEntries(sidecar.env.map((e: any) => [e.name, e.value]));
    t.equal(sidecarEnv.SERVICE_PROXY_CA_EXPORT_DIR, '/var/run/govgate-ca');
    t.ok(
      sidecar.volumeMounts.some(
        (m: any) => m.name === 'govgate-proxy-ca' && m.mountPath === '/var/run/govgate-ca',
      ),
    );
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

t.test(
  'an https control plane with a private CA: the sidecar trusts the ConfigMap it is given',
  async (t) => {
    const { injectionPatch } = await import('../../src/control/injector.js');
    const pod = {
      metadata: { annotations: { 'govgate.io/inject': 'true' } },
      spec: { containers: [{ name: 'agent' }], volumes: [{ name: 'own', emptyDir: {} }] },
    };
    const settings = { image: 'govgate:1', controlUrl: 'https://govgate-control.govgate.svc:8620' };
    const plain = applyAdds(pod, injectionPatch(pod, settings) ?? []);
    const plainSidecar = plain.spec.initContainers[0];
    t.notOk(
      plainSidecar.env.some((e: any) => e.name === 'SERVICE_CONTROL_CA'),
      'without one, the image roots',
    );
    const withCa = applyAdds(
      pod,
      injectionPatch(pod, { ...settings, controlCaConfigMap: 'govgate-ca' }) ?? [],
    );
    const sidecar = withCa.spec.initContainers[0];
    const env = Object.fromEntries(sidecar.env.map((e: any) => [e.name, e.value]));
    t.equal(env.SERVICE_CONTROL_CA, '/etc/govgate/control-ca/ca.crt');
    t.same(sidecar.volumeMounts, [
      { name: 'govgate-data', mountPath: '/var/lib/govgate' },
      { name: 'govgate-control-ca', mountPath: '/etc/govgate/control-ca', readOnly: true },
    ]);
    t.same(withCa.spec.volumes, [
      { name: 'own', emptyDir: {} },
      { name: 'govgate-data', emptyDir: {} },
      {
        name: 'govgate-control-ca',
        configMap: { name: 'govgate-ca', items: [{ key: 'ca.crt', path: 'ca.crt' }] },
      },
    ]);
    t.same(withCa.spec.containers[0].volumeMounts, undefined, "the app's containers do not get it");
  },
);

t.test('SERVICE_INJECT_NATIVE_SIDECAR=false: a plain container, for clusters before 1.29', async (t) => {
  const { injectionPatch } = await import('../../src/control/injector.js');
  const pod = {
    metadata: { annotations: { 'govgate.io/inject': 'true' } },
    spec: { containers: [{ name: 'agent' }] },
  };
  const settings = { image: 'govgate:1', controlUrl: 'http://c:8620', nativeSidecar: false };
  const out = applyAdds(pod, injectionPatch(pod, settings) ?? []);
  t.same(
    out.spec.containers.map((c: any) => c.name),
    ['agent', 'govgate-sidecar'],
  );
  t.equal(out.spec.initContainers, undefined);
  t.equal(out.spec.containers[1].restartPolicy, undefined, 'a container has no restart policy of its own');
  t.equal(injectionPatch(out, settings), undefined, 'injected once');
  t.equal(loadConfig({ SERVICE_INJECT_NATIVE_SIDECAR: 'false' }).injector.nativeSidecar, false);
  t.equal(loadConfig({}).injector.nativeSidecar, true, 'native by default');
});
