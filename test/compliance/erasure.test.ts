import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { verifyFile } from '../../src/audit/verify-file.js';
import { canonicalize } from '../../src/core/chain/index.js';
import { createOrg, orgLogFiles, startService, type TestService } from '../helpers/service.js';
import { SoftAuthenticator } from '../helpers/webauthn.js';

// GDPR erasure over HTTP (spec 2.8, 4.5): a request names a data subject; executing it
// tombstones every personal field holding the subject's data in the org's trail (the store and
// the JSONL files), erases the person's records and credentials, and leaves a receipt whose hash
// the signed erasure event holds. The chain still verifies, online and offline, and nothing of the
// subject is left in the org's files; another org's trail is untouched.

const RP_ID = 'govgate.test';
const ORIGIN = 'https://console.govgate.test';
const ALICE = 'alice@example.com';

const filesText = (svc: TestService, org: string): string =>
  orgLogFiles(svc, org)
    .map((f) => readFileSync(f, 'utf8'))
    .join('');

t.test('an executed erasure leaves nothing of the subject and a chain that verifies', async (t) => {
  let svc = await startService({
    env: { SERVICE_WEBAUTHN_RP_ID: RP_ID, SERVICE_WEBAUTHN_ORIGINS: ORIGIN },
  });
  t.teardown(() => svc.close());
  const chat = (user: string | undefined, content: string, token = svc.agentKey) =>
    svc.call('/v1/chat/completions', {
      token,
      body: { model: 'mock-echo', messages: [{ role: 'user', content }], ...(user ? { user } : {}) },
    });
  t.equal((await chat('Alice@Example.com', 'my card is 4111 1111 1111 1111, please help')).status, 200);
  t.equal((await chat(undefined, `please write to ${ALICE} about the invoice`)).status, 200);
  t.equal((await chat('bob@example.com', `bob here, cc ${ALICE.toUpperCase()}`)).status, 200);
  t.equal((await chat('bob@example.com', 'only bob')).status, 200);
  const govern = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'crm.lookup', args: { email: ALICE, limit: 3 } } },
  });
  t.equal(govern.status, 200);
  // Alice is also a person of the org: a user with a token and an authenticator, owning an agent.
  const user = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'Alice@example.com', role: 'developer' },
  });
  const aliceId = user.body.user_id as string;
  const alicePat = (await svc.call('/api/tokens', { token: svc.pat, body: { user_id: aliceId } })).body.token;
  const auth = new SoftAuthenticator(RP_ID, ORIGIN);
  const options = await svc.call('/api/me/webauthn/register/options', { token: alicePat, body: {} });
  const registered = await svc.call('/api/me/webauthn/register/verify', {
    token: alicePat,
    body: { response: auth.register(options.body), name: 'laptop' },
  });
  t.equal(registered.status, 201, 'an authenticator (developers and up may register one)');
  const owned = await svc.call('/api/agents/onboard', {
    token: svc.pat,
    body: { agent_id: 'alices-agent', owner_email: ALICE },
  });
  t.equal(owned.status, 201);
  // A requester submits; another org where Alice is an end user too.
  const requester = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'dpo@example.com', role: 'requester' },
  });
  const requesterPat = (
    await svc.call('/api/tokens', { token: svc.pat, body: { user_id: requester.body.user_id } })
  ).body.token;
  const other = await createOrg(svc, 'elsewhere', { mock: true });
  t.equal((await chat(ALICE, 'hello from the other org', other.agentKey)).status, 200);

  // What the trail holds of her before: the DSAR's events (without DSAR events themselves).
  const dsar = async () => {
    const r = await svc.call('/api/compliance/gdpr/dsar', {
      token: svc.pat,
      body: { data_subject: { type: 'email', value: ALICE } },
    });
    return (r.body.events as { id: string; event_type: string; personal: Record<string, unknown> }[]).filter(
      (e) => e.event_type !== 'compliance.dsar_exported',
    );
  };
  const held = await dsar();
  t.ok(held.length >= 4, `the trail names her in ${held.length} events`);

  // Submit: requester and up; strict bodies; agent keys refused.
  const erasure = (body: unknown, token = requesterPat) =>
    svc.call('/api/compliance/gdpr/erasure', { token, body });
  const submitted = await erasure({ data_subject: { type: 'email', value: ALICE }, reason: 'ticket 4711' });
  t.equal(submitted.status, 201);
  t.match(submitted.body, {
    request_id: /^er_/,
    org_id: 'default',
    data_subject: { type: 'email', value: ALICE },
    status: 'pending',
    requested_by: requester.body.user_id,
    receipt: null,
  });
  const id = submitted.body.request_id as string;
  t.equal((await erasure({ data_subject: { type: 'email', value: ALICE } }, svc.agentKey)).status, 403);
  for (const bad of [
    {},
    { data_subject: { type: 'phone', value: '1' } },
    { data_subject: { type: 'email', value: '' } },
    { data_subject: { type: 'email', value: ALICE }, extra: 1 },
  ])
    t.equal((await erasure(bad)).status, 400, JSON.stringify(bad));

  // Read: any person of the org; another org sees nothing of it.
  const list = await svc.call('/api/compliance/gdpr/erasure', { token: requesterPat });
  t.equal(list.status, 200);
  t.same(
    list.body.data.map((r: { request_id: string }) => r.request_id),
    [id],
  );
  t.equal((await svc.call(`/api/compliance/gdpr/erasure/${id}`, { token: alicePat })).body.status, 'pending');
  t.equal((await svc.call(`/api/compliance/gdpr/erasure/${id}`, { token: other.adminPat })).status, 404);
  t.same((await svc.call('/api/compliance/gdpr/erasure', { token: other.adminPat })).body.data, []);
  t.equal((await svc.call('/api/compliance/gdpr/erasure/er_nothing', { token: svc.pat })).status, 404);
  t.equal((await svc.call('/api/compliance/gdpr/erasure?limit=0', { token: svc.pat })).status, 400);
  // A cursor that is not one of this list's, or a parameter the list does not read, is refused.
  for (const query of ['cursor=zzz', `cursor=${id}x`, 'foo=1', 'status=pending'])
    t.equal((await svc.call(`/api/compliance/gdpr/erasure?${query}`, { token: svc.pat })).status, 400, query);
  t.equal(
    (await svc.call(`/api/compliance/gdpr/erasure?cursor=${id}`, { token: other.adminPat })).status,
    400,
    "another org's request is no cursor of this org's list",
  );
  t.same((await svc.call(`/api/compliance/gdpr/erasure?cursor=${id}`, { token: svc.pat })).body.data, []);

  // Execute: org_admin and up, in the request's org only.
  const execute = (token: string) =>
    svc.call(`/api/compliance/gdpr/erasure/${id}/execute`, { token, method: 'POST' });
  t.equal((await execute(requesterPat)).status, 403, 'a requester cannot execute');
  const orgAdmin = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'oa@example.com', role: 'org_admin' },
  });
  const orgAdminPat = (
    await svc.call('/api/tokens', { token: svc.pat, body: { user_id: orgAdmin.body.user_id } })
  ).body.token;
  t.equal((await execute(orgAdminPat)).status, 403, 'nor an org_admin: execution takes an admin (spec 5)');
  t.equal((await execute(other.adminPat)).status, 404, "another org's admin finds no such request");
  // Events keep coming while it runs.
  const during = Array.from({ length: 20 }, (_, i) => chat('carol@example.com', `during ${i}`));
  const executed = await execute(svc.pat);
  t.equal(executed.status, 200, JSON.stringify(executed.body));
  for (const r of await Promise.all(during)) t.equal(r.status, 200);
  const receipt = executed.body.receipt;
  t.match(executed.body, { status: 'executed', executed_by: receipt.executor, error: null });
  t.match(receipt, {
    request_id: id,
    data_subject: { type: 'email', value: ALICE },
    erased: { records: 2, credentials: 2 }, // her user and her agent's owner; her token and authenticator
  });
  // The events whose personal data holds her (her address, the name she gave her authenticator),
  // the DSAR made above and the request itself; the events naming her only as the one who acted
  // keep her (pseudonymous) user id, now unlinked.
  const personal = held.filter(
    (e) =>
      JSON.stringify(e.personal).toLowerCase().includes('alice@') ||
      e.event_type === 'admin.webauthn_registered',
  );
  t.ok(personal.length >= 4 && personal.length < held.length);
  t.equal(receipt.erased.events, personal.length + 2, `${receipt.erased.events} events erased`);
  const { receipt_hash, ...fields } = receipt;
  t.equal(
    receipt_hash,
    createHash('sha256').update(canonicalize(fields)).digest('hex'),
    'the receipt hash is its JCS',
  );
  t.equal((await execute(svc.pat)).status, 409, 'executed once');

  // The erasure event: in the chain, naming the fields, holding the receipt hash, not the subject.
  const events = (await svc.call('/api/audit?event_type=gdpr.erasure_executed', { token: svc.pat })).body
    .data as { id: string; details: any; personal: unknown }[];
  t.equal(events.length, 1);
  const [event] = events;
  t.same(executed.body.erasure_event_ids, [event?.id]);
  t.match(event?.details, { request_id: id, receipt_hash, part: 1, parts: 1, subject_type: 'email' });
  t.equal(event?.details.erased_fields.length, receipt.erased.events);
  t.notOk(JSON.stringify(event).toLowerCase().includes('alice@'), 'the event holds no copy of the subject');

  // Her records and credentials are gone.
  t.equal((await svc.call('/api/me', { token: alicePat })).status, 401, 'her token no longer works');
  const agents = await svc.call('/api/agents', { token: svc.pat });
  const agent = agents.body.data.find((a: { agent_id: string }) => a.agent_id === 'alices-agent');
  t.equal(agent.owner_email, null, "her agent's owner is erased; the agent stays");

  // Nothing of her in the trail: the API, the export, every JSONL file; others' data kept.
  await svc.service.close(2000);
  svc = await startService({
    dataDir: svc.dataDir,
    env: {
      SERVICE_WEBAUTHN_RP_ID: RP_ID,
      SERVICE_WEBAUTHN_ORIGINS: ORIGIN,
      SERVICE_BOOTSTRAP_TOKEN: svc.pat,
    },
  });
  const files = filesText(svc, 'default').toLowerCase();
  t.notOk(files.includes('alice@'), 'no JSONL file holds her address, in any case');
  t.ok(files.includes('bob@example.com'), "bob's data stays");
  t.ok(files.includes('carol@example.com'), 'events appended during the execution are in the files');
  t.ok(files.includes('[erased:gdpr-art17]'), 'tombstones in their place');
  const exported = await svc.call('/api/audit/export?format=jsonl', { token: svc.pat });
  t.notOk(String(exported.body).toLowerCase().includes('alice@'), 'nor the export');
  t.ok(filesText(svc, other.orgId).includes(ALICE), "another org's trail is not touched");
  const bobs = (
    await svc.call('/api/audit?event_type=llm_call&limit=100', { token: svc.pat })
  ).body.data.filter((e: any) => e.personal.end_user?.value === 'bob@example.com');
  t.equal(bobs.length, 2);
  const cc = bobs.find((e: any) => e.personal.end_user && JSON.stringify(e.personal).includes('[ERASED'));
  t.ok(cc, "in bob's call that named her, only her part is erased");
  t.equal(cc.personal.end_user.value, 'bob@example.com');

  // The chain verifies: online and offline, with the published keys.
  const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
  t.equal(integrity.body.status, 'intact', JSON.stringify(integrity.body.broken_events));
  const keys = await svc.call('/api/audit/signing-key', { token: svc.pat });
  const offline = await verifyFile(orgLogFiles(svc, 'default'), keys.body);
  t.equal(offline.status, 'intact', 'govgate verify: intact');
  // A DSAR now finds nothing of her (and, a new request, records her address once more).
  t.same(await dsar(), [], 'a DSAR finds nothing of her any more');
  const request = await svc.call(`/api/compliance/gdpr/erasure/${id}`, { token: svc.pat });
  t.equal(request.body.status, 'executed', 'the request is kept across a restart');
  t.same(request.body.receipt, receipt);
});

