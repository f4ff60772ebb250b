import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { ENGINES, startService, useMockUpstream } from '../helpers/service.js';

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => join(d.parentPath, d.name));
}

t.test('a restart keeps orgs, agents, keys, providers and the audit trail', async (t) => {
  const first = await startService();
  const agent = await first.call('/api/agents/onboard', {
    token: first.pat,
    body: { agent_id: 'persistent' },
  });
  const key = agent.body.api_key.api_key as string;
  const chat = await first.call('/v1/chat/completions', {
    token: key,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'remember me' }] },
  });
  const auditPath = new URL(chat.body.service.audit_url).pathname;
  await first.close(true);

  const second = await startService({ dataDir: first.dataDir, env: { SERVICE_BOOTSTRAP_TOKEN: first.pat } });
  t.teardown(() => second.close());
  t.equal(second.service.bootstrap.created, undefined, 'no second bootstrap');
  const me = await second.call('/api/me', { token: key });
  t.equal(me.status, 200);
  t.equal(me.body.kind, 'agent');
  const again = await second.call('/v1/chat/completions', {
    token: key,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'still here' }] },
  });
  t.equal(again.status, 200);
  const audit = await second.call(auditPath, { token: first.pat });
  t.equal(audit.status, 200);
  t.equal(audit.body.data[0].details.endpoint, '/v1/chat/completions');
});

t.test('provider keys are encrypted at rest and only shown masked', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const secret = 'sk-live-VERYSECRET-abcdef-9z9z';
  const put = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token: svc.pat,
    body: { providers: [{ name: 'openai', api_key: secret }, { name: 'mock' }] },
  });
  t.equal(put.status, 200);
  t.equal(put.body.providers[0].api_key, '****9z9z');
  const get = await svc.call('/api/settings/providers', { token: svc.pat });
  t.notMatch(JSON.stringify(get.body), /VERYSECRET/);
  // Echoing the masked key keeps the stored one.
  const echo = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token: svc.pat,
    body: { providers: [{ name: 'openai', api_key: '****9z9z' }] },
  });
  t.equal(echo.body.providers[0].api_key, '****9z9z');
  await svc.service.close();
  for (const f of filesUnder(svc.dataDir)) {
    if (statSync(f).size > 64 * 1024 * 1024) continue;
    t.notOk(readFileSync(f).includes(Buffer.from('VERYSECRET')), `plaintext key absent from ${f}`);
  }
});

for (const engine of ENGINES) {
  t.test(`graceful shutdown lets in-flight requests finish (${engine})`, async (t) => {
    const upstream = await startMockUpstream();
    const svc = await startService({ engine, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
    t.teardown(() => upstream.close());
    await useMockUpstream(svc, svc.pat, upstream.url);
    upstream.behaviour = { kind: 'delay', ms: 300 };
    const inflight = svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'gpt-test', messages: [{ role: 'user', content: 'finish me' }] },
    });
    for (let i = 0; i < 100 && upstream.requests.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    const closing = svc.close(true);
    const res = await inflight;
    t.equal(res.status, 200, 'the in-flight call completed');
    await closing;
    const refused = await fetch(`${svc.url}/health`).then(
      () => 'served',
      () => 'refused',
    );
    t.equal(refused, 'refused', 'no new connections after close');
    // The store closed cleanly: it reopens with the call's event in it.
    const again = await startService({ dataDir: svc.dataDir });
    t.teardown(() => again.close());
    const audit = await again.call(new URL(res.body.service.audit_url).pathname, { token: svc.pat });
    t.equal(audit.status, 200);
  });
}
