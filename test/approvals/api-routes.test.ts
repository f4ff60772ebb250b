import t from 'tap';
import { createOrg, publishOrgPolicy, startService } from '../helpers/service.js';

/**
 * Spec 4.4: `/api/approvals` is approval workflow management on the control plane: besides the
 * list, one approval and its decide, cancel and revoke, for people (agent keys are refused, as
 * everywhere on /api), with strict bodies.
 */
t.test('/api/approvals/{id}: read, decide, cancel and revoke on the control plane', async (t) => {
  const svc = await startService({});
  t.teardown(() => svc.close());
  await publishOrgPolicy(svc, 'refunds', {
    rules: [
      { id: 'refunds', when: { type: 'TOOL_CALL', tool: 'payments.refund' }, then: 'require_approval' },
    ],
  });
  const ask = async (amount: number): Promise<string> => {
    const asked = await svc.call('/v1/govern', {
      token: svc.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool: 'payments.refund', args: { amount } } },
    });
    t.equal(asked.body.outcome, 'needs_approval');
    return asked.body.approval.request_id as string;
  };
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
});
