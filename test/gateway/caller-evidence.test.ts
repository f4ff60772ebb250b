import t from 'tap';
import { publishOrgPolicy, serviceOnMockUpstream } from '../helpers/service.js';

/**
 * Every event a `/v1` call writes names the credential that made it and, when an admin acts for
 * the agent, the admin: a key minted for an agent by a human, or an admin's X-Agent-Id, must not
 * read as the agent's own call (review-evidence F1, F4).
 */
t.test('every /v1 event names the calling credential and the acting admin', async (t) => {
  const { svc } = await serviceOnMockUpstream(t);
  const onboarded = await svc.call('/api/agents/onboard', { token: svc.pat, body: { agent_id: 'ev-agent' } });
  const agentKey = onboarded.body.api_key.api_key as string;
  const keyId = onboarded.body.api_key.key_id as string;
  const minted = await svc.call('/api/tokens', { token: svc.pat, body: { name: 'acting', role: 'admin' } });
  t.equal(minted.status, 201, JSON.stringify(minted.body));
  const adminPat = minted.body.token as string;
  const tokenId = minted.body.token_id as string;
  const me = await svc.call('/api/me', { token: adminPat });
  const adminUser = (me.body.user_id ?? me.body.id) as string;
  t.ok(adminUser, JSON.stringify(me.body));

  /** Every kind of /v1 event, written with `token` (and X-Agent-Id when it is a PAT). */
  const exercise = async (token: string, headers: Record<string, string>, tag: string) => {
    const as = (extra: Record<string, string> = {}) => Object.assign({}, headers, extra);
    const chat = {
      model: 'gpt-test',
      messages: [{ role: 'user', content: `write to ${tag}@example.com please` }],
    };
    for (let i = 0; i < 2; i++) {
      const res = await svc.call('/v1/chat/completions', {
        token,
        headers: as({ 'idempotency-key': `idem-${tag}` }),
        body: chat,
      });
      t.equal(res.status, 200, JSON.stringify(res.body));
    }
    const emb = await svc.call('/v1/embeddings', {
      token,
      headers: as(),
      body: { model: 'text-embedding-3-small', input: `embed ${tag}` },
    });
    t.equal(emb.status, 200, JSON.stringify(emb.body));
    const gov = await svc.call('/v1/govern', {
      token,
      headers: as(),
      body: { type: 'TOOL_CALL', payload: { tool: 'crm.lookup', args: { id: tag } } },
    });
    t.equal(gov.body.outcome, 'allow', JSON.stringify(gov.body));
    const exec = await svc.call('/v1/govern/execution', {
      token,
      headers: as(),
      body: { pipeline_id: gov.body.pipeline_id, ok: true },
    });
    t.equal(exec.status, 200, JSON.stringify(exec.body));
    const tools = await svc.call('/v1/tools/govern', {
      token,
      headers: as(),
      body: { name: 'crm.lookup', arguments: { id: tag } },
    });
    t.equal(tools.body.outcome, 'allow');
    const refused = await svc.call('/v1/tools/execute', {
      token,
      headers: as(),
      body: { mandate: 'not-a-mandate', name: 'crm.lookup', arguments: { id: tag } },
    });
    t.equal(refused.status, 403);
  };

  const eventsAfter = async (seq: number) => {
    const res = await svc.call('/api/audit?agent_id=ev-agent&limit=1000', { token: svc.pat });
    t.equal(res.status, 200);
    return (res.body.data as { seq: number; event_type: string; details: Record<string, unknown> }[]).filter(
      (e) => e.seq > seq,
    );
  };
  const KINDS = [
    'llm_call',
    'pii_detected',
    'idempotent_replay',
    'embedding_call',
    'govern.decision',
    'govern.execution',
    'tool.execution_refused',
  ];

  await exercise(agentKey, {}, 'agent');
  const byAgent = await eventsAfter(0);
  t.same([...new Set(byAgent.map((e) => e.event_type))].sort(), [...KINDS].sort(), 'every kind was written');
  for (const e of byAgent) {
    t.equal(e.details.credential_id, keyId, `${e.event_type}: the agent's key`);
    t.equal(e.details.acting_admin, null, `${e.event_type}: no admin`);
  }

  const last = Math.max(...byAgent.map((e) => e.seq));
  await exercise(adminPat, { 'x-agent-id': 'ev-agent' }, 'admin');
  const byAdmin = await eventsAfter(last);
  t.same([...new Set(byAdmin.map((e) => e.event_type))].sort(), [...KINDS].sort(), 'every kind was written');
  for (const e of byAdmin) {
    t.equal(e.details.credential_id, tokenId, `${e.event_type}: the admin's token`);
    t.equal(e.details.acting_admin, adminUser, `${e.event_type}: the admin acting for the agent`);
  }

  // An approval a call asks for names the credential of that call: whoever minted the key and
  // decides the approval shows as one person in the chain.
  await publishOrgPolicy(svc, 'refunds', {
    rules: [
      { id: 'refunds', when: { type: 'TOOL_CALL', tool: 'payments.refund' }, then: 'require_approval' },
    ],
  });
  const requested = new Map<string, string>();
  for (const [token, headers, expected, amount] of [
    [agentKey, {}, keyId, 1],
    [adminPat, { 'x-agent-id': 'ev-agent' }, tokenId, 2],
  ] as const) {
    const asked = await svc.call('/v1/govern', {
      token,
      headers,
      body: { type: 'TOOL_CALL', payload: { tool: 'payments.refund', args: { amount } } },
    });
    t.equal(asked.body.outcome, 'needs_approval', JSON.stringify(asked.body));
    requested.set(asked.body.approval.request_id, expected);
  }
  t.equal(requested.size, 2, 'two calls, two approvals');
  const created = await svc.call('/api/audit?event_type=approval.created&limit=100', { token: svc.pat });
  for (const [id, expected] of requested) {
    const event = (created.body.data as { details: Record<string, unknown> }[]).find(
      (e) => e.details.approval_id === id,
    );
    t.equal(event?.details.request_credential_id, expected, `approval ${id}: the requesting credential`);
  }
});
