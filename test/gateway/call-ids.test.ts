import t from 'tap';
import { ENGINES, startService } from '../helpers/service.js';

// The ids of a call (spec: service.session_id, task_id, audit_url) and how the audit API finds
// the call by each of them, whether govgate assigned the id or the agent named it.
for (const engine of ENGINES) {
  t.test(`a call is found by its session, task and pipeline, assigned or named (${engine})`, async (t) => {
    const svc = await startService({ engine });
    t.teardown(() => svc.close());
    const chat = (headers: Record<string, string> = {}) =>
      svc.call('/v1/chat/completions', {
        token: svc.agentKey,
        headers,
        body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
      });
    const events = async (path: string) => {
      const res = await svc.call(path, { token: svc.pat });
      t.equal(res.status, 200, path);
      return (res.body.data ?? []) as { event_type: string; session_id: string; task_id: string }[];
    };

    // Assigned: one random body for the three ids.
    const a = await chat();
    t.equal(a.status, 200);
    const { session_id: session, task_id: task } = a.body.service;
    const pipeline = new URL(a.body.service.audit_url).pathname.split('/').pop() as string;
    t.match(pipeline, /^pl_[A-Za-z0-9]{20}$/);
    t.equal(session, `ses_${pipeline.slice(3)}`, 'an assigned session shares the pipeline id body');
    t.equal(task, `tsk_${pipeline.slice(3)}`, 'an assigned task shares the pipeline id body');
    for (const path of [
      `/api/audit/pipeline/${pipeline}`,
      `/api/audit/session/${session}`,
      `/api/audit/task/${task}`,
      `/api/audit?session_id=${session}`,
      `/api/audit?task_id=${task}&event_type=llm_call`,
    ]) {
      const found = await events(path);
      t.equal(found.filter((e) => e.event_type === 'llm_call').length, 1, `${path} finds the call`);
    }

    // The agent continues the assigned session by naming it: both calls are in the session.
    const b = await chat({ 'x-session-id': session });
    t.equal(b.body.service.session_id, session);
    t.not(b.body.service.task_id, task, 'a new call is a new task');
    const both = await events(`/api/audit/session/${session}`);
    t.equal(both.filter((e) => e.event_type === 'llm_call').length, 2, 'named and assigned uses merge');
    t.equal((await events(`/api/audit/task/${task}`)).length, 1, 'the first task is still one call');

    // A session named by the agent from the start.
    await chat({ 'x-session-id': 'support-42', 'x-task-id': 'refund-7' });
    await chat({ 'x-session-id': 'support-42', 'x-task-id': 'refund-7' });
    t.equal((await events('/api/audit/session/support-42')).length, 2);
    t.equal((await events('/api/audit/task/refund-7')).length, 2);
    const none = await svc.call(`/api/audit/session/ses_${'x'.repeat(20)}`, { token: svc.pat });
    t.equal(none.status, 404, 'an id of the assigned form that no call has finds nothing');
  });
}

/** A caller-given id that is not one is a 400 naming where it came from, never silently replaced. */
t.test('invalid session, task and agent ids are refused, naming the field they came from', async (t) => {
  const svc = await startService({});
  t.teardown(() => svc.close());
  const chat = (headers: Record<string, string>) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      headers,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
    });
  const govern = (body: Record<string, unknown>, token = svc.agentKey) =>
    svc.call('/v1/govern', { token, body: Object.assign({ type: 'LLM_CALL' }, body) });
  const cases: [string, Promise<{ status: number; body: any }>, string][] = [
    ['X-Task-Id with a space', chat({ 'x-task-id': 'bad task!' }), 'X-Task-Id'],
    ['X-Task-Id of 129 characters', chat({ 'x-task-id': 't'.repeat(129) }), 'X-Task-Id'],
    ['X-Session-Id with a space', chat({ 'x-session-id': 'bad session' }), 'X-Session-Id'],
    ['a number as session_id', govern({ session_id: 12345 }), 'session_id'],
    ['session_id with a space', govern({ session_id: 'a b' }), 'session_id'],
    ['an empty session_id', govern({ session_id: '' }), 'session_id'],
    ['a number as agent_id', govern({ agent_id: 7 }), 'agent_id'],
  ];
  for (const [what, pending, param] of cases) {
    const res = await pending;
    t.equal(res.status, 400, `${what}: ${JSON.stringify(res.body)}`);
    t.equal(res.body.error?.code, 'invalid_request', what);
    t.equal(res.body.error?.param, param, what);
  }
  const ghost = await govern({ agent_id: 'ghost' }, svc.pat);
  t.equal(ghost.status, 404);
  t.equal(ghost.body.error.param, 'agent_id', 'the agent was named in the body');
  const ghostHeader = await svc.call('/v1/govern', {
    token: svc.pat,
    headers: { 'x-agent-id': 'ghost' },
    body: { type: 'LLM_CALL' },
  });
  t.equal(ghostHeader.body.error.param, 'X-Agent-Id', 'in the header');
  const named = await govern({ session_id: 'support-42' });
  t.equal(named.status, 200);
  const byHeader = await chat({ 'x-task-id': 'refund-7' });
  t.equal(byHeader.body.service.task_id, 'refund-7', 'a valid task id is kept');
  const nulls = await govern({ session_id: null, agent_id: null });
  t.equal(nulls.status, 200, 'null is absent');
});

/**
 * A session or task id the caller names is recorded as every other string an agent names a call
 * with: a secret in it (an access key used as an id) is not written to the trail or exported.
 */
t.test('a named session or task id that is a secret is recorded as its placeholder', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const secret = 'AKIAQWERTYUIOPASDF12';
  const res = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-session-id': secret, 'x-task-id': `task-${secret}` },
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(res.status, 200);
  t.notMatch(JSON.stringify(res.body.service), secret, 'not in the envelope');
  const pipeline = new URL(res.body.service.audit_url).pathname.split('/').pop() as string;
  const events = (await svc.call(`/api/audit/pipeline/${pipeline}`, { token: svc.pat })).body.data;
  t.ok(events.length > 0);
  t.notMatch(JSON.stringify(events), secret, 'not in the trail');
  t.match(events[0], { session_id: /\[SECRET\]/, task_id: /\[SECRET\]/ });
  const exported = await svc.call('/api/audit/export?format=jsonl', { token: svc.pat });
  t.notMatch(String(exported.body), secret, 'not in an export');
  // An ordinary named id is kept as it is.
  const plain = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-session-id': 'checkout-42' },
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(plain.body.service.session_id, 'checkout-42');
});
