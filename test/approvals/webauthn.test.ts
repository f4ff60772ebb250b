import { createHash } from 'node:crypto';
import type { Test } from 'tap';
import t from 'tap';
import { publishOrgPolicy, startService, type TestService } from '../helpers/service.js';
import { SoftAuthenticator } from '../helpers/webauthn.js';

// Signed-tier approvals end to end: a person registers an authenticator, fetches the challenge of
// one approval, and decides it with the assertion; the decision's audit event carries the
// assertion, and every way of reusing, forging or borrowing one is refused.

const RP_ID = 'govgate.test';
const ORIGIN = 'https://console.govgate.test';

async function setup(t: Test): Promise<{
  svc: TestService;
  ask: (amount: number) => Promise<{ id: string; body: any }>;
  userPat: (role: string) => Promise<string>;
  register: (token: string, auth: SoftAuthenticator) => Promise<any>;
  challenge: (token: string, id: string) => Promise<any>;
  decide: (token: string, id: string, webauthn?: unknown) => Promise<any>;
}> {
  const svc = await startService({
    env: { SERVICE_WEBAUTHN_RP_ID: RP_ID, SERVICE_WEBAUTHN_ORIGINS: ORIGIN },
  });
  t.teardown(() => svc.close());
  await publishOrgPolicy(svc, 'wires', {
    rules: [
      {
        id: 'wires',
        when: { type: 'TOOL_CALL', tool: 'payments.wire' },
        then: 'require_approval',
        tier: 'signed',
        reason: 'wires need a signed approval',
      },
    ],
  });
  const action = (amount: number) => ({
    type: 'TOOL_CALL',
    payload: { tool: 'payments.wire', args: { amount } },
  });
  return {
    svc,
    async ask(amount) {
      const r = await svc.call('/v1/govern', { token: svc.agentKey, body: action(amount) });
      if (r.body.outcome !== 'needs_approval') throw new Error(JSON.stringify(r.body));
      return { id: r.body.approval.request_id, body: r.body };
    },
    async userPat(role) {
      const u = await svc.call('/api/users', { token: svc.pat, body: { email: `${role}@wires.test`, role } });
      const tok = await svc.call('/api/tokens', { token: svc.pat, body: { user_id: u.body.user_id } });
      return tok.body.token;
    },
    async register(token, auth) {
      const options = await svc.call('/api/me/webauthn/register/options', { token, body: {} });
      if (options.status !== 200) return options;
      return svc.call('/api/me/webauthn/register/verify', {
        token,
        body: { response: auth.register(options.body), name: 'laptop' },
      });
    },
    challenge: (token, id) => svc.call(`/v1/me/approvals/${id}/challenge`, { token }),
    decide: (token, id, webauthn) =>
      svc.call(`/v1/me/approvals/${id}/decide`, {
        token,
        body: webauthn === undefined ? { decision: 'approve' } : { decision: 'approve', webauthn },
      }),
  };
}

async function auditEvents(svc: TestService, type: string): Promise<any[]> {
  return (await svc.call(`/api/audit?event_type=${type}`, { token: svc.pat })).body.data;
}

