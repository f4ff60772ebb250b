import { readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startService } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar } from '../helpers/sidecar.js';
import { tempDir } from '../helpers/tmp.js';

// What Kubernetes needs of an injected sidecar beside its loopback API: a probe listener that
// serves the health routes and nothing else (SERVICE_HEALTH_PORT), and the forward proxy's CA
// certificate written to a directory of its own (SERVICE_PROXY_CA_EXPORT_DIR) for the agents'
// containers, which then mount nothing of the sidecar's keys.

for (const engine of ['uws', 'node'] as const) {
  t.test(`the probe listener and the exported proxy CA (${engine})`, async (t) => {
    const control = await startService();
    const exportDir = tempDir('govgate-ca-export-');
    const { token } = await createSidecarToken(control, control.pat);
    const sc = await startTestSidecar({
      controlUrl: control.url,
      token,
      engine,
      env: {
        SERVICE_HEALTH_PORT: '0',
        SERVICE_HEALTH_HOST: '127.0.0.1',
        SERVICE_PROXY_CA_EXPORT_DIR: join(exportDir, 'ca'),
      },
    });
    t.teardown(async () => {
      await sc.close();
      await control.close();
      rmSync(exportDir, { recursive: true, force: true });
    });
    const port = sc.sidecar.healthPort as number;
    t.ok(port > 0, 'listening');
    const get = async (path: string, init: RequestInit = {}) => {
      const res = await fetch(`http://127.0.0.1:${port}${path}`, init);
      return { status: res.status, body: await res.text() };
    };
    const until = Date.now() + 10_000;
    while ((await get('/api/health/ready')).status !== 200 && Date.now() < until) await sleep(50);
    t.equal((await get('/api/health/ready')).status, 200, 'ready on the probe port once it has a snapshot');
    t.equal((await get('/api/health/live')).status, 200);
    t.equal((await get('/health')).status, 200);
    // Nothing else: no gateway, no API, whatever the credential.
    const models = await get('/v1/models', { headers: { authorization: `Bearer ${control.agentKey}` } });
    t.equal(models.status, 404);
    t.equal((await get('/api/metrics')).status, 404);
    const chat = await get('/v1/chat/completions', {
      method: 'POST',
      headers: { authorization: `Bearer ${control.agentKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-echo', messages: [{ role: 'user', content: 'x' }] }),
    });
    t.equal(chat.status, 404, 'a model call is not served there');
    // The CA certificate, public, readable by anyone; its key stays in the keys dir.
    const ca = join(exportDir, 'ca', 'ca.pem');
    t.equal(readFileSync(ca, 'utf8'), sc.sidecar.proxyCaPem);
    t.equal(statSync(ca).mode & 0o777, 0o644);
    t.same(readFileSync(ca, 'utf8').includes('PRIVATE KEY'), false, 'no private key in the exported file');
  });
}
