import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

t.test(
  'the per-call budget blocks calls that may cost more, fails closed, and costs are recorded',
  async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t);
    const created = await svc.call('/api/v2/policies', { token: svc.pat, body: { name: 'budget' } });
    const draft = await svc.call(`/api/v2/policies/${created.body.id}/versions`, {
      token: svc.pat,
      body: { rules: { mode: 'enforce', budget: { max_usd_per_call: 0.0001 }, rules: [] } },
    });
    t.equal(draft.status, 201, JSON.stringify(draft.body));
    await svc.call(`/api/v2/policies/${created.body.id}/versions/${draft.body.version_no}/publish`, {
      token: svc.pat,
      method: 'POST',
    });
    await svc.call(`/api/v2/policies/${created.body.id}/assignments`, {
      token: svc.pat,
      body: { scope_type: 'org', scope_id: 'default' },
    });
    const chat = (model: string, maxTokens: number, headers?: Record<string, string>) =>
      svc.call('/v1/chat/completions', {
        token: svc.agentKey,
        headers,
        body: { model, max_tokens: maxTokens, messages: [{ role: 'user', content: 'hi' }] },
      });

    upstream.requests.length = 0;
    const small = await chat('gpt-4o-mini', 100);
    t.equal(small.body.service.blocked, false, 'a call within the budget runs');
    const events = await svc.call(new URL(small.body.service.audit_url).pathname, { token: svc.pat });
    const call = events.body.data.find((e: { event_type: string }) => e.event_type === 'llm_call');
    t.ok(call.cost > 0 && call.cost < 0.0001, `the call's cost is recorded (${call.cost})`);

    const big = await chat('gpt-4o-mini', 10_000);
    t.equal(big.body.service.blocked, true, 'a call that may cost more is blocked');
    t.equal(big.body.service.rule_id, 'budget');
    t.match(big.body.service.reason, /over the budget/);

    // Both limits given: the larger is what a provider may honour (Anthropic is sent
    // max_completion_tokens first), so that is what is priced.
    for (const body of [
      { max_tokens: 100, max_completion_tokens: 10_000 },
      { max_tokens: 10_000, max_completion_tokens: 100 },
    ]) {
      const both = await svc.call('/v1/chat/completions', {
        token: svc.agentKey,
        body: { model: 'gpt-4o-mini', ...body, messages: [{ role: 'user', content: 'hi' }] },
      });
      t.equal(both.body.service.blocked, true, `priced at the larger limit: ${JSON.stringify(body)}`);
    }

    // Every choice may write up to the limit: 100 tokens within budget, 50 choices of them not.
    const many = await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'gpt-4o-mini', max_tokens: 100, n: 50, messages: [{ role: 'user', content: 'hi' }] },
    });
    t.equal(many.body.service.blocked, true, 'n choices are priced n times');
    t.equal(many.body.service.rule_id, 'budget');
    for (const n of [0, 129, 1.5, '8']) {
      const bad = await svc.call('/v1/chat/completions', {
        token: svc.agentKey,
        body: { model: 'gpt-4o-mini', max_tokens: 10, n, messages: [{ role: 'user', content: 'hi' }] },
      });
      t.equal(bad.status, 400, `n ${JSON.stringify(n)}`);
      t.equal(bad.body.error.param, 'n');
    }

    const unpriced = await chat('gpt-test', 10);
    t.equal(unpriced.body.service.blocked, true, 'an unpriced model cannot be checked: fail closed');
    t.match(unpriced.body.service.reason, /no price is known/);

    // 100 completion tokens of gpt-4o-mini may cost $0.00006: over a $0.00001 flag budget.
    const tightened = await chat('gpt-4o-mini', 100, { 'x-service-flags': 'budget=0.00001' });
    t.equal(tightened.body.service.blocked, true, 'the budget flag tightens the org budget');
    const loosened = await chat('gpt-4o-mini', 10_000, { 'x-service-flags': 'budget=100' });
    t.equal(loosened.status, 200, JSON.stringify(loosened.body));
    t.equal(loosened.body.service.blocked, true, 'the flag cannot loosen a locked budget');
    t.equal(upstream.requests.length, 1, 'only the call within budget reached the provider');
  },
);