t.test('a signed-tier approval is decided with an assertion over its own challenge', async (t) => {
  const s = await setup(t);
  const { svc } = s;
  const asked = await s.ask(5000);
  t.equal(asked.body.approval.tier, 'signed');
  const plain = await s.decide(svc.pat, asked.id);
  t.equal(plain.status, 403);
  t.equal(plain.body.error.code, 'webauthn_required');
  t.match(plain.body.error.message, /challenge/);

  const noAuthenticator = await s.challenge(svc.pat, asked.id);
  t.equal(noAuthenticator.status, 409, 'a challenge needs a registered authenticator');
  t.match(noAuthenticator.body.error.message, /register/);

  const auth = new SoftAuthenticator(RP_ID, ORIGIN);
  const registered = await s.register(svc.pat, auth);
  t.equal(registered.status, 201, JSON.stringify(registered.body));
  t.equal(registered.body.credential_id, auth.id);
  t.equal(registered.body.name, 'laptop');
  const listed = await svc.call('/api/me/webauthn/credentials', { token: svc.pat });
  t.same(
    listed.body.data.map((c: { credential_id: string }) => c.credential_id),
    [auth.id],
  );
  const [regEvent] = await auditEvents(svc, 'admin.webauthn_registered');
  t.equal(regEvent?.details.credential_id, auth.id);
  t.ok(regEvent?.details.public_key, 'the public key is on the trail');

  const challenge = await s.challenge(svc.pat, asked.id);
  t.equal(challenge.status, 200);
  t.match(challenge.body, { rpId: RP_ID, userVerification: 'required', timeout: 300000 });
  t.same(
    challenge.body.allowCredentials.map((c: { id: string }) => c.id),
    [auth.id],
  );
  const assertion = auth.assert(challenge.body);
  const decided = await s.decide(svc.pat, asked.id, assertion);
  t.equal(decided.status, 200, JSON.stringify(decided.body));
  t.equal(decided.body.status, 'approved');

  // The decision's event carries the assertion: the challenge it signed, the counter, UV.
  const [event] = await auditEvents(svc, 'approval.decided');
  const evidence = event?.details.webauthn;
  t.match(evidence, { credential_id: auth.id, sign_count: 1, user_verified: true });
  const clientData = JSON.parse(Buffer.from(evidence.client_data_json, 'base64url').toString());
  t.equal(clientData.type, 'webauthn.get');
  t.equal(clientData.origin, ORIGIN);
  t.equal(clientData.challenge, challenge.body.challenge);
  t.equal(evidence.challenge_sha256, createHash('sha256').update(challenge.body.challenge).digest('hex'));
  // What the signed challenge commits to, recomputed from the event alone (api.md "Signed tier").
  const binding = evidence.challenge_binding;
  t.match(binding, {
    scheme: 'govgate-approval-decision-v1',
    approval_id: asked.id,
    fingerprint: event.details.fingerprint,
    decision: 'any',
  });
  const recomputed = Buffer.concat([
    Buffer.from(binding.nonce, 'base64url'),
    createHash('sha256')
      .update(
        `${binding.scheme}\n${binding.approval_id}\n${binding.fingerprint}\n${binding.decision}\n${binding.nonce}\n`,
      )
      .digest(),
  ]).toString('base64url');
  t.equal(recomputed, clientData.challenge, 'the signature covers the approval and its action');

  // The identical call is allowed once.
  const again = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'payments.wire', args: { amount: 5000 } } },
  });
  t.equal(again.body.outcome, 'allow');

  // The same assertion again, for another approval: its challenge was used up, and was another's.
  const next = await s.ask(7000);
  const replayed = await s.decide(svc.pat, next.id, assertion);
  t.equal(replayed.status, 403);
  t.equal(replayed.body.error.code, 'webauthn_required');
  t.match(replayed.body.error.message, /no challenge is open/);
});

