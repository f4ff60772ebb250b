import t from 'tap';
import { createOrg, publishOrgPolicy, startService } from '../helpers/service.js';

/**
 * `/v1/govern/execution` records how a governed action went, only for a pipeline this agent
 * governed, and only when its decision allowed the action (test-plan: the F4 review finding).
 */
t.test('an execution is recorded only for an allowed action the agent itself governed', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  await publishOrgPolicy(svc, 'exec', {
    rules: [
      { id: 'no-shell', when: { type: 'TOOL_CALL', tool: 'shell.exec' }, then: 'block', reason: 'no shell' },
      {
        id: 'refunds',
        when: { type: 'TOOL_CALL', tool: 'payments.refund' },
        then: 'require_approval',
        reason: 'refunds need a human',
      },
    ],
  });
  const onboarded = await svc.call('/api/agents/onboard', { token: svc.pat, body: { agent_id: 'agent-b' } });
  const keyB = onboarded.body.api_key.api_key as string;
  const other = await createOrg(svc, 'elsewhere');

  const govern = (token: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
    svc.call('/v1/govern', { token, headers, body: { type: 'TOOL_CALL', payload } });
  const report = (token: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    svc.call('/v1/govern/execution', { token, headers, body });
  const view = async (
    pipelineId: string,
  ): Promise<{ event_type: string; agent_id: string; outcome: string }[]> => {
    const res = await svc.call(`/api/audit/pipeline/${pipelineId}`, { token: svc.pat });
    return res.status === 404 ? [] : res.body.data;
  };
  const types = async (pipelineId: string): Promise<string[]> =>
    (await view(pipelineId)).map((e) => e.event_type);

  const allowed = await govern(
    svc.agentKey,
    { tool: 'crm.lookup', args: { id: 'c-1' } },
    {
      'x-session-id': 'ticket-42',
    },
  );
  t.equal(allowed.body.outcome, 'allow');
  const blocked = await govern(
    svc.agentKey,
    { tool: 'shell.exec', args: { cmd: 'rm -rf /' } },
    {
      'x-session-id': 'ticket-42',
    },
  );
  t.equal(blocked.body.outcome, 'block');

  t.test('own allowed pipeline: recorded, in its pipeline and session', async (t) => {
    const res = await report(svc.agentKey, {
      pipeline_id: allowed.body.pipeline_id,
      ok: true,
      output_text: 'found c-1',
      duration_ms: 7,
    });
    t.equal(res.status, 200, JSON.stringify(res.body));
    t.equal(res.body.recorded, true);
    const event = (await view(allowed.body.pipeline_id)).find(
      (e) => e.event_type === 'govern.execution',
    ) as any;
    t.ok(event, 'the execution is in the pipeline view');
    t.equal(event.id, res.body.event_id);
    t.equal(event.agent_id, 'default-agent');
    t.equal(event.outcome, 'ok');
    t.equal(event.session_id, 'ticket-42', "the decision's session, though the report named none");
    t.equal(event.details.decision_event_id, allowed.body.details.event_id);
    // Naming the decision's own session is fine too; a failed run is recorded as such.
    const again = await report(svc.agentKey, {
      pipeline_id: allowed.body.pipeline_id,
      session_id: 'ticket-42',
      ok: false,
    });
    t.equal(again.status, 200, JSON.stringify(again.body));
    const session = await svc.call('/api/audit/session/ticket-42', { token: svc.pat });
    t.same(
      session.body.data.filter((e: any) => e.event_type === 'govern.execution').map((e: any) => e.outcome),
      ['ok', 'failed'],
    );
  });

  t.test('an admin acting for the agent reports on its pipeline', async (t) => {
    const res = await report(
      svc.pat,
      { pipeline_id: allowed.body.pipeline_id, ok: true },
      { 'x-agent-id': 'default-agent' },
    );
    t.equal(res.status, 200, JSON.stringify(res.body));
    const asB = await report(
      svc.pat,
      { pipeline_id: allowed.body.pipeline_id, ok: true },
      { 'x-agent-id': 'agent-b' },
    );
    t.equal(asB.status, 404, 'acting for another agent does not reach it');
  });

  t.test('own blocked pipeline: refused, and the refused report is audited', async (t) => {
    const res = await report(svc.agentKey, {
      pipeline_id: blocked.body.pipeline_id,
      ok: true,
      output_text: 'deleted everything',
    });
    t.equal(res.status, 409, JSON.stringify(res.body));
    t.equal(res.body.error.code, 'conflict');
    t.equal(res.body.error.param, 'pipeline_id');
    t.match(res.body.error.message, /not allowed/);
    const events = await view(blocked.body.pipeline_id);
    t.notOk(
      events.some((e) => e.event_type === 'govern.execution'),
      'no execution is recorded for a blocked action',
    );
    const refused = events.find((e) => e.event_type === 'govern.execution_refused') as any;
    t.ok(refused, 'the refusal is in the pipeline view');
    t.equal(refused.agent_id, 'default-agent');
    t.equal(refused.outcome, 'block');
    t.equal(refused.session_id, 'ticket-42');
    t.equal(refused.details.decision_outcome, 'block');
    t.equal(refused.details.ok, true, 'what the agent claimed');
    t.equal(refused.details.decision_event_id, blocked.body.details.event_id);
  });

  t.test('needs_approval: refused, also once approved (the allowed re-govern is what runs)', async (t) => {
    const payload = { tool: 'payments.refund', args: { amount: 250 } };
    const asked = await govern(svc.agentKey, payload);
    t.equal(asked.body.outcome, 'needs_approval');
    const pending = await report(svc.agentKey, { pipeline_id: asked.body.pipeline_id, ok: true });
    t.equal(pending.status, 409, JSON.stringify(pending.body));
    const decided = await svc.call(`/v1/me/approvals/${asked.body.approval.request_id}/decide`, {
      token: svc.pat,
      body: { decision: 'approve' },
    });
    t.equal(decided.status, 200, JSON.stringify(decided.body));
    const stillRefused = await report(svc.agentKey, { pipeline_id: asked.body.pipeline_id, ok: true });
    t.equal(stillRefused.status, 409, 'the needs_approval pipeline itself never allowed the action');
    const rerun = await govern(svc.agentKey, payload);
    t.equal(rerun.body.outcome, 'allow');
    const ok = await report(svc.agentKey, { pipeline_id: rerun.body.pipeline_id, ok: true });
    t.equal(ok.status, 200, JSON.stringify(ok.body));
    t.equal((await types(asked.body.pipeline_id)).filter((x) => x === 'govern.execution_refused').length, 2);
  });

  t.test("another agent's or org's pipeline is reported missing, and nothing is written there", async (t) => {
    const before = await types(allowed.body.pipeline_id);
    const blockedBefore = await types(blocked.body.pipeline_id);
    for (const pipeline of [allowed.body.pipeline_id, blocked.body.pipeline_id]) {
      const res = await report(keyB, { pipeline_id: pipeline, ok: false, output_text: 'B was here' });
      t.equal(res.status, 404, JSON.stringify(res.body));
      t.equal(res.body.error.code, 'not_found');
      t.equal(res.body.error.param, 'pipeline_id');
      const elsewhere = await report(other.agentKey, { pipeline_id: pipeline, ok: true });
      t.equal(elsewhere.status, 404, JSON.stringify(elsewhere.body));
    }
    t.same(await types(allowed.body.pipeline_id), before, 'the allowed pipeline is unchanged');
    t.same(await types(blocked.body.pipeline_id), blockedBefore, 'the blocked pipeline is unchanged');
    const agentB = await svc.call('/api/audit?agent_id=agent-b', { token: svc.pat });
    t.same(
      agentB.body.data.filter((e: any) => e.event_type.startsWith('govern.execution')),
      [],
      'nothing written under agent-b either',
    );
    // The same message as for a pipeline never governed: nothing tells them apart.
    const unknown = await report(keyB, { pipeline_id: 'pl_never_governed', ok: true });
    const foreign = await report(keyB, { pipeline_id: allowed.body.pipeline_id, ok: true });
    t.equal(
      foreign.body.error.message.replace(allowed.body.pipeline_id, 'X'),
      unknown.body.error.message.replace('pl_never_governed', 'X'),
    );
  });

  t.test('an unknown pipeline, or one with no govern decision, is 404', async (t) => {
    const res = await report(svc.agentKey, { pipeline_id: 'pl_never_governed', ok: true });
    t.equal(res.status, 404, JSON.stringify(res.body));
    t.equal(res.body.error.code, 'not_found');
    t.equal(res.body.error.param, 'pipeline_id');
    t.same(await types('pl_never_governed'), [], 'nothing written');
    // A model call's pipeline has events but no govern decision.
    const chat = await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hi' }] },
    });
    t.equal(chat.status, 200, JSON.stringify(chat.body));
    const pl = new URL(chat.body.service.audit_url).pathname.split('/').at(-1) as string;
    const beforeChat = await types(pl);
    t.ok(beforeChat.length > 0);
    const onChat = await report(svc.agentKey, { pipeline_id: pl, ok: true });
    t.equal(onChat.status, 404, JSON.stringify(onChat.body));
    t.same(await types(pl), beforeChat);
  });

  t.test("a session other than the decision's is refused, nothing written", async (t) => {
    const before = await types(allowed.body.pipeline_id);
    const res = await report(svc.agentKey, {
      pipeline_id: allowed.body.pipeline_id,
      session_id: 'someone-elses-session',
      ok: true,
    });
    t.equal(res.status, 400, JSON.stringify(res.body));
    t.equal(res.body.error.code, 'invalid_request');
    t.equal(res.body.error.param, 'session_id');
    t.same(await types(allowed.body.pipeline_id), before);
    const other = await svc.call('/api/audit/session/someone-elses-session', { token: svc.pat });
    t.equal(other.status, 404, 'the named session got nothing');
  });
});
