import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { type WebauthnCredentialRecord, WebauthnDesk } from '../../src/approvals/webauthn.js';
import { IdentityRepo } from '../../src/identity/repo.js';
import type { CredentialRecord, OrgRecord, Principal, UserRecord } from '../../src/identity/types.js';
import { openStore } from '../../src/store/db.js';
import { startReceiver } from '../helpers/receiver.js';
import { createOrg, orgLogFiles, startService, type TestService } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar } from '../helpers/sidecar.js';
import { tempDir } from '../helpers/tmp.js';
import { waitFor } from '../helpers/wait.js';
import { SoftAuthenticator } from '../helpers/webauthn.js';

/** The `_system` chain's events as its JSONL log holds them (the API does not serve it). */
function systemEvents(svc: TestService): any[] {
  const out: any[] = [];
  for (const file of orgLogFiles(svc, '_system')) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      if (line === '') continue;
      const e = JSON.parse(line);
      if (typeof e.event_type === 'string') out.push(e);
    }
  }
  return out;
}

async function systemEvent(svc: TestService, type: string, orgId: string): Promise<any> {
  let found: any;
  await waitFor(() => {
    found = systemEvents(svc).find((e) => e.event_type === type && e.details?.org_id === orgId);
    return found !== undefined;
  }, `${type} of ${orgId} in the _system log`);
  return found;
}

/** An org with a user, an agent and its key, a provider key in the vault, a pending approval and a kept replay. */
async function populatedOrg(svc: TestService, name: string) {
  const org = await createOrg(svc, name, { mock: true });
  const providers = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token: org.adminPat,
    body: { providers: [{ name: 'openai', api_key: 'sk-test-deleted-org-0001' }, { name: 'mock' }] },
  });
  if (providers.status !== 200) throw new Error(JSON.stringify(providers.body));
  const policy = await svc.call('/api/v2/policies', { token: org.adminPat, body: { name: 'refunds' } });
  const draft = await svc.call(`/api/v2/policies/${policy.body.id}/versions`, {
    token: org.adminPat,
    body: {
      rules: {
        rules: [
          {
            id: 'refunds',
            when: { type: 'TOOL_CALL', tool: 'payments.refund' },
            then: 'require_approval',
            reason: 'refunds need a human',
          },
        ],
      },
    },
  });
  await svc.call(`/api/v2/policies/${policy.body.id}/versions/${draft.body.version_no}/publish`, {
    method: 'POST',
    token: org.adminPat,
  });
  await svc.call(`/api/v2/policies/${policy.body.id}/assignments`, {
    token: org.adminPat,
    body: { scope_type: 'org', scope_id: org.orgId },
  });
  const asked = await svc.call('/v1/govern', {
    token: org.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'payments.refund', args: { amount: 250 } } },
  });
  if (asked.body.outcome !== 'needs_approval') throw new Error(JSON.stringify(asked.body));
  const chat = await svc.call('/v1/chat/completions', {
    token: org.agentKey,
    headers: { 'idempotency-key': 'replay-1' },
    body: {
      model: 'mock-echo',
      user: `end-user@${name}.test`,
      messages: [{ role: 'user', content: 'hello' }],
    },
  });
  if (chat.status !== 200) throw new Error(JSON.stringify(chat.body));
  return { ...org, approvalId: asked.body.approval.request_id as string };
}

