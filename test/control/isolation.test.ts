import type { Test } from 'tap';
import t from 'tap';
import { ERROR_CATALOG, type ErrorCode } from '../../src/core/errors.js';
import { type MockUpstream, startMockUpstream } from '../helpers/mock-upstream.js';
import { createOrg, ENGINES, startService, type TestService } from '../helpers/service.js';

type Res = Awaited<ReturnType<TestService['call']>>;

const ALPHA_KEY = 'sk-alpha-provider-AAAA';
const BETA_KEY = 'sk-beta-provider-BBBB';

function assertError(t: Test, res: Res, code: ErrorCode, param?: string): void {
  const entry = ERROR_CATALOG[code];
  t.equal(res.status, entry.status, `status ${entry.status} (${code})`);
  t.equal(res.body?.type, 'error');
  t.equal(res.body?.error?.code, code);
  t.equal(res.body?.error?.type, entry.type);
  t.equal(res.body?.error?.request_id, res.headers.get('x-request-id'));
  if (param !== undefined) t.equal(res.body?.error?.param, param);
}

function chat(
  svc: TestService,
  token: string,
  model: string,
  headers: Record<string, string> = {},
): Promise<Res> {
  return svc.call('/v1/chat/completions', {
    token,
    headers,
    body: { model, messages: [{ role: 'user', content: `hi ${model}` }] },
  });
}

function pipelineOf(res: Res): string {
  return new URL(res.body.service.audit_url as string).pathname.split('/').pop() as string;
}