t.test('erasing an end user touches only their exchanges; an admin cannot erase themselves', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  for (const user of ['cust-42', 'cust-43'])
    await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: `I am ${user}` }], user },
    });
  const submitted = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'end_user', value: 'cust-42' } },
  });
  const executed = await svc.call(`/api/compliance/gdpr/erasure/${submitted.body.request_id}/execute`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(executed.status, 200);
  // Her call and the request event naming her; no records or credentials.
  t.match(executed.body.receipt.erased, { events: 2, records: 0, credentials: 0 });
  const calls = (await svc.call('/api/audit?event_type=llm_call', { token: svc.pat })).body.data;
  const byUser = Object.fromEntries(calls.map((e: any) => [e.personal.end_user.value, e.personal]));
  t.same(Object.keys(byUser).sort(), ['[ERASED:GDPR-Art17]', 'cust-43']);
  t.ok(
    Object.values(byUser['[ERASED:GDPR-Art17]'] as Record<string, { value: unknown }>).every(
      (f) => f.value === '[ERASED:GDPR-Art17]',
    ),
    'every personal field of her exchange',
  );
  t.equal((await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat })).body.status, 'intact');

  // The super_admin's own account: another admin must execute it.
  const me = await svc.call('/api/me', { token: svc.pat });
  const own = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'user_id', value: me.body.id } },
  });
  const refused = await svc.call(`/api/compliance/gdpr/erasure/${own.body.request_id}/execute`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(refused.status, 409);
  t.match(refused.body.error.message, /your own account/);
  t.equal((await svc.call('/api/me', { token: svc.pat })).status, 200, 'nothing was erased');
  t.equal(
    (await svc.call(`/api/compliance/gdpr/erasure/${own.body.request_id}`, { token: svc.pat })).body.status,
    'pending',
  );
});

