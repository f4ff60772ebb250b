import t from 'tap';
import { publishOrgPolicy, serviceOnMockUpstream } from '../helpers/service.js';

interface Event {
  event_type: string;
  provider: string | null;
  outcome: string;
  pipeline_id: string | null;
  details: Record<string, unknown>;
}

/**
 * Spec 2.7: an LLM-call event shows which provider received data. A call stopped before the
 * provider (blocked, waiting for an approval) names none; the provider it was routed to is in
 * `details.routed_provider`. Its `pii_detected` event says the same, and so does the overview.
 */
t.test('a call the provider never received names no provider', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  await publishOrgPolicy(svc, 'pii-block', {
    mode: 'enforce',
    detectors: { pii: { action: 'block' } },
    rules: [{ id: 'approve-o', when: { type: 'LLM_CALL', model: 'gpt-approve' }, then: 'require_approval' }],
  });
  const email = 'mail jane.doe@example.com today';
  const stopped = [
    ['/v1/chat/completions', { model: 'gpt-test', messages: [{ role: 'user', content: email }] }],
    [
      '/v1/chat/completions',
      { model: 'gpt-test', stream: true, messages: [{ role: 'user', content: email }] },
    ],
    ['/v1/messages', { model: 'gpt-test', max_tokens: 10, messages: [{ role: 'user', content: email }] }],
    ['/v1/chat/completions', { model: 'gpt-approve', messages: [{ role: 'user', content: 'hi' }] }],
    ['/v1/embeddings', { model: 'text-embedding-3-small', input: email }],
  ] as const;
  const pipelines: string[] = [];
  for (const [path, body] of stopped) {
    const res = await svc.call(path, { token: svc.agentKey, body });
    t.equal(res.status, 200, `${path} ${JSON.stringify(res.body)}`);
    const pl = /pl_[A-Za-z0-9]+/.exec(typeof res.body === 'string' ? res.body : JSON.stringify(res.body));
    t.ok(pl, 'the answer names its pipeline');
    if (pl) pipelines.push(pl[0]);
  }
  t.equal(upstream.requests.length, 0, 'nothing reached the provider');

  const sent = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(sent.status, 200);
  t.equal(upstream.requests.length, 1);

  const events = (await svc.call('/api/audit?limit=1000', { token: svc.pat })).body.data as Event[];
  for (const pl of pipelines) {
    const own = events.filter((e) => e.pipeline_id === pl && e.event_type !== 'approval.created');
    const call = own.find((e) => e.event_type === 'llm_call' || e.event_type === 'embedding_call');
    t.ok(call, `${pl} recorded its call`);
    t.equal(call?.provider, null, `${call?.event_type} ${call?.outcome}: no provider received data`);
    t.equal(call?.details.routed_provider, 'openai', 'the provider it was routed to');
    for (const pii of own.filter((e) => e.event_type === 'pii_detected')) {
      t.equal(pii.provider, null, 'nor on its pii_detected event');
      t.equal(pii.outcome, 'blocked');
    }
  }
  t.equal(events.filter((e) => e.event_type === 'pii_detected').length, 4, 'four calls held an email');
  const allowed = events.find((e) => e.event_type === 'llm_call' && e.outcome === 'allow');
  t.equal(allowed?.provider, 'openai', 'a call that was sent names its provider');
  t.notOk('routed_provider' in (allowed?.details ?? {}), 'and needs no routed_provider');

  const overview = await svc.call('/api/audit/_overview', { token: svc.pat });
  t.equal(overview.status, 200);
  t.same(overview.body.by_provider, { openai: 1 }, 'the overview counts only what a provider received');
});

t.test('replay decides a call stopped by a provider rule as it was decided', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const rules = {
    mode: 'enforce',
    rules: [
      { id: 'no-openai', when: { type: ['LLM_CALL', 'EMBEDDING_CALL'], provider: 'openai' }, then: 'block' },
    ],
  };
  await publishOrgPolicy(svc, 'no-openai', rules);
  const chat = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] },
  });
  t.equal(chat.body.service.rule_id, 'no-openai');
  const emb = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    body: { model: 'text-embedding-3-small', input: 'hi' },
  });
  t.equal(emb.body.service.rule_id, 'no-openai');
  t.equal(upstream.requests.length, 0);
  const replay = await svc.call('/api/audit/replay', { token: svc.pat, body: { rules } });
  t.equal(replay.status, 200, JSON.stringify(replay.body));
  t.equal(replay.body.evaluated, 2, 'both calls re-decided');
  t.equal(replay.body.changed, 0, 'the same rules decide them the same way');
  const without = await svc.call('/api/audit/replay', { token: svc.pat, body: { rules: { rules: [] } } });
  t.equal(without.body.summary.block_to_allow, 2, 'and without the rule they would be allowed');
});
