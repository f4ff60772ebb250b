import { readFileSync } from 'node:fs';
import t from 'tap';
import { verifyFile } from '../../src/audit/verify-file.js';
import { orgLogFiles, refundsNeedApproval, startService, type TestService } from '../helpers/service.js';
import { SoftAuthenticator } from '../helpers/webauthn.js';

// What an erasure reaches besides the trail's personal fields (spec 2.8, 4.5; docs/api.md
// "Erasure"): the approvals a person decided and the reasons they wrote, an authenticator's name,
// the person's address when they are named by user id (and their id when named by email), and the
// answers the gateway keeps for Idempotency-Key replays. A DSAR lists those records beforehand.
// The chain still verifies afterwards.

const RP_ID = 'govgate.test';
const ORIGIN = 'https://console.govgate.test';
const ERIN = 'erin@example.com';
const ERASED = '[ERASED:GDPR-Art17]';

const filesText = (svc: TestService, org: string): string =>
  orgLogFiles(svc, org)
    .map((f) => readFileSync(f, 'utf8'))
    .join('');

t.test('erasing a person by user id reaches their approvals, authenticator name and address', async (t) => {
  const svc = await startService({
    env: { SERVICE_WEBAUTHN_RP_ID: RP_ID, SERVICE_WEBAUTHN_ORIGINS: ORIGIN },
  });
  t.teardown(() => svc.close());
  const ask = await refundsNeedApproval(t, svc);
  const decide = async (id: string, token: string, reason: string) => {
    const r = await svc.call(`/api/approvals/${id}/decide`, { token, body: { decision: 'approve', reason } });
    t.equal(r.status, 200, JSON.stringify(r.body));
  };

  // Erin: a developer with a token and an authenticator she named, owning an agent.
  const user = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'Erin@Example.com', role: 'developer' },
  });
  const erinId = user.body.user_id as string;
  const erinPat = (
    await svc.call('/api/tokens', { token: svc.pat, body: { user_id: erinId, name: 'erin-cli' } })
  ).body.token as string;
  const auth = new SoftAuthenticator(RP_ID, ORIGIN);
  const options = await svc.call('/api/me/webauthn/register/options', { token: erinPat, body: {} });
  const registered = await svc.call('/api/me/webauthn/register/verify', {
    token: erinPat,
    body: { response: auth.register(options.body), name: "Erin Smith's YubiKey" },
  });
  t.equal(registered.status, 201);
  t.equal(
    (
      await svc.call('/api/agents/onboard', {
        token: svc.pat,
        body: { agent_id: 'erins-agent', owner_email: ERIN },
      })
    ).status,
    201,
  );
  // She decides one approval; the admin decides one naming her, and one that does not.
  const hers = await ask(1);
  await decide(hers, erinPat, 'ok, Erin Smith checked the ledger');
  const naming = await ask(2);
  await decide(naming, svc.pat, `call ${ERIN.toUpperCase()} before paying`);
  const others = await ask(3);
  await decide(others, svc.pat, 'fine');
  // A tool argument holding her address (the trail knows her by it, not by her id).
  const govern = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'crm.lookup', args: { email: ERIN } } },
  });
  t.equal(govern.status, 200);

  // Before: a DSAR by her id lists her records, the approvals, and the event holding her address.
  const dsar = (data_subject: unknown) =>
    svc.call('/api/compliance/gdpr/dsar', { token: svc.pat, body: { data_subject } });
  const before = await dsar({ type: 'user_id', value: erinId });
  t.equal(before.status, 200);
  const records = before.body.records;
  t.same(
    records.users.map((u: { user_id: string }) => u.user_id),
    [erinId],
  );
  t.match(records.tokens, [{ subject_id: erinId, name: 'erin-cli' }]);
  t.notOk(JSON.stringify(records.tokens).includes('gk_pat_'), 'no secret in a DSAR');
  t.match(records.authenticators, [{ user_id: erinId, name: "Erin Smith's YubiKey" }]);
  t.match(records.agents, [{ agent_id: 'erins-agent', owner_email: ERIN }]);
  t.same(records.approvals.map((a: { id: string }) => a.id).sort(), [hers, naming].sort());
  const eventTypes = (before.body.events as { event_type: string }[]).map((e) => e.event_type);
  t.ok(eventTypes.includes('govern.decision'), 'the call whose arguments hold her address, found by her id');

  const submitted = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'user_id', value: erinId } },
  });
  const executed = await svc.call(`/api/compliance/gdpr/erasure/${submitted.body.request_id}/execute`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(executed.status, 200, JSON.stringify(executed.body));
  // Her user, her agent's owner, the two approvals; her token and authenticator.
  t.match(executed.body.receipt.erased, { records: 4, credentials: 2 });

  // The approval records: her decision and her words gone, the other reason naming her gone.
  const approval = async (id: string) => (await svc.call(`/api/approvals/${id}`, { token: svc.pat })).body;
  t.match(await approval(hers), { status: 'approved', decided_by: ERASED, reason: ERASED });
  const me = (await svc.call('/api/me', { token: svc.pat })).body.id as string;
  t.match(await approval(naming), { status: 'approved', decided_by: me, reason: ERASED });
  t.match(await approval(others), { decided_by: me, reason: 'fine' }, "others' records are kept");
  const agents = await svc.call('/api/agents', { token: svc.pat });
  t.equal(
    agents.body.data.find((a: { agent_id: string }) => a.agent_id === 'erins-agent').owner_email,
    null,
    'her address as an owner goes, named by her id',
  );

  // The trail: her decision's reason, her authenticator's name, the arguments holding her address.
  const events = (await svc.call('/api/audit?limit=1000', { token: svc.pat })).body.data as any[];
  const decided = events.filter((e) => e.event_type === 'approval.decided');
  const reasons = Object.fromEntries(decided.map((e) => [e.details.approval_id, e.personal.reason?.value]));
  t.same(reasons, { [hers]: ERASED, [naming]: ERASED, [others]: 'fine' });
  t.ok(
    decided.every((e) => e.reason === null),
    'a decision reason is a personal field, not the hashed reason',
  );
  const webauthn = events.find((e) => e.event_type === 'admin.webauthn_registered');
  t.equal(webauthn.personal.name.value, ERASED);
  t.equal(webauthn.details.name, undefined, 'the name is not in the hashed details');
  const lookup = events.find(
    (e) => e.event_type === 'govern.decision' && e.details.action?.tool === 'crm.lookup',
  );
  t.equal(lookup.personal.args.value, ERASED);

  const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
  t.equal(integrity.body.status, 'intact', JSON.stringify(integrity.body.broken_events));
  const keys = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  await svc.service.close(2000);
  const files = filesText(svc, 'default');
  for (const gone of ['erin@', 'Erin Smith', 'ERIN@'])
    t.notOk(files.toLowerCase().includes(gone.toLowerCase()), `no JSONL file holds "${gone}"`);
  t.ok(files.includes('"fine"'), "others' reasons stay");
  t.equal((await verifyFile(orgLogFiles(svc, 'default'), keys)).status, 'intact', 'govgate verify: intact');
});

