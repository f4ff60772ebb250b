import t from 'tap';
import { publishOrgPolicy, startService } from '../helpers/service.js';

// Replay of the version in force re-decides live decisions as they were made: a model call's
// payload (its declared tools, whether it streams) and the X-Service-Flags a call carried are
// part of the decision, so replaying the same version changes nothing.

t.test('replaying the version in force reproduces live decisions', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const policyId = await publishOrgPolicy(svc, 'payload-and-flags', {
    rules: [
      {
        id: 'no-stream',
        when: { type: 'LLM_CALL', field: 'payload.stream', op: 'eq', value: true },
        then: 'block',
      },
      {
        id: 'no-del',
        when: { type: 'LLM_CALL', field: 'payload.tools', op: 'contains', value: 'delete_all' },
        then: 'block',
      },
    ],
  });
  const chat = (body: Record<string, unknown>, headers: Record<string, string> = {}) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      headers,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hi' }], ...body },
    });
  const streamed = await chat({ stream: true });
  t.equal(streamed.status, 200);
  t.match(String(streamed.body), /"blocked":true/, 'a stream is blocked live');
  const withTool = await chat({ tools: [{ type: 'function', function: { name: 'delete_all' } }] });
  t.equal(withTool.body.service.blocked, true, 'a call declaring delete_all is blocked live');
  t.equal((await chat({})).body.service.blocked, false, 'a plain call is allowed');
  // Flags tighten a decision: a tools denylist, and lockdown with an email in the args.
  const denied = await svc.call('/v1/govern', {
    token: svc.agentKey,
    headers: { 'x-service-flags': 'tools=denylist:calendar.read' },
    body: { type: 'TOOL_CALL', payload: { tool: 'calendar.read' } },
  });
  t.same([denied.body.outcome, denied.body.rule_id], ['block', 'flags:tools']);
  const locked = await svc.call('/v1/govern', {
    token: svc.agentKey,
    headers: { 'x-service-flags': 'mode=lockdown' },
    body: { type: 'TOOL_CALL', payload: { tool: 'crm.lookup', args: { email: 'alice@example.com' } } },
  });
  t.equal(locked.body.outcome, 'block');
  const plain = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'calendar.read' } },
  });
  t.equal(plain.body.outcome, 'allow');

  const replay = await svc.call('/api/audit/replay', {
    token: svc.pat,
    body: { policy_id: policyId, version_no: 1 },
  });
  t.equal(replay.status, 200, JSON.stringify(replay.body));
  t.ok(replay.body.evaluated >= 6, `evaluated ${replay.body.evaluated}`);
  t.equal(replay.body.changed, 0, JSON.stringify(replay.body.changes));
});
