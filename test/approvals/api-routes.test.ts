import t from 'tap';
import { createOrg, refundsNeedApproval, startService } from '../helpers/service.js';

/**
 * Spec 4.4: `/api/approvals` is approval workflow management on the control plane: besides the
 * list, one approval and its decide, cancel and revoke, for people (agent keys are refused, as
 * everywhere on /api), with strict bodies.
 */
t.test('/api/approvals/{id}: read, decide, cancel and revoke on the control plane', async (t) => {
  const svc = await startService({});
  t.teardown(() => svc.close());
  const ask = await refundsNeedApproval(t, svc);
  const first = await ask(1);
  const read = await svc.call(`/api/approvals/${first}`, { token: svc.pat });
  t.equal(read.status, 200);
  t.match(read.body, { id: first, status: 'pending', tool: 'payments.refund' });

  const strict = await svc.call(`/api/approvals/${first}/decide`, {
    token: svc.pat,
    body: { decision: 'approve', note: 'x' },
  });
  t.equal(strict.status, 400, 'an unknown field is refused on /api');
  t.equal(strict.body.error.param, 'note');
  const agent = await svc.call(`/api/approvals/${first}/decide`, {
    token: svc.agentKey,
    body: { decision: 'approve' },
  });
  t.equal(agent.status, 403, 'an agent key cannot decide');
  const approved = await svc.call(`/api/approvals/${first}/decide`, {
    token: svc.pat,
    body: { decision: 'approve', reason: 'ok' },
  });
  t.equal(approved.status, 200);
  t.equal(approved.body.status, 'approved');
  const again = await svc.call(`/api/approvals/${first}/decide`, {
    token: svc.pat,
    body: { decision: 'deny' },
  });
  t.equal(again.body.error?.code, 'approval_not_pending');
  const revoked = await svc.call(`/api/approvals/${first}/revoke`, { token: svc.pat, body: {} });
  t.equal(revoked.body.status, 'revoked');

  const second = await ask(2);
  const cancelled = await svc.call(`/api/approvals/${second}/cancel`, {
    token: svc.pat,
    body: { reason: 'not needed' },
  });
  t.equal(cancelled.status, 200);
  t.equal(cancelled.body.status, 'cancelled');
  const events = await svc.call('/api/audit?category=approval&limit=100', { token: svc.pat });
  const types = (events.body.data as { event_type: string }[]).map((e) => e.event_type);
  for (const type of ['approval.decided', 'approval.revoked', 'approval.cancelled'])
    t.ok(types.includes(type), `${type} recorded`);

  // Another org's approval is missing, whichever route asks.
  const other = await createOrg(svc, 'other');
  for (const [path, body] of [
    [`/api/approvals/${second}`, undefined],
    [`/api/approvals/${second}/revoke`, {}],
  ] as const) {
    const res = await svc.call(path, { token: other.adminPat, ...(body ? { body } : {}) });
    t.equal(res.status, 404, path);
  }
  t.equal((await svc.call('/api/approvals/apr_nope', { token: svc.pat })).status, 404);

  // A missing approval is 404 whether or not the decision carries a WebAuthn assertion (the
  // assertion is looked at only once there is an approval the caller may decide).
  const assertion = { id: 'x', rawId: 'x', type: 'public-key', response: {}, clientExtensionResults: {} };
  for (const path of ['/api/approvals/apr_nope/decide', '/v1/me/approvals/apr_nope/decide']) {
    const res = await svc.call(path, { token: svc.pat, body: { decision: 'approve', webauthn: assertion } });
    t.equal(res.status, 404, `${path} with an assertion`);
  }
  const requester = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'req@default.test', role: 'requester' },
  });
  const reqPat = await svc.call('/api/tokens', {
    token: svc.pat,
    body: { user_id: requester.body.user_id, name: 'r' },
  });
  const third = await ask(3);
  const byRequester = await svc.call(`/v1/me/approvals/${third}/decide`, {
    token: reqPat.body.token,
    body: { decision: 'approve', webauthn: assertion },
  });
  t.same(
    [byRequester.status, byRequester.body.error?.code],
    [403, 'forbidden'],
    'a requester: forbidden first',
  );

  // A super_admin decides, cancels and revokes another org's approvals with ?org_id=.
  const policy = await svc.call('/api/v2/policies', { token: other.adminPat, body: { name: 'ask' } });
  const draft = await svc.call(`/api/v2/policies/${policy.body.id}/versions`, {
    token: other.adminPat,
    body: { rules: { rules: [{ id: 'ask', when: { type: 'TOOL_CALL' }, then: 'require_approval' }] } },
  });
  await svc.call(`/api/v2/policies/${policy.body.id}/versions/${draft.body.version_no}/publish`, {
    token: other.adminPat,
    method: 'POST',
  });
  await svc.call(`/api/v2/policies/${policy.body.id}/assignments`, {
    token: other.adminPat,
    body: { scope_type: 'org', scope_id: other.orgId },
  });
  const theirs = async (tool: string): Promise<string> => {
    const asked = await svc.call('/v1/govern', {
      token: other.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool } },
    });
    t.equal(asked.body.outcome, 'needs_approval');
    return asked.body.approval.request_id as string;
  };
  const a = await theirs('a.one');
  t.equal(
    (await svc.call(`/api/approvals/${a}/decide`, { token: svc.pat, body: { decision: 'approve' } })).status,
    404,
    'without org_id: the own org',
  );
  const decided = await svc.call(`/api/approvals/${a}/decide?org_id=${other.orgId}`, {
    token: svc.pat,
    body: { decision: 'approve' },
  });
  t.same([decided.status, decided.body.status], [200, 'approved']);
  const revokedThere = await svc.call(`/api/approvals/${a}/revoke?org_id=${other.orgId}`, {
    token: svc.pat,
    body: {},
  });
  t.same([revokedThere.status, revokedThere.body.status], [200, 'revoked']);
  const b = await theirs('b.two');
  const cancelledThere = await svc.call(`/api/approvals/${b}/cancel?org_id=${other.orgId}`, {
    token: svc.pat,
    body: {},
  });
  t.same([cancelledThere.status, cancelledThere.body.status], [200, 'cancelled']);
  const notSuper = await svc.call(`/api/approvals/${b}/cancel?org_id=default`, {
    token: other.adminPat,
    body: {},
  });
  t.equal(notSuper.status, 403, 'only a super_admin names another org');
});