for (const engine of ENGINES) {
  t.test(`org isolation (${engine})`, async (t) => {
    const upstream: MockUpstream = await startMockUpstream();
    const svc = await startService({ engine, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
    t.teardown(async () => {
      await svc.close();
      await upstream.close();
    });
    const a = await createOrg(svc, 'alpha');
    const b = await createOrg(svc, 'beta');
    t.not(a.orgId, b.orgId);

    // A: the offline mock plus openai for gpt-alpha-*; B: openai for every gpt-*, with its own key.
    const putA = await svc.call('/api/settings/providers', {
      method: 'PUT',
      token: a.adminPat,
      body: {
        providers: [
          { name: 'mock' },
          { name: 'openai', api_key: ALPHA_KEY, base_url: `${upstream.url}/v1`, models: ['gpt-alpha-*'] },
        ],
      },
    });
    t.equal(putA.status, 200, JSON.stringify(putA.body));
    const putB = await svc.call('/api/settings/providers', {
      method: 'PUT',
      token: b.adminPat,
      body: {
        providers: [{ name: 'openai', api_key: BETA_KEY, base_url: `${upstream.url}/v1`, models: ['gpt-*'] }],
      },
    });
    t.equal(putB.status, 200, JSON.stringify(putB.body));

    // A second agent in A, to have one of A's key ids.
    const a2 = await svc.call('/api/agents/onboard', {
      token: a.adminPat,
      body: { agent_id: 'alpha-second' },
    });
    t.equal(a2.status, 201);
    const a2Key = a2.body.api_key.api_key as string;
    const a2KeyId = a2.body.api_key.key_id as string;

    const aCall = await chat(svc, a.agentKey, 'mock-echo');
    t.equal(aCall.status, 200);
    const aPipeline = pipelineOf(aCall);
    const bCall = await chat(svc, b.agentKey, 'gpt-beta-1');
    t.equal(bCall.status, 200);
    const bPipeline = pipelineOf(bCall);

    t.test('each admin sees itself in its own org', async (t) => {
      const meA = await svc.call('/api/me', { token: a.adminPat });
      t.equal(meA.body.org_id, a.orgId);
      t.equal(meA.body.role, 'admin');
      const meB = await svc.call('/api/me', { token: b.adminPat });
      t.equal(meB.body.org_id, b.orgId);
      const agentB = await svc.call('/api/me', { token: b.agentKey });
      t.equal(agentB.body.org_id, b.orgId);
      t.equal(agentB.body.agent_id, 'beta-agent');
    });

    t.test("B's admin cannot list or read A's agents", async (t) => {
      const list = await svc.call('/api/agents', { token: b.adminPat });
      t.equal(list.status, 200);
      const data = list.body.data as { agent_uuid: string; org_id: string; agent_id: string }[];
      t.same(
        data.map((x) => x.agent_uuid),
        [b.agentUuid],
        "only B's agent is listed",
      );
      t.ok(data.every((x) => x.org_id === b.orgId));
      const listA = await svc.call('/api/agents', { token: a.adminPat });
      t.same((listA.body.data as { agent_id: string }[]).map((x) => x.agent_id).sort(), [
        'alpha-agent',
        'alpha-second',
      ]);

      assertError(t, await svc.call(`/api/agents/${a.agentUuid}`, { token: b.adminPat }), 'not_found');
      const own = await svc.call(`/api/agents/${b.agentUuid}`, { token: b.adminPat });
      t.equal(own.status, 200);
      t.equal(own.body.agent_id, 'beta-agent');
      t.equal(
        (await svc.call(`/api/agents/${a.agentUuid}`, { token: a.adminPat })).status,
        200,
        'A reads its own agent',
      );

      assertError(
        t,
        await svc.call(`/api/agents?org_id=${a.orgId}`, { token: b.adminPat }),
        'forbidden',
        'org_id',
      );
      assertError(
        t,
        await svc.call(`/api/agents/${a.agentUuid}?org_id=${a.orgId}`, { token: b.adminPat }),
        'forbidden',
        'org_id',
      );
    });

    t.test("B's admin cannot create or revoke keys of A's agent", async (t) => {
      const create = await svc.call(`/api/agents/${a.agentUuid}/keys`, {
        token: b.adminPat,
        body: { name: 'stolen' },
      });
      assertError(t, create, 'not_found');
      t.notOk(JSON.stringify(create.body).includes('gk_agent_'), 'no key in the refusal');
      const revoke = await svc.call(`/api/agents/${a2.body.agent_uuid}/keys/${a2KeyId}`, {
        method: 'DELETE',
        token: b.adminPat,
      });
      assertError(t, revoke, 'not_found');
      // Naming B's own agent with A's key id must not revoke A's key either.
      const crossed = await svc.call(`/api/agents/${b.agentUuid}/keys/${a2KeyId}`, {
        method: 'DELETE',
        token: b.adminPat,
      });
      assertError(t, crossed, 'not_found');
      t.equal((await chat(svc, a2Key, 'mock-echo')).status, 200, "A's key still works");
    });

    t.test("B's admin cannot revoke A's tokens", async (t) => {
      const tok = await svc.call('/api/tokens', { token: a.adminPat, body: { name: 'alpha-extra' } });
      t.equal(tok.status, 201);
      const del = await svc.call(`/api/tokens/${tok.body.token_id}`, { method: 'DELETE', token: b.adminPat });
      assertError(t, del, 'not_found');
      t.equal((await svc.call('/api/me', { token: tok.body.token })).status, 200);
      const meA = await svc.call('/api/me', { token: a.adminPat });
      const forA = await svc.call('/api/tokens', {
        token: b.adminPat,
        body: { name: 'x', user_id: meA.body.id },
      });
      assertError(t, forA, 'not_found', 'user_id');
    });

    t.test("B's admin cannot read or change A's providers", async (t) => {
      const own = await svc.call('/api/settings/providers', { token: b.adminPat });
      t.equal(own.status, 200);
      t.same(own.body.providers, [
        { name: 'openai', base_url: `${upstream.url}/v1`, models: ['gpt-*'], api_key: '****BBBB' },
      ]);
      t.notOk(JSON.stringify(own.body).includes('AAAA'), "nothing of A's key");
      assertError(
        t,
        await svc.call(`/api/settings/providers?org_id=${a.orgId}`, { token: b.adminPat }),
        'forbidden',
        'org_id',
      );
      const put = await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: b.adminPat,
        body: { org_id: a.orgId, providers: [{ name: 'mock' }] },
      });
      assertError(t, put, 'forbidden', 'org_id');
      const stillA = await svc.call('/api/settings/providers', { token: a.adminPat });
      t.same(
        (stillA.body.providers as { name: string }[]).map((p) => p.name),
        ['mock', 'openai'],
        "A's providers unchanged",
      );
      t.equal(stillA.body.providers[1].api_key, '****AAAA');
    });

    t.test("B's admin cannot create users or agents in A", async (t) => {
      const user = await svc.call('/api/users', {
        token: b.adminPat,
        body: { email: 'intruder@alpha.test', role: 'admin', org_id: a.orgId },
      });
      assertError(t, user, 'forbidden', 'org_id');
      const agent = await svc.call('/api/agents/onboard', {
        token: b.adminPat,
        body: { agent_id: 'intruder', org_id: a.orgId },
      });
      assertError(t, agent, 'forbidden', 'org_id');
      const listA = await svc.call('/api/agents', { token: a.adminPat });
      t.notOk((listA.body.data as { agent_id: string }[]).some((x) => x.agent_id === 'intruder'));
      assertError(t, await svc.call('/api/orgs', { token: b.adminPat }), 'forbidden');
    });

    t.test("B's admin cannot read A's audit pipeline", async (t) => {
      t.equal(
        (await svc.call(`/api/audit/pipeline/${aPipeline}`, { token: a.adminPat })).status,
        200,
        'A reads it',
      );
      const missing = await svc.call(`/api/audit/pipeline/${aPipeline}`, { token: b.adminPat });
      assertError(t, missing, 'not_found');
      const named = await svc.call(`/api/audit/pipeline/${aPipeline}?org_id=${a.orgId}`, {
        token: b.adminPat,
      });
      assertError(t, named, 'forbidden', 'org_id');
      t.equal(
        (await svc.call(`/api/audit/pipeline/${bPipeline}`, { token: b.adminPat })).status,
        200,
        'B reads its own',
      );
      assertError(t, await svc.call(`/api/audit/pipeline/${bPipeline}`, { token: a.adminPat }), 'not_found');
    });

    t.test('an agent key cannot act as another agent', async (t) => {
      const other = await chat(svc, b.agentKey, 'gpt-beta-1', { 'x-agent-id': 'alpha-agent' });
      assertError(t, other, 'forbidden');
      const sibling = await chat(svc, a.agentKey, 'mock-echo', { 'x-agent-id': 'alpha-second' });
      assertError(t, sibling, 'forbidden');
      const self = await chat(svc, b.agentKey, 'gpt-beta-1', { 'x-agent-id': 'beta-agent' });
      t.equal(self.status, 200, 'naming itself is fine');
    });

    t.test('an admin PAT acts for an agent of its own org only', async (t) => {
      const own = await chat(svc, b.adminPat, 'gpt-beta-2', { 'x-agent-id': 'beta-agent' });
      t.equal(own.status, 200);
      const audit = await svc.call(new URL(own.body.service.audit_url as string).pathname, {
        token: b.adminPat,
      });
      t.equal(audit.status, 200);
      t.equal(audit.body.data[0].agent_id, 'beta-agent');
      const foreign = await chat(svc, b.adminPat, 'gpt-beta-2', { 'x-agent-id': 'alpha-agent' });
      assertError(t, foreign, 'not_found', 'X-Agent-Id');
      const foreignA = await chat(svc, a.adminPat, 'mock-echo', { 'x-agent-id': 'beta-agent' });
      assertError(t, foreignA, 'not_found', 'X-Agent-Id');
      const ownA = await chat(svc, a.adminPat, 'mock-echo', { 'x-agent-id': 'alpha-second' });
      t.equal(ownA.status, 200);
    });

    t.test("one org's provider configuration is not usable by the other", async (t) => {
      upstream.requests.length = 0;
      // B has no mock provider; A has no openai route for gpt-beta-*.
      assertError(t, await chat(svc, b.agentKey, 'mock-echo'), 'model_not_found', 'model');
      assertError(t, await chat(svc, a.agentKey, 'gpt-beta-1'), 'model_not_found', 'model');
      t.equal(upstream.requests.length, 0, 'refused calls never reach the upstream');

      const viaB = await chat(svc, b.agentKey, 'gpt-alpha-1');
      t.equal(viaB.status, 200, "B's own gpt-* glob covers the name");
      const viaA = await chat(svc, a.agentKey, 'gpt-alpha-1');
      t.equal(viaA.status, 200);
      t.equal(upstream.requests.length, 2);
      t.equal(upstream.requests[0]?.headers.authorization, `Bearer ${BETA_KEY}`, "B's call carries B's key");
      t.equal(upstream.requests[1]?.headers.authorization, `Bearer ${ALPHA_KEY}`, "A's call carries A's key");

      upstream.requests.length = 0;
      for (const model of ['gpt-beta-1', 'gpt-alpha-2', 'gpt-x']) {
        t.equal((await chat(svc, b.agentKey, model)).status, 200, model);
      }
      t.equal((await chat(svc, b.adminPat, 'gpt-beta-3', { 'x-agent-id': 'beta-agent' })).status, 200);
      t.ok(upstream.requests.length >= 4);
      for (const r of upstream.requests) {
        t.equal(r.headers.authorization, `Bearer ${BETA_KEY}`);
        t.notOk(
          r.raw.includes(ALPHA_KEY) || JSON.stringify(r.headers).includes(ALPHA_KEY),
          "A's key never sent on B's calls",
        );
      }

      const modelsB = await svc.call('/v1/models', { token: b.agentKey });
      t.equal(modelsB.status, 200);
      const idsB = (modelsB.body.data as { id: string }[]).map((m) => m.id);
      t.notOk(idsB.includes('mock-echo'), "A's mock models are not listed for B");
      const modelsA = await svc.call('/v1/models', { token: a.agentKey });
      const idsA = (modelsA.body.data as { id: string }[]).map((m) => m.id);
      t.ok(idsA.includes('mock-echo'));
      t.notOk(idsA.includes('gpt-test'), "A's openai route is limited to gpt-alpha-*");
      t.ok(idsB.includes('gpt-test'), "B's openai route lists gpt-*");
    });

    t.test('a super_admin acts on B with ?org_id=B', async (t) => {
      const agents = await svc.call(`/api/agents?org_id=${b.orgId}`, { token: svc.pat });
      t.equal(agents.status, 200);
      t.same(
        (agents.body.data as { agent_uuid: string }[]).map((x) => x.agent_uuid),
        [b.agentUuid],
      );
      const one = await svc.call(`/api/agents/${b.agentUuid}?org_id=${b.orgId}`, { token: svc.pat });
      t.equal(one.status, 200);
      assertError(t, await svc.call(`/api/agents/${b.agentUuid}`, { token: svc.pat }), 'not_found');
      const providers = await svc.call(`/api/settings/providers?org_id=${b.orgId}`, { token: svc.pat });
      t.equal(providers.status, 200);
      t.equal(providers.body.providers[0].api_key, '****BBBB');
      const audit = await svc.call(`/api/audit/pipeline/${bPipeline}?org_id=${b.orgId}`, { token: svc.pat });
      t.equal(audit.status, 200);
      t.equal(audit.body.data[0].agent_id, 'beta-agent');
      assertError(t, await svc.call(`/api/audit/pipeline/${bPipeline}`, { token: svc.pat }), 'not_found');
      const onboard = await svc.call('/api/agents/onboard', {
        token: svc.pat,
        body: { agent_id: 'beta-by-super', org_id: b.orgId },
      });
      t.equal(onboard.status, 201);
      t.equal(onboard.body.org_id, b.orgId);
      const key = await svc.call(`/api/agents/${b.agentUuid}/keys?org_id=${b.orgId}`, {
        token: svc.pat,
        body: {},
      });
      t.equal(key.status, 201);
      t.equal((await chat(svc, key.body.api_key, 'gpt-beta-1')).status, 200, 'the new key works in B');
      const user = await svc.call('/api/users', {
        token: svc.pat,
        body: { email: 'auditor@beta.test', role: 'auditor', org_id: b.orgId },
      });
      t.equal(user.status, 201);
      t.equal(user.body.org_id, b.orgId);
      const missingOrg = await svc.call('/api/agents?org_id=org_doesnotexist', { token: svc.pat });
      assertError(t, missingOrg, 'not_found', 'org_id');
      const listB = await svc.call('/api/agents', { token: b.adminPat });
      t.same((listB.body.data as { agent_id: string }[]).map((x) => x.agent_id).sort(), [
        'beta-agent',
        'beta-by-super',
      ]);
    });
  });
}