t.test('an erasure deletes the Idempotency-Key replays that hold the subject', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  // mock-echo answers with the prompt: a kept answer holds what the caller sent.
  const chat = (key: string, content: string, user?: string) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      headers: { 'idempotency-key': key },
      body: { model: 'mock-echo', messages: [{ role: 'user', content }], ...(user ? { user } : {}) },
    });
  const replayed = async (key: string, content: string, user?: string): Promise<boolean> => {
    const r = await chat(key, content, user);
    t.equal(r.status, 200);
    return r.headers.get('idempotent-replayed') === 'true';
  };
  const calls: [string, string, string | undefined][] = [
    ['k-cust', 'my order number is 77', 'cust-9'],
    ['k-cust-other', 'my order number is 78', 'cust-90'],
    ['k-mail', 'please forward this to frank@example.com', undefined],
    ['k-none', 'nothing personal', undefined],
  ];
  for (const [key, content, user] of calls) t.notOk(await replayed(key, content, user), `${key}: a new call`);
  for (const [key, content, user] of calls) t.ok(await replayed(key, content, user), `${key}: replayed`);

  const erase = async (data_subject: unknown) => {
    const submitted = await svc.call('/api/compliance/gdpr/erasure', {
      token: svc.pat,
      body: { data_subject },
    });
    const executed = await svc.call(`/api/compliance/gdpr/erasure/${submitted.body.request_id}/execute`, {
      token: svc.pat,
      method: 'POST',
    });
    t.equal(executed.status, 200, JSON.stringify(executed.body));
    return executed.body.receipt.erased;
  };
  // The end user's answer, found by the call whose events are tombstoned (not by its text).
  t.match(await erase({ type: 'end_user', value: 'cust-9' }), { records: 1 });
  // An address, found in the kept answer's text, in any case.
  t.match(await erase({ type: 'email', value: 'Frank@Example.com' }), { records: 1 });
  t.notOk(await replayed('k-cust', 'my order number is 77', 'cust-9'), "the end user's answer is gone");
  t.notOk(
    await replayed('k-mail', 'please forward this to frank@example.com'),
    'the answer holding the address',
  );
  t.ok(await replayed('k-cust-other', 'my order number is 78', 'cust-90'), "another end user's stays");
  t.ok(await replayed('k-none', 'nothing personal'), 'an answer naming nobody stays');
  const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
  t.equal(integrity.body.status, 'intact');
});