t.test('forged, borrowed and cloned assertions are refused', async (t) => {
  const s = await setup(t);
  const { svc } = s;
  const auth = new SoftAuthenticator(RP_ID, ORIGIN);
  t.equal((await s.register(svc.pat, auth)).status, 201);
  const a = await s.ask(1);
  const b = await s.ask(2);

  // A challenge fetched for one approval does not decide another.
  const forA = await s.challenge(svc.pat, a.id);
  const crossed = await s.decide(svc.pat, b.id, auth.assert(forA.body));
  t.equal(crossed.status, 403, "another approval's challenge");
  // B decided properly: the authenticator's counter is now on record.
  const forB = await s.challenge(svc.pat, b.id);
  t.equal((await s.decide(svc.pat, b.id, auth.assert(forB.body))).status, 200);
  const recorded = auth.counter;

  const refused = async (what: string, make: (c: any) => unknown) => {
    const c = await s.challenge(svc.pat, a.id);
    const r = await s.decide(svc.pat, a.id, make(c.body));
    t.equal(r.status, 403, what);
    t.equal(r.body.error?.code, 'webauthn_required', what);
    t.equal((await svc.call(`/v1/me/approvals/${a.id}`, { token: svc.pat })).body.status, 'pending');
  };
  await refused('another origin', (c) => auth.assert(c, 'https://evil.test'));
  await refused('a tampered signature', (c) => {
    const x = auth.assert(c) as { response: { signature: string } };
    const sig = Buffer.from(x.response.signature, 'base64url');
    sig[sig.length - 1] = (sig[sig.length - 1] as number) ^ 1;
    x.response.signature = sig.toString('base64url');
    return x;
  });
  auth.flags = 0x01;
  await refused('no user verification', (c) => auth.assert(c));
  auth.flags = 0x05;
  auth.counter = recorded - 1;
  await refused('a counter that did not move on (a cloned authenticator)', (c) => auth.assert(c));
  auth.counter = recorded + 10;
  const stranger = new SoftAuthenticator(RP_ID, ORIGIN);
  await refused('an authenticator not registered', (c) => stranger.assert(c));
  await refused('not an assertion', () => ({ nope: true }));

  // A challenge asked for one decision signs that decision only.
  const forDeny = await svc.call(`/v1/me/approvals/${a.id}/challenge?decision=deny`, { token: svc.pat });
  t.equal(forDeny.status, 200);
  const swapped = await s.decide(svc.pat, a.id, auth.assert(forDeny.body));
  t.equal(swapped.status, 403, 'approved with a challenge for a denial');
  t.match(swapped.body.error.message, /issued for the decision deny, not approve/);
  t.equal(
    (await svc.call(`/v1/me/approvals/${a.id}/challenge?decision=maybe`, { token: svc.pat })).status,
    400,
  );
  const forApprove = await svc.call(`/v1/me/approvals/${a.id}/challenge?decision=approve`, {
    token: svc.pat,
  });
  const bound = await s.decide(svc.pat, a.id, auth.assert(forApprove.body));
  t.equal(bound.status, 200, 'and decides it');
  const [last] = await auditEvents(svc, 'approval.decided');
  t.equal(last?.details.webauthn.challenge_binding.decision, 'approve');

  // Another person's authenticator: registered to the super_admin, used by a developer.
  const c = await s.ask(3);
  const dev = await s.userPat('developer');
  const devChallenge = await s.challenge(dev, c.id);
  t.equal(devChallenge.status, 409, 'the developer has no authenticator of their own');
  t.equal(devChallenge.body.error.code, 'conflict');
  const other = new SoftAuthenticator(RP_ID, ORIGIN);
  t.equal((await s.register(dev, other)).status, 201);
  const theirs = await s.challenge(dev, c.id);
  const borrowed = await s.decide(dev, c.id, auth.assert(theirs.body));
  t.equal(borrowed.status, 403, "someone else's authenticator");
  const own = await s.challenge(dev, c.id);
  const ok = await s.decide(dev, c.id, other.assert(own.body));
  t.equal(ok.status, 200, 'their own works');
});