t.test('DELETE /api/orgs/{id}: only a super_admin, never the bootstrap org nor their own', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const acme = await createOrg(svc, 'acme-roles');
  const other = await createOrg(svc, 'other-roles');
  // A super_admin whose own org is `other-roles`.
  const user = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'root@other.test', role: 'super_admin', org_id: other.orgId },
  });
  const rootTok = (await svc.call('/api/tokens', { token: svc.pat, body: { user_id: user.body.user_id } }))
    .body.token as string;
  const del = (org: string, token?: string) =>
    svc.call(`/api/orgs/${org}`, { method: 'DELETE', ...(token === undefined ? {} : { token }) });

  t.equal((await del(acme.orgId)).status, 401, 'no credential');
  t.equal((await del(acme.orgId, acme.agentKey)).status, 403, 'an agent key');
  const admin = await del(acme.orgId, acme.adminPat);
  t.equal(admin.status, 403, 'an admin of the org itself');
  t.equal(admin.body.error.code, 'forbidden');
  t.equal((await del(other.orgId, acme.adminPat)).status, 403, 'an admin of another org');
  const boot = await del('default', svc.pat);
  t.equal(boot.status, 409, 'the bootstrap org');
  t.equal(boot.body.error.code, 'org_protected');
  const own = await del(other.orgId, rootTok);
  t.equal(own.status, 409, "the super_admin's own org");
  t.equal(own.body.error.code, 'org_protected');
  t.equal((await del('org_NoSuchOrg000000', svc.pat)).status, 404, 'an org that never existed');
  t.equal((await del(acme.orgId, svc.pat)).status, 200, 'a super_admin of another org');
  t.equal((await svc.call('/api/me', { token: acme.adminPat })).status, 401, "the org's token is gone");
  t.equal((await svc.call('/api/me', { token: rootTok })).status, 200, 'other orgs untouched');
  t.equal((await svc.call('/api/me', { token: other.adminPat })).status, 200);
});