t.test('an execution cut short stays executing, and executing again finishes it', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }], user: 'dora@example.com' },
  });
  const submitted = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'end_user', value: 'dora@example.com' } },
  });
  const id = submitted.body.request_id as string;
  // A rotated file of the org's log that cannot be read (a directory in its place): the store is
  // erased, the JSONL rewrite fails.
  const blocker = join(svc.dataDir, 'data', 'audit', 'default.7.jsonl');
  mkdirSync(blocker);
  const first = await svc.call(`/api/compliance/gdpr/erasure/${id}/execute`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(first.status, 503);
  t.match(first.body.error.message, /execute it again/);
  const state = await svc.call(`/api/compliance/gdpr/erasure/${id}`, { token: svc.pat });
  t.match(state.body, { status: 'executing', error: /could not be rewritten/ });
  t.equal(state.body.erasure_event_ids.length, 1, 'the authority is committed first');
  const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
  t.equal(integrity.body.status, 'intact', 'no tombstone without its authority, even cut short');

  rmSync(blocker, { recursive: true });
  const second = await svc.call(`/api/compliance/gdpr/erasure/${id}/execute`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(second.status, 200);
  t.match(second.body, { status: 'executed', error: null });
  t.same(second.body.erasure_event_ids, state.body.erasure_event_ids, 'no second erasure event');
  t.same(second.body.receipt, state.body.receipt, 'the receipt made the first time');
  await svc.service.close(2000);
  const files = orgLogFiles(svc, 'default')
    .filter((f) => existsSync(f))
    .map((f) => readFileSync(f, 'utf8'))
    .join('');
  t.notOk(files.includes('dora@'), 'the JSONL log is erased too');
});