t.test('roles, registration errors and removing an authenticator', async (t) => {
  const s = await setup(t);
  const { svc } = s;
  const asked = await s.ask(3);
  t.equal((await s.challenge(svc.agentKey, asked.id)).status, 403, 'an agent key signs nothing');
  const requester = await s.userPat('requester');
  t.equal((await s.register(requester, new SoftAuthenticator(RP_ID, ORIGIN))).status, 403);
  t.equal((await s.challenge(requester, asked.id)).status, 403);
  t.equal((await s.challenge(svc.pat, 'apr_missing')).status, 404);

  // A response without options first, one for another RP id, and a body that is not one.
  const auth = new SoftAuthenticator(RP_ID, ORIGIN);
  const early = await svc.call('/api/me/webauthn/register/verify', {
    token: svc.pat,
    body: { response: auth.register({ challenge: 'AAAA' }) },
  });
  t.equal(early.status, 400);
  t.match(early.body.error.message, /no registration is under way/);
  const wrongRp = await s.register(svc.pat, new SoftAuthenticator('elsewhere.test', ORIGIN));
  t.equal(wrongRp.status, 400);
  t.equal(wrongRp.body.error.param, 'response');
  await svc.call('/api/me/webauthn/register/options', { token: svc.pat, body: {} });
  const junk = await svc.call('/api/me/webauthn/register/verify', {
    token: svc.pat,
    body: { response: { id: 'x' }, extra: 1 },
  });
  t.equal(junk.status, 400, 'strict body');

  t.equal((await s.register(svc.pat, auth)).status, 201);
  t.equal((await s.register(svc.pat, auth)).status, 409, 'the same authenticator twice');
  const removed = await svc.call(`/api/me/webauthn/credentials/${auth.id}`, {
    method: 'DELETE',
    token: svc.pat,
  });
  t.same(removed.body, { credential_id: auth.id, removed: true });
  t.equal(
    (await svc.call(`/api/me/webauthn/credentials/${auth.id}`, { method: 'DELETE', token: svc.pat })).status,
    404,
  );
  t.equal((await s.challenge(svc.pat, asked.id)).status, 409, 'no authenticator left');
  const [event] = await auditEvents(svc, 'admin.webauthn_removed');
  t.equal(event?.details.credential_id, auth.id);
});

t.test('without WebAuthn settings: the RP id and origin of SERVICE_PUBLIC_URL', async (t) => {
  const svc = await startService({ env: { SERVICE_PUBLIC_URL: 'https://gw.example.test/govgate' } });
  t.teardown(() => svc.close());
  const register = async (auth: SoftAuthenticator) => {
    const options = await svc.call('/api/me/webauthn/register/options', { token: svc.pat, body: {} });
    t.equal(options.body.rp.id, 'gw.example.test');
    return svc.call('/api/me/webauthn/register/verify', {
      token: svc.pat,
      body: { response: auth.register(options.body) },
    });
  };
  t.equal((await register(new SoftAuthenticator('gw.example.test', 'https://gw.example.test'))).status, 201);
  const elsewhere = await register(new SoftAuthenticator('gw.example.test', 'https://console.example.test'));
  t.equal(elsewhere.status, 400, 'another origin is not accepted by default');
});

/**
 * The counter check and the removal check hold under concurrency: the record is read again and
 * the counter set in the same commit. Four assertions with one counter decided four approvals
 * at once, two crossing counters left the lower one on record, and an authenticator removed while
 * its assertion was being checked came back (its record rewritten) and went on signing.
 */
t.test('concurrent assertions: one counter signs once; a removed authenticator signs nothing', async (t) => {
  const s = await setup(t);
  const { svc } = s;
  const auth = new SoftAuthenticator(RP_ID, ORIGIN);
  t.equal((await s.register(svc.pat, auth)).status, 201);
  const asks = await Promise.all([1, 2, 3, 4].map((n) => s.ask(n)));
  const challenges = await Promise.all(asks.map((a) => s.challenge(svc.pat, a.id)));
  auth.counter = 4; // each assertion below carries 5
  const assertions = challenges.map((c) => {
    const x = auth.assert(c.body);
    auth.counter = 4;
    return x;
  });
  const decided = await Promise.all(asks.map((a, i) => s.decide(svc.pat, a.id, assertions[i])));
  t.same(
    decided.map((r) => r.status).sort(),
    [200, 403, 403, 403],
    'one counter value decides one approval; the others look like a clone',
  );

  // Crossing counters: the higher one stays on record, whichever commits last.
  const [x, y] = await Promise.all([s.ask(5), s.ask(6)]);
  const [cx, cy] = await Promise.all([s.challenge(svc.pat, x.id), s.challenge(svc.pat, y.id)]);
  auth.counter = 20;
  const high = auth.assert(cx.body); // 21
  auth.counter = 19;
  const low = auth.assert(cy.body); // 20
  const both = await Promise.all([s.decide(svc.pat, x.id, high), s.decide(svc.pat, y.id, low)]);
  t.equal(both[0].status, 200, 'the higher counter');
  const z = await s.ask(7);
  auth.counter = 20; // asserts 21 again: 21 is on record, whichever of the two committed last
  t.equal(
    (await s.decide(svc.pat, z.id, auth.assert((await s.challenge(svc.pat, z.id)).body))).status,
    403,
    'the record kept the higher counter',
  );

  // Removed while an assertion is checked: the decision is refused and the record stays gone.
  const w = await s.ask(8);
  auth.counter = 100;
  const late = auth.assert((await s.challenge(svc.pat, w.id)).body);
  const [decide, removed] = await Promise.all([
    s.decide(svc.pat, w.id, late),
    svc.call(`/api/me/webauthn/credentials/${auth.id}`, { token: svc.pat, method: 'DELETE' }),
  ]);
  t.equal(removed.status, 200);
  t.equal(decide.status, 403, 'a removed authenticator signs nothing');
  const after = await svc.call('/api/me/webauthn/credentials', { token: svc.pat });
  t.same(after.body.data, [], 'and is not written back');
});

