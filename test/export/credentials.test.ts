import { createHmac } from 'node:crypto';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { openStore } from '../../src/store/db.js';
import { startReceiver } from '../helpers/receiver.js';
import { startService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

// How exports authenticate (spec 5.8, DESIGN C "Delivery credentials") and what their settings
// refuse: a destination without a token is never sent to (nothing is lost: it goes once a token
// is given); a webhook batch carries an HMAC of its body under the token; a cloud_siem batch the
// Log Analytics shared-key signature; a token short enough that its mask would show it whole, a
// null where a value is needed, are refused; a secret_header can be set back to the default.

t.test('delivery credentials, tokenless destinations, and what the settings refuse', async (t) => {
  const hook = await startReceiver();
  t.teardown(() => hook.close());
  const svc = await startService({ env: { SERVICE_EGRESS_ALLOW: `127.0.0.1:${hook.port}` } });
  t.teardown(() => svc.close());
  const put = (body: unknown) => svc.call('/api/settings/siem', { method: 'PUT', token: svc.pat, body });
  const add = (body: unknown) => svc.call('/api/settings/export-destinations', { token: svc.pat, body });
  const edit = (id: string, body: unknown) =>
    svc.call(`/api/settings/export-destinations/${id}`, { method: 'PUT', token: svc.pat, body });
  const chat = (content: string) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content }] },
    });
  const at = (path: string) => hook.posts.filter((p) => p.path === path);

  // Before any PUT, every field of the export is there, unset.
  const unset = await svc.call('/api/settings/siem', { token: svc.pat });
  t.match(unset.body, { enabled: false, destination: null, url: null, auth_token: null, buffer_size: null });
  t.equal(Object.keys(unset.body).length, 15, 'every field');

  // A null where the setting needs a value is refused; the service still answers.
  for (const field of ['buffer_size', 'enabled', 'severity_filter', 'destination', 'source_name']) {
    const r = await put({ destination: 'webhook', url: `http://127.0.0.1:${hook.port}/w`, [field]: null });
    t.equal(r.status, 400, `${field}: null`);
    t.equal(r.body.error.param, field);
  }
  t.equal((await svc.call('/health')).status, 200);
  const nullUrl = await svc.call('/api/settings/alert-destinations', {
    token: svc.pat,
    body: { webhook_type: 'generic', webhook_url: null },
  });
  t.equal(nullUrl.status, 400, 'an alert destination with a null URL');
  for (const body of [{ secret_header: null, kind: null }, { event_filter: null }]) {
    const r = await add({ endpoint: `http://127.0.0.1:${hook.port}/x`, ...body });
    t.equal(r.status, 400, JSON.stringify(body));
  }

  // A token whose mask would show it whole is refused.
  const short = await put({
    destination: 'webhook',
    url: `http://127.0.0.1:${hook.port}/w`,
    auth_token: 'ab',
  });
  t.equal(short.status, 400);
  t.equal(short.body.error.param, 'auth_token');
  t.equal(
    (await add({ kind: 'webhook', endpoint: `http://127.0.0.1:${hook.port}/x`, token: '' })).status,
    400,
  );
  // A token a header cannot carry (CR, LF, NUL) is refused, not stored to fail every delivery.
  for (const bad of ['token-0001\r\nX-Injected: 1', 'token-0001\n', 'token-0001\u0000']) {
    const r = await put({ destination: 'webhook', url: `http://127.0.0.1:${hook.port}/w`, auth_token: bad });
    t.equal(r.status, 400, JSON.stringify(bad));
    t.equal(r.body.error.param, 'auth_token');
    const d = await add({ kind: 'webhook', endpoint: `http://127.0.0.1:${hook.port}/x`, token: bad });
    t.equal(d.status, 400, `destination ${JSON.stringify(bad)}`);
  }
  // A mask that is not the stored token's (another one's, or made up) would replace the token
  // with a string that still reads as a mask: refused, as for provider keys and tool headers.
  const masked = await add({
    kind: 'webhook',
    endpoint: `http://127.0.0.1:${hook.port}/m`,
    token: 'token-masked-78Ab',
  });
  t.equal(masked.status, 201, JSON.stringify(masked.body));
  const foreign = await edit(masked.body.id, { token: '****zzzz' });
  t.equal(foreign.status, 400, 'a foreign mask');
  t.equal(foreign.body.error.param, 'token');
  t.equal((await edit(masked.body.id, { token: '****78Ab' })).status, 200, 'its own mask keeps it');
  const provider = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token: svc.pat,
    body: { providers: [{ name: 'openai', api_key: 'sk-test-key-0123456789\n' }] },
  });
  t.equal(provider.status, 400, 'a provider key with a line break');

  // Webhook: Bearer token and the body's HMAC under it.
  const webhookToken = 'webhook-secret-0001';
  const set = await put({
    destination: 'webhook',
    url: `http://127.0.0.1:${hook.port}/w`,
    auth_token: webhookToken,
    buffer_size: 1,
    event_types: ['llm_call'],
  });
  t.equal(set.status, 200);
  await chat('hello');
  await waitFor(() => at('/w').length >= 1, 'the webhook batch');
  const w = at('/w')[0];
  t.equal(w?.headers.authorization, `Bearer ${webhookToken}`);
  t.equal(
    w?.headers['x-service-signature'],
    `sha256=${createHmac('sha256', webhookToken)
      .update(w?.raw ?? '')
      .digest('hex')}`,
    'the signature is the HMAC of the body as received',
  );
  t.equal((await put({ enabled: false })).status, 200);

  // cloud_siem: the Log Analytics shared-key signature, computed here from the documented recipe.
  const key = Buffer.from('a shared key of the workspace, 32+').toString('base64');
  const notBase64 = await add({
    kind: 'cloud_siem',
    endpoint: `http://127.0.0.1:${hook.port}/api/logs`,
    token: 'not base64 at all!',
  });
  t.equal(notBase64.status, 400);
  t.equal(notBase64.body.error.param, 'token');
  const cloud = await add({
    kind: 'cloud_siem',
    endpoint: `http://127.0.0.1:${hook.port}/api/logs`,
    token: key,
    event_filter: { event_types: ['llm_call'] },
  });
  t.equal(cloud.status, 201);
  await chat('to the workspace');
  await waitFor(() => at('/api/logs').length >= 1, 'the cloud_siem batch');
  const c = at('/api/logs')[0];
  const date = c?.headers['x-ms-date'] as string;
  t.ok(Math.abs(Date.parse(date) - Date.now()) < 60_000, 'x-ms-date is now');
  const signed = `POST\n${Buffer.byteLength(c?.raw ?? '')}\napplication/json\nx-ms-date:${date}\n/api/logs`;
  const expected = createHmac('sha256', Buffer.from(key, 'base64')).update(signed).digest('base64');
  // The workspace id is the URL's first host label: 127 here.
  t.equal(c?.headers.authorization, `SharedKey 127:${expected}`);
  t.equal(c?.headers['log-type'], 'govgate');
  t.equal(
    (
      await svc.call(`/api/settings/export-destinations/${cloud.body.id}`, {
        method: 'DELETE',
        token: svc.pat,
      })
    ).status,
    200,
  );

  // A destination without a token: nothing is sent; once it has one, what waited goes.
  const bare = await add({
    kind: 'otlp',
    endpoint: `http://127.0.0.1:${hook.port}/v1/logs`,
    event_filter: { event_types: ['llm_call'] },
  });
  t.equal(bare.status, 201);
  await chat('held back');
  await sleep(1_500);
  t.equal(at('/v1/logs').length, 0, 'never sent unauthenticated');
  const tested = await svc.call(`/api/settings/export-destinations/${bare.body.id}/test`, {
    method: 'POST',
    token: svc.pat,
  });
  t.match(tested.body, { status: 'failed', attempts: 0, error: /no token/ });
  // An org_admin manages its org's destinations; testing one takes an admin (spec 5.5).
  const orgAdmin = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'oa@example.com', role: 'org_admin' },
  });
  const oaPat = (await svc.call('/api/tokens', { token: svc.pat, body: { user_id: orgAdmin.body.user_id } }))
    .body.token;
  t.equal((await svc.call('/api/settings/export-destinations', { token: oaPat })).status, 200);
  for (const path of [`/api/settings/export-destinations/${bare.body.id}/test`])
    t.equal((await svc.call(path, { method: 'POST', token: oaPat })).status, 403, `${path}: org_admin`);
  const alertDest = await svc.call('/api/settings/alert-destinations', {
    token: oaPat,
    body: { webhook_type: 'generic', webhook_url: `http://127.0.0.1:${hook.port}/alert` },
  });
  t.equal(alertDest.status, 201);
  t.equal(
    (
      await svc.call(`/api/settings/alert-destinations/${alertDest.body.id}/test`, {
        method: 'POST',
        token: oaPat,
      })
    ).status,
    403,
  );
  t.equal(at('/v1/logs').length, 0, 'not even the test');
  t.equal((await edit(bare.body.id, { token: 'otlp-token-77', secret_header: 'x-otlp-key' })).status, 200);
  await waitFor(() => at('/v1/logs').length >= 1, 'the batch that waited', 70_000);
  const logs = at('/v1/logs').flatMap((p) => p.body.resourceLogs[0].scopeLogs[0].logRecords);
  t.ok(logs.length >= 1, 'the held event went');
  t.equal(at('/v1/logs')[0]?.headers['x-otlp-key'], 'otlp-token-77', 'in the named header');

  // secret_header null: back to Authorization with the kind's scheme.
  const reset = await edit(bare.body.id, { secret_header: null });
  t.equal(reset.status, 200);
  t.equal(reset.body.secret_header, null);
  const before = at('/v1/logs').length;
  await chat('after the reset');
  await waitFor(() => at('/v1/logs').length > before, 'a batch after the reset');
  t.equal(at('/v1/logs').at(-1)?.headers.authorization, 'Bearer otlp-token-77');
});

