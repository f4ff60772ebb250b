import t from 'tap';
import { publishOrgPolicy, startService } from '../helpers/service.js';

// Spec 2.7 and 6.1: a detection is appended to the trail, and PII found is a pii_detected event
// (agent, entity types, the action taken). A governed action's payload is scanned as a model
// call's prompt is, so PII in it is recorded the same way, in the decision's pipeline.

const eventsOf = async (svc: Awaited<ReturnType<typeof startService>>, pipeline: string) => {
  const res = await svc.call(`/api/audit/pipeline/${pipeline}`, { token: svc.pat });
  return res.body.data as any[];
};

t.test('PII in a governed action is a pii_detected event, with the action taken', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const govern = (args: Record<string, unknown>, headers: Record<string, string> = {}) =>
    svc.call('/v1/govern', {
      token: svc.agentKey,
      headers,
      body: { type: 'TOOL_CALL', payload: { tool: 'crm.update', args } },
    });

  // The default policy redacts PII: the action is allowed, with a redact obligation.
  const allowed = await govern({ email: 'jane.roe@example.com', note: 'card 4111 1111 1111 1111' });
  t.equal(allowed.body.outcome, 'allow');
  let events = await eventsOf(svc, allowed.body.pipeline_id);
  let pii = events.find((e) => e.event_type === 'pii_detected');
  t.ok(pii, events.map((e) => e.event_type).join(' '));
  t.equal(pii.agent_id, 'default-agent');
  t.equal(pii.behavior_type, 'TOOL_CALL');
  t.equal(pii.session_id, allowed.body.session_id);
  t.same([...pii.details.entity_types].sort(), ['card', 'email']);
  t.match(pii.details, {
    stage: 'input',
    action: 'allowed',
    obligation: 'redact',
    credential_id: /^key_/,
  });
  t.equal(pii.outcome, 'allowed');
  t.notMatch(JSON.stringify(pii), /jane\.roe|4111/, 'the kinds of what was found, never the values');

  // Without PII, no pii_detected event.
  const clean = await govern({ id: 'c-1' });
  events = await eventsOf(svc, clean.body.pipeline_id);
  t.same(
    events.map((e) => e.event_type),
    ['govern.decision'],
  );

  // A policy that blocks on PII: the action taken is `blocked`.
  await publishOrgPolicy(svc, 'pii-block', { detectors: { pii: { action: 'block' } }, rules: [] });
  const blocked = await govern({ email: 'jane.roe@example.com' });
  t.equal(blocked.body.outcome, 'block');
  events = await eventsOf(svc, blocked.body.pipeline_id);
  pii = events.find((e) => e.event_type === 'pii_detected');
  t.match(pii?.details, { entity_types: ['email'], action: 'blocked', obligation: null });
});