/**
 * A pre-approval is of the standard tier: it cannot stand in for a signed decision. It answered
 * `approved: true` and changed nothing (the call still needed its signed approval).
 */
t.test('pre-approving an action whose approval is signed-tier is refused', async (t) => {
  const s = await setup(t);
  const { svc } = s;
  const asked = await s.ask(9);
  const pre = await svc.call('/v1/govern/approve', {
    token: svc.pat,
    body: { agent_id: 'default-agent', tool: 'payments.wire', args: { amount: 9 } },
  });
  t.equal(pre.status, 403, JSON.stringify(pre.body));
  t.equal(pre.body.error?.code, 'webauthn_required');
  t.match(pre.body.error?.message, new RegExp(asked.id));
  const still = await svc.call(`/v1/me/approvals/${asked.id}`, { token: svc.pat });
  t.equal(still.body.status, 'pending', 'the signed approval waits for its decision');
  const mine = await svc.call('/api/approvals?status=approved', { token: svc.pat });
  t.equal(mine.body.data?.length ?? 0, 0, 'no standard approval was made');
});

/** Cancelling ends a request as a denial does: at the signed tier a person must deny it, signed. */
t.test('a person cannot cancel a signed-tier request; the agent that asked can', async (t) => {
  const s = await setup(t);
  const { svc } = s;
  const first = await s.ask(10);
  const cancel = (token: string, id: string) =>
    svc.call(`/v1/me/approvals/${id}/cancel`, { token, method: 'POST', body: {} });
  const byPerson = await cancel(svc.pat, first.id);
  t.equal(byPerson.status, 403, JSON.stringify(byPerson.body));
  t.equal(byPerson.body.error?.code, 'webauthn_required');
  t.equal((await svc.call(`/v1/me/approvals/${first.id}`, { token: svc.pat })).body.status, 'pending');
  const byAgent = await cancel(svc.agentKey, first.id);
  t.equal(byAgent.status, 200, 'its owner withdraws it');
  t.equal(byAgent.body.status, 'cancelled');
});

/** A refusal says what was wrong, not the value that would have passed (the expected challenge). */
t.test('a refused registration does not quote the challenge it expected', async (t) => {
  const s = await setup(t);
  const { svc } = s;
  const auth = new SoftAuthenticator(RP_ID, ORIGIN);
  const options = await svc.call('/api/me/webauthn/register/options', { token: svc.pat, body: {} });
  t.equal(options.status, 200);
  const wrong = await svc.call('/api/me/webauthn/register/verify', {
    token: svc.pat,
    body: { response: auth.register({ challenge: 'abc' }), name: 'laptop' },
  });
  t.equal(wrong.status, 400);
  t.match(wrong.body.error.message, /challenge/, 'it says the challenge is wrong');
  t.notMatch(wrong.body.error.message, options.body.challenge, 'without quoting the one expected');
});