t.test('deleting an org: its credentials stop at once, its state goes, its chain stays', async (t) => {
  const hook = await startReceiver();
  const svc = await startService({ env: { SERVICE_EGRESS_ALLOW: `127.0.0.1:${hook.port}` } });
  let closed = false;
  t.teardown(async () => {
    if (!closed) await svc.close();
    await hook.close();
  });
  const acme = await populatedOrg(svc, 'acme');
  const keep = await populatedOrg(svc, 'keep');
  // Its per-org destinations deliver until the deletion.
  const exportDest = await svc.call('/api/settings/export-destinations', {
    token: acme.adminPat,
    body: {
      kind: 'webhook',
      endpoint: `http://127.0.0.1:${hook.port}/acme-export`,
      token: 'acme-export-token',
    },
  });
  t.equal(exportDest.status, 201, JSON.stringify(exportDest.body));
  const alertDest = await svc.call('/api/settings/alert-destinations', {
    token: acme.adminPat,
    body: {
      webhook_type: 'generic',
      webhook_url: `http://127.0.0.1:${hook.port}/acme-alert`,
      min_severity: 'all',
    },
  });
  t.equal(alertDest.status, 201, JSON.stringify(alertDest.body));
  // A tool whose header holds a secret (kept in the vault).
  const tools = await svc.call('/api/settings/tools', {
    method: 'PUT',
    token: acme.adminPat,
    body: {
      tools: [
        {
          name: 'crm.lookup',
          url: `http://127.0.0.1:${hook.port}/lookup`,
          headers: { Authorization: 'Bearer acme-tool-secret' },
        },
      ],
    },
  });
  t.equal(tools.status, 200, JSON.stringify(tools.body));
  await svc.call('/v1/chat/completions', {
    token: acme.agentKey,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'before' }] },
  });
  await waitFor(() => hook.posts.some((h) => h.path === '/acme-export'), 'a delivery before the deletion');
  const chatAs = (token: string) =>
    svc.call('/v1/chat/completions', {
      token,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hi' }] },
    });
  t.equal((await chatAs(acme.agentKey)).status, 200, 'the agent key works before');

  const res = await svc.call(`/api/orgs/${acme.orgId}`, { method: 'DELETE', token: svc.pat });
  t.equal(res.status, 200, JSON.stringify(res.body));
  const me = (await svc.call('/api/me', { token: svc.pat })).body;
  t.match(res.body, {
    org_id: acme.orgId,
    name: 'acme',
    deleted: true,
    deleted_by: me.id,
    removed: {
      users: 1,
      agents: 1,
      agent_keys: 1,
      tokens: 1,
      approvals_cancelled: 1,
      approvals_revoked: 0,
      idempotency_replays: 1,
      export_destinations: 1,
      alert_destinations: 1,
    },
  });
  t.ok(res.body.removed.secrets >= 2, "the provider key and the tool's header left the vault");
  t.equal(res.body.removed.tools, 1, 'its tool went');
  t.match(res.body.deleted_at, /^\d{4}-\d\d-\d\dT/);

  // Nothing of the org authenticates, from the answer on.
  const chat = await chatAs(acme.agentKey);
  t.equal(chat.status, 401, 'the agent key');
  t.equal((await svc.call('/api/me', { token: acme.adminPat })).status, 401, 'the PAT');
  t.equal((await chatAs(keep.agentKey)).status, 200, "another org's agent key still works");

  // Every org-scoped route is 404 for it; it is not listed; a second DELETE is 404.
  for (const path of [
    '/api/agents',
    '/api/settings/providers',
    '/api/v2/policies',
    '/api/approvals',
    '/api/sidecars',
  ])
    t.equal((await svc.call(`${path}?org_id=${acme.orgId}`, { token: svc.pat })).status, 404, path);
  const user = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'late@acme.test', role: 'developer', org_id: acme.orgId },
  });
  t.equal(user.status, 404, 'no user is added to it');
  const listed = (await svc.call('/api/orgs', { token: svc.pat })).body.data as OrgRecord[];
  t.notOk(
    listed.some((o) => o.org_id === acme.orgId),
    'not listed',
  );
  const all = (await svc.call('/api/orgs?include_deleted=true', { token: svc.pat })).body.data as OrgRecord[];
  t.match(
    all.find((o) => o.org_id === acme.orgId),
    { name: 'acme', deleted_at: res.body.deleted_at, removed: res.body.removed },
    'listed as a tombstone when asked',
  );
  t.equal((await svc.call(`/api/orgs/${acme.orgId}`, { method: 'DELETE', token: svc.pat })).status, 404);

  // Its chain stays readable and verifiable by a super_admin, and says what ended it.
  const cancelled = await svc.call(`/api/audit?org_id=${acme.orgId}&event_type=approval.cancelled`, {
    token: svc.pat,
  });
  t.equal(cancelled.status, 200);
  t.equal(cancelled.body.data[0]?.details.approval_id, acme.approvalId, 'the pending approval was cancelled');
  const last = await svc.call(`/api/audit?org_id=${acme.orgId}&limit=1`, { token: svc.pat });
  t.equal(last.body.data[0]?.event_type, 'admin.org_deleted', "the org chain's last event");
  t.same(last.body.data[0]?.details.removed, res.body.removed);
  const integrity = await svc.call(`/api/audit/integrity?org_id=${acme.orgId}&refresh=true`, {
    token: svc.pat,
  });
  t.equal(integrity.status, 200);
  t.equal(integrity.body.status, 'intact', JSON.stringify(integrity.body.broken_events));
  t.ok(integrity.body.events > 5);
  const exported = await svc.call(`/api/audit/export?format=jsonl&org_id=${acme.orgId}`, { token: svc.pat });
  t.equal(exported.status, 200, 'the chain exports');

  // Its personal data stays erasable (GDPR) and its chain prunable by a super_admin; the chain
  // still verifies after an erasure.
  const erasure = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'end_user', value: 'end-user@acme.test' }, org_id: acme.orgId },
  });
  t.equal(erasure.status, 201, JSON.stringify(erasure.body));
  const executed = await svc.call(
    `/api/compliance/gdpr/erasure/${erasure.body.request_id}/execute?org_id=${acme.orgId}`,
    { method: 'POST', token: svc.pat },
  );
  t.equal(executed.status, 200, JSON.stringify(executed.body));
  t.ok(executed.body.receipt.erased.events >= 1, 'the end user’s events were erased');
  const afterErasure = await svc.call(`/api/audit/integrity?org_id=${acme.orgId}&refresh=true`, {
    token: svc.pat,
  });
  t.equal(afterErasure.body.status, 'intact', 'intact after the erasure');
  t.equal(
    (await svc.call(`/api/settings/retention/preview?org_id=${acme.orgId}`, { token: svc.pat })).status,
    200,
    'retention reaches it',
  );

  // The erasure's events are the org's, after its destinations went: none reaches them (an
  // export destination flushes every second).
  await new Promise((r) => setTimeout(r, 2500));
  t.notOk(
    hook.posts.some((h) => h.path.startsWith('/acme') && h.raw.includes('compliance.erasure')),
    'its destinations deliver nothing after the deletion',
  );

  // The deletion is an event of the `_system` chain, naming who and what.
  const sys = await systemEvent(svc, 'admin.org_deleted', acme.orgId);
  t.match(sys, {
    org_id: '_system',
    outcome: 'allow',
    details: { actor: me.id, org_id: acme.orgId, name: 'acme', removed: res.body.removed },
  });

  // The name is released; the id is not reused.
  const again = await svc.call('/api/orgs', { token: svc.pat, body: { name: 'acme' } });
  t.equal(again.status, 201, JSON.stringify(again.body));
  t.not(again.body.org_id, acme.orgId, 'a new id');
  t.equal(
    (await svc.call(`/api/agents?org_id=${again.body.org_id}`, { token: svc.pat })).body.data.length,
    0,
  );

  // What the store holds of the org afterwards: the tombstone and the chain, nothing else.
  await svc.close(true);
  closed = true;
  const store = openStore(join(svc.dataDir, 'data'));
  t.teardown(() => store.close());
  const tomb = store.orgs.get(acme.orgId) as OrgRecord;
  t.equal(tomb.deleted_at, res.body.deleted_at, 'the tombstone');
  const ofOrg = (db: { getKeys(o?: unknown): Iterable<unknown> }) =>
    [...db.getKeys()].filter((k) => Array.isArray(k) && k[0] === acme.orgId).length;
  t.equal(ofOrg(store.vault), 0, 'no vault secret of the org');
  t.equal(store.tools.get(acme.orgId), undefined, 'no tool of the org');
  t.equal(ofOrg(store.settings), 0, 'no settings of the org');
  t.equal(ofOrg(store.idempotency), 0, 'no replay of the org');
  t.notOk(
    [...store.users.getRange()].some(({ value }) => (value as UserRecord).org_id === acme.orgId),
    'no user of the org',
  );
  t.notOk(
    [...store.credentials.getRange()].some(
      ({ value }) => typeof value === 'object' && (value as CredentialRecord).org_id === acme.orgId,
    ),
    'no credential of the org',
  );
  t.equal(store.agents.get(acme.agentUuid), undefined, 'no agent of the org');
  t.ok(
    [...store.vault.getKeys()].some((k) => (k as string[])[0] === keep.orgId),
    "another org's secrets stay",
  );
  t.ok(ofOrg(store.auditEvents) > 5, 'its chain is kept');
});