t.test(
  'a target stored with a null batch size (an earlier build let a PUT store one) runs on defaults',
  async (t) => {
    const hook = await startReceiver();
    t.teardown(() => hook.close());
    const env = { SERVICE_EGRESS_ALLOW: `127.0.0.1:${hook.port}` };
    let svc = await startService({ env });
    const { pat, agentKey, dataDir } = svc;
    const set = await svc.call('/api/settings/siem', {
      method: 'PUT',
      token: pat,
      body: {
        destination: 'webhook',
        url: `http://127.0.0.1:${hook.port}/w`,
        auth_token: 'webhook-secret-0002',
      },
    });
    t.equal(set.status, 200);
    await svc.close(true);
    const store = openStore(join(dataDir, 'data'));
    let edited = 0;
    for (const { key, value } of store.settings.getRange()) {
      const v = value as { record?: string } | null;
      if (v?.record !== 'export_target') continue;
      await store.settings.put(key, { ...v, buffer_size: null, max_retries: null });
      edited++;
    }
    await store.close();
    t.equal(edited, 1);
    svc = await startService({ env, dataDir });
    t.teardown(() => svc.close());
    t.equal((await svc.call('/health')).status, 200, 'it starts and answers');
    t.match((await svc.call('/api/settings/siem', { token: pat })).body, {
      buffer_size: 100,
      max_retries: 3,
    });
    const chat = await svc.call('/v1/chat/completions', {
      token: agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hi' }] },
    });
    t.equal(chat.status, 200);
    await waitFor(() => hook.posts.some((p) => p.path === '/w'), 'a batch (flushed by its interval)');
  },
);
