import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream, startService, type TestService } from '../helpers/service.js';
import {
  controlWithSidecar,
  createSidecarToken,
  freePort,
  startTestSidecar,
  type TestSidecar,
} from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/** A chat call through the sidecar with the mock provider; returns its pipeline id. */
async function chat(sc: TestSidecar, agentKey: string, text: string): Promise<string> {
  const client = new OpenAI({ apiKey: agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
  const res = await client.chat.completions.create({
    model: 'mock-echo',
    messages: [{ role: 'user', content: text }],
  });
  if (res.choices[0]?.message.content !== text) throw new Error(`unexpected answer ${JSON.stringify(res)}`);
  const service = (res as unknown as { service: { audit_url: string } }).service;
  return service.audit_url.split('/').at(-1) as string;
}

t.test('the control plane goes away and comes back: the sidecar decides on, and loses nothing', async (t) => {
  const port = await freePort();
  let control: TestService = await startService({ env: { SERVICE_PORT: String(port) } });
  const pat = control.pat;
  const agentKey = control.agentKey;
  const { token } = await createSidecarToken(control, pat);
  let sc = await startTestSidecar({ controlUrl: control.url, token });
  t.teardown(async () => {
    await sc.close();
    await control.close();
  });
  const pipelines: string[] = [];
  pipelines.push(await chat(sc, agentKey, 'before'));
  await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'the first call shipped');

  await control.close(true);
  for (let i = 0; i < 5; i++) pipelines.push(await chat(sc, agentKey, `during ${i}`));
  t.ok(sc.sidecar.shipper.unshipped >= 5, 'the calls made meanwhile wait in the sidecar log');
  const forwarded = await sc.call('/api/me', { token: pat });
  t.equal(forwarded.status, 503, 'what only the control plane answers is 503 meanwhile');
  t.equal(forwarded.body.error.code, 'unavailable');
  const metrics = await sc.call('/api/metrics');
  t.match(String(metrics.body), /govgate_sidecar_unshipped_events [1-9]/);

  // The sidecar restarts too, while the control plane is still away: it decides from the snapshot
  // it kept, and its log still holds what it has not shipped.
  await sc.close(true);
  sc = await startTestSidecar({ controlUrl: control.url, token, dir: sc.dir });
  t.ok(sc.sidecar.snapshot.loaded, 'the kept snapshot is in force');
  // The control plane has its mandate keys from before (kept with them): it is ready, as it was.
  const ready = await sc.call('/api/health/ready');
  t.equal(ready.status, 200, `the registration of its keys is remembered: ${JSON.stringify(ready.body)}`);
  // Remembered for that sidecar token only: with another token (the same data dir), the control
  // plane has not taken its keys for it, and the sidecar is not ready until it does.
  await sc.close(true);
  sc = await startTestSidecar({ controlUrl: control.url, token: `gk_sc_${'R'.repeat(40)}`, dir: sc.dir });
  const other = await sc.call('/api/health/ready');
  t.equal(other.status, 503, 'another token: not taken for granted');
  t.equal(other.body.checks.mandate_keys, false);
  await sc.close(true);
  sc = await startTestSidecar({ controlUrl: control.url, token, dir: sc.dir });
  pipelines.push(await chat(sc, agentKey, 'after a restart'));

  control = await startService({
    dataDir: control.dataDir,
    env: { SERVICE_PORT: String(port), SERVICE_BOOTSTRAP_TOKEN: pat },
  });
  await waitFor(
    () => sc.sidecar.shipper.unshipped === 0 && sc.sidecar.shipper.acked >= 7,
    'the backlog shipped',
    40_000,
  );
  for (const p of pipelines) {
    const res = await control.call(`/api/audit/pipeline/${p}`, { token: pat });
    t.equal(res.body.data?.length, 1, `${p} recorded once at the control plane`);
  }
  const integrity = await control.call('/api/audit/integrity?refresh=true', { token: pat });
  t.equal(integrity.body.status, 'intact');
});

t.test('a sidecar without a snapshot decides nothing', async (t) => {
  const port = await freePort();
  const sc = await startTestSidecar({
    controlUrl: `http://127.0.0.1:${port}`,
    token: `gk_sc_${'B'.repeat(40)}`,
  });
  t.teardown(() => sc.close());
  const res = await sc.call('/v1/chat/completions', {
    token: `gk_agent_${'C'.repeat(40)}`,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'x' }] },
  });
  t.equal(res.status, 503);
  t.equal(res.body.error.code, 'unavailable');
  const ready = await sc.call('/api/health/ready');
  t.equal(ready.status, 503);
  t.equal(ready.body.checks.snapshot, false);
  t.equal((await sc.call('/api/health/live')).status, 200);
});

t.test('a sidecar whose token is revoked stops deciding', async (t) => {
  const { control, sc, sidecarId } = await controlWithSidecar(t);
  await chat(sc, control.agentKey, 'fine');
  await control.call(`/api/sidecars/${sidecarId}`, { method: 'DELETE', token: control.pat });
  await waitFor(() => !sc.sidecar.snapshot.loaded, 'the snapshot dropped', 5_000);
  const res = await sc.call('/v1/chat/completions', {
    token: control.agentKey,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'x' }] },
  });
  t.equal(res.status, 503);
});

t.test('a sidecar whose disk cannot take its log refuses calls before any provider sees them', async (t) => {
  const { svc: control, upstream } = await serviceOnMockUpstream(t);
  const { token } = await createSidecarToken(control, control.pat);
  const first = await startTestSidecar({
    controlUrl: control.url,
    token,
    env: { SERVICE_EGRESS_ALLOW: upstream.hostPort },
  });
  await first.close(true);
  // Started again asking more free space than any disk has: the store refuses every write.
  const sc = await startTestSidecar({
    controlUrl: control.url,
    token,
    dir: first.dir,
    env: { SERVICE_STORE_MIN_FREE_MB: '100000000', SERVICE_EGRESS_ALLOW: upstream.hostPort },
  });
  t.teardown(() => sc.close());
  await waitFor(() => sc.sidecar.snapshot.loaded, 'a snapshot');
  upstream.requests.length = 0;
  const res = await sc.call('/v1/chat/completions', {
    token: control.agentKey,
    body: { model: 'gpt-test', messages: [{ role: 'user', content: 'x' }] },
  });
  t.equal(res.status, 503);
  t.equal(upstream.requests.length, 0, 'the provider was not called');
  const forwarded = await sc.call('/v1/tokens/verify', { body: { token: 'x' } });
  t.equal(forwarded.status, 200, 'what is forwarded writes nothing here, and goes on');
});