t.test("a deleted org's sidecar stops deciding at its next snapshot poll", async (t) => {
  const control = await startService();
  const org = await createOrg(control, 'sc-org', { mock: true });
  const { token } = await createSidecarToken(control, org.adminPat);
  const sc = await startTestSidecar({ controlUrl: control.url, token });
  t.teardown(async () => {
    await sc.close();
    await control.close();
  });
  await waitFor(() => sc.sidecar.snapshot.loaded, 'the first snapshot');
  const chat = () =>
    sc.call('/v1/chat/completions', {
      token: org.agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hi' }] },
    });
  t.equal((await chat()).status, 200, 'the agent key works at the sidecar');
  const res = await control.call(`/api/orgs/${org.orgId}`, { method: 'DELETE', token: control.pat });
  t.equal(res.status, 200, JSON.stringify(res.body));
  t.match(res.body.removed, { sidecars_revoked: 1, sidecar_tokens: 1 });
  await waitFor(() => !sc.sidecar.snapshot.loaded, 'the sidecar forgets its snapshot', 5000);
  const after = await chat();
  t.equal(after.status, 503, 'refused: the sidecar decides nothing without a snapshot');
  const sync = await fetch(`${control.url}/api/sync/snapshot`, {
    headers: { authorization: `Bearer ${token}` },
  });
  t.equal(sync.status, 401, 'the sidecar token is refused');
});

t.test('two DELETEs at once: one deletes, the other is 404', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const org = await createOrg(svc, 'twice');
  const del = () => svc.call(`/api/orgs/${org.orgId}`, { method: 'DELETE', token: svc.pat });
  const statuses = (await Promise.all([del(), del()])).map((r) => r.status).sort();
  t.same(statuses, [200, 404]);
  await systemEvent(svc, 'admin.org_deleted', org.orgId);
  t.equal(
    systemEvents(svc).filter((e) => e.event_type === 'admin.org_deleted' && e.details.org_id === org.orgId)
      .length,
    1,
    'recorded once',
  );
});

t.test('a write for an org deleted meanwhile fails closed (IdentityRepo)', async (t) => {
  const dir = tempDir('govgate-orgdel-');
  const store = openStore(dir);
  t.teardown(() => store.close());
  const identity = new IdentityRepo(store);
  const org = identity.createOrg('gone');
  const user = identity.createUser(org.org_id, 'a@gone.test', 'admin');
  const agent = identity.onboardAgent(org.org_id, { agent_id: 'bot' });
  const key = identity.createAgentKey(agent, {});
  const pat = identity.createPat(user, {});
  t.ok(identity.authenticate(key.secret));
  const retired = identity.retireOrg(org.org_id, 'usr_x');
  t.same(retired.removed, { users: 1, agents: 1, agent_keys: 1, tokens: 1 });
  t.same(retired.userIds, [user.user_id]);
  t.equal(identity.authenticate(key.secret), undefined, 'the agent key resolves to nothing');
  t.equal(identity.authenticate(pat.secret), undefined, 'nor the PAT');
  t.equal(identity.getOrg(org.org_id), undefined, 'the org is gone');
  t.equal(identity.orgRecord(org.org_id)?.deleted_by, 'usr_x', 'its tombstone stays');
  t.throws(() => identity.createUser(org.org_id, 'b@gone.test', 'developer'), { code: 'not_found' });
  t.throws(() => identity.onboardAgent(org.org_id, { agent_id: 'bot2' }), { code: 'not_found' });
  t.throws(() => identity.createAgentKey(agent, {}), { code: 'not_found' });
  t.throws(() => identity.createOrg('other', org.org_id), { code: 'conflict' }, 'its id is never reused');
  // Cut short before it completed: taken again; once complete: 404.
  t.same(identity.retireOrg(org.org_id, 'usr_y').removed, { users: 0, agents: 0, agent_keys: 0, tokens: 0 });
  t.equal(identity.orgRecord(org.org_id)?.deleted_by, 'usr_x', 'the first deleter stays named');
  identity.completeOrgDeletion(org.org_id, { users: 1 });
  t.throws(() => identity.retireOrg(org.org_id, 'usr_y'), { code: 'not_found' });
  t.equal(identity.createOrg('gone').name, 'gone', 'its name is free');
});

const RP_ID = 'govgate.test';
const ORIGIN = 'https://console.govgate.test';
const WEBAUTHN_ENV = { SERVICE_WEBAUTHN_RP_ID: RP_ID, SERVICE_WEBAUTHN_ORIGINS: ORIGIN };

/** The authenticators the store holds for `orgId` (opened once the service is closed). */
function authenticatorsOf(dataDir: string, orgId: string): number {
  const store = openStore(join(dataDir, 'data'));
  try {
    return [...store.webauthn.getRange()].filter(
      ({ value }) => (value as WebauthnCredentialRecord).org_id === orgId,
    ).length;
  } finally {
    store.close();
  }
}

t.test(
  'a deletion cut short after its first step, finished by the next DELETE, still removes its users’ authenticators',
  async (t) => {
    const first = await startService({ env: WEBAUTHN_ENV });
    const org = await createOrg(first, 'cut-short');
    const options = await first.call('/api/me/webauthn/register/options', { token: org.adminPat, body: {} });
    const registered = await first.call('/api/me/webauthn/register/verify', {
      token: org.adminPat,
      body: { response: new SoftAuthenticator(RP_ID, ORIGIN).register(options.body), name: 'laptop' },
    });
    t.equal(registered.status, 201, JSON.stringify(registered.body));
    await first.close(true);
    t.equal(authenticatorsOf(first.dataDir, org.orgId), 1, 'the admin holds an authenticator');

    // The process stopped right after the deletion's first transaction (the tombstone, the users gone).
    const store = openStore(join(first.dataDir, 'data'));
    new IdentityRepo(store).retireOrg(org.orgId, 'usr_cut');
    store.close();

    const svc = await startService({
      dataDir: first.dataDir,
      env: { ...WEBAUTHN_ENV, SERVICE_BOOTSTRAP_TOKEN: first.pat },
    });
    let closed = false;
    t.teardown(async () => {
      if (!closed) await svc.close();
    });
    const res = await svc.call(`/api/orgs/${org.orgId}`, { method: 'DELETE', token: svc.pat });
    t.equal(res.status, 200, JSON.stringify(res.body));
    t.equal(res.body.removed.authenticators, 1, 'counted');
    await svc.close(true);
    closed = true;
    t.equal(authenticatorsOf(svc.dataDir, org.orgId), 0, 'no authenticator of the org is left');
  },
);

t.test(
  'an authenticator registered by a person of an org deleted meanwhile is refused (WebauthnDesk)',
  async (t) => {
    const dir = tempDir('govgate-orgdel-');
    const store = openStore(dir);
    t.teardown(() => store.close());
    const identity = new IdentityRepo(store);
    const org = identity.createOrg('racing');
    const user = identity.createUser(org.org_id, 'a@racing.test', 'admin');
    const p: Principal = {
      kind: 'user',
      id: user.user_id,
      org_id: org.org_id,
      role: 'admin',
      agent_id: null,
      credential_id: 'tok_x',
      email: user.email,
    };
    const desk = new WebauthnDesk(store, { rpId: RP_ID, origins: [ORIGIN] });
    // Authenticated, and its options given, before the deletion; its verification ends after it.
    const options = (await desk.registrationOptions(p)) as { challenge: string };
    identity.retireOrg(org.org_id, 'usr_x');
    t.equal(await desk.removeOrg(org.org_id), 0, 'nothing to remove yet');
    await t.rejects(desk.register(p, new SoftAuthenticator(RP_ID, ORIGIN).register(options), null), {
      code: 'not_found',
    });
    t.equal(desk.credentialsOf(user.user_id).length, 0, 'nothing was written for the deleted org');
  },
);

t.test('a mandate issued to an org deleted since no longer verifies at /v1/tokens/verify', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const org = await createOrg(svc, 'mandated');
  const keep = await createOrg(svc, 'mandated-keep');
  const govern = (token: string) =>
    svc.call('/v1/govern', {
      token,
      body: { type: 'TOOL_CALL', payload: { tool: 'crm.lookup', args: { id: 7 } } },
    });
  const issued = await govern(org.agentKey);
  const kept = await govern(keep.agentKey);
  t.equal(issued.body.outcome, 'allow', JSON.stringify(issued.body));
  t.type(issued.body.mandate, 'string', 'a mandate for the allowed call');
  const verify = (token: string) => svc.call('/v1/tokens/verify', { body: { token } });
  t.equal((await verify(issued.body.mandate)).body.valid, true, 'valid before the deletion');
  t.equal((await svc.call(`/api/orgs/${org.orgId}`, { method: 'DELETE', token: svc.pat })).status, 200);
  const after = await verify(issued.body.mandate);
  t.match(after.body, { valid: false, error: 'revoked' }, "its org's deletion ended it");
  t.equal((await verify(kept.body.mandate)).body.valid, true, "another org's mandate still verifies");
});
