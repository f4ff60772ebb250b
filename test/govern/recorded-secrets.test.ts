import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { publishOrgPolicy, serviceOnMockUpstream } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

const AWS = 'AKIAIOSFODNN7EXAMPLQ';
const ANTHROPIC = `sk-ant-api03-${'Ab3dE'.repeat(18)}AA`;

/**
 * What an agent names an action with (tool, server, model, provider), a tool_call_id and an
 * Idempotency-Key land in an event's details, which the hash covers and erasure cannot reach: a
 * secret in them is recorded redacted, never as it is (review-evidence F5).
 */
t.test('secrets in action names, tool_call_id and Idempotency-Key never reach the audit trail', async (t) => {
  const { svc } = await serviceOnMockUpstream(t);
  await publishOrgPolicy(svc, 'secrets-block', {
    mode: 'enforce',
    detectors: { secrets: { action: 'block' } },
    rules: [],
  });
  const govern = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: {
      type: 'TOOL_CALL',
      payload: { tool: 'crm.lookup', server: AWS, model: `m-${AWS}`, provider: AWS, args: { id: 'c-1' } },
    },
  });
  t.equal(govern.status, 200);
  t.equal(govern.body.outcome, 'block', 'the secret blocks the action');
  t.equal(govern.body.rule_id, 'detector:secrets');

  const tools = await svc.call('/v1/tools/govern', {
    token: svc.agentKey,
    body: { name: 'crm.lookup', arguments: { id: 'c-2' }, tool_call_id: ANTHROPIC },
  });
  t.equal(tools.status, 200);

  // A tool named by a secret, under a policy that only flags secrets (so it gets a mandate):
  // refused at execution, as not configured and as another tool's mandate.
  await publishOrgPolicy(svc, 'secrets-flag', {
    mode: 'enforce',
    detectors: { secrets: { action: 'flag' } },
    rules: [],
  });
  const secretTool = await svc.call('/v1/tools/govern', {
    token: svc.agentKey,
    body: { name: AWS, arguments: {} },
  });
  t.equal(secretTool.body.outcome, 'allow', JSON.stringify(secretTool.body));
  const notConfigured = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate: secretTool.body.mandate, name: AWS, arguments: {} },
  });
  t.equal(notConfigured.status, 404);
  const otherTool = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate: secretTool.body.mandate, name: 'crm.lookup', arguments: {} },
  });
  t.equal(otherTool.status, 403);

  const chat = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'idempotency-key': ANTHROPIC },
    body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(chat.status, 200, JSON.stringify(chat.body));
  const again = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'idempotency-key': ANTHROPIC },
    body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(again.headers.get('idempotent-replayed'), 'true', 'the key still works as a key');

  const events = await svc.call('/api/audit?limit=1000', { token: svc.pat });
  const types = (events.body.data as { event_type: string }[]).map((e) => e.event_type);
  for (const type of ['govern.decision', 'llm_call', 'idempotent_replay', 'tool.execution_refused'])
    t.ok(types.includes(type), `${type} was recorded`);
  // Outside `personal` (the erasable part, where the payload is kept as the agent sent it).
  const kept = (e: Record<string, unknown>) => JSON.stringify(Object.assign({}, e, { personal: null }));
  const text = (events.body.data as Record<string, unknown>[]).map(kept).join('\n');
  t.notOk(text.includes(AWS), 'no AWS key in any event');
  t.notOk(text.includes(ANTHROPIC), 'no Anthropic key in any event');
  const decision = (events.body.data as { event_type: string; details: any }[]).find(
    (e) =>
      e.event_type === 'govern.decision' && e.details.action.tool === 'crm.lookup' && e.details.action.server,
  );
  t.match(decision?.details.action.server, /^\[[A-Z_]+\]$/, 'recorded as a placeholder');
  t.equal(decision?.details.action.tool, 'crm.lookup', 'what holds no secret is kept');

  // Nor in the JSONL log on disk, once every event listed is there (written within 20 ms of the
  // commit, later on a loaded machine: a fixed 100 ms wait failed there).
  const dir = join(svc.dataDir, 'data', 'audit');
  const logged = (): Record<string, unknown>[] =>
    readdirSync(dir)
      .filter((f) => f.endsWith('.jsonl'))
      .flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n'))
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((e) => typeof e.event_type === 'string');
  const listed = (events.body.data as unknown[]).length;
  await waitFor(() => logged().length >= listed, `${listed} events in the JSONL log`);
  const onDisk = logged().map(kept).join('\n');
  t.ok(onDisk.includes('govern.decision'), 'the log holds the events');
  t.notOk(onDisk.includes(AWS) || onDisk.includes(ANTHROPIC), 'and no secret');
});

/**
 * A model id that holds a secret passes the model-id check and a provider's glob (`gpt-*`), and
 * went into `llm_call.model`, `embedding_call.model` and the approval's action text verbatim.
 */
t.test('a secret in a chat or embeddings model is recorded as its placeholder', async (t) => {
  const { svc } = await serviceOnMockUpstream(t);
  await publishOrgPolicy(svc, 'approve-stream', {
    mode: 'enforce',
    rules: [
      {
        id: 'streams',
        when: { type: 'LLM_CALL', all: [{ field: 'payload.stream', op: 'eq', value: true }] },
        then: 'require_approval',
      },
    ],
  });
  const model = `gpt-${AWS}`;
  const chat = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    body: { model, messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(chat.status, 200, JSON.stringify(chat.body));
  const held = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    body: { model, stream: true, messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(held.status, 200);
  const emb = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    body: { model: `text-embedding-${AWS}`, input: 'hello' },
  });
  t.equal(emb.status, 200, JSON.stringify(emb.body));

  const events = (await svc.call('/api/audit?limit=1000', { token: svc.pat })).body.data as {
    event_type: string;
    model?: string;
  }[];
  const byType = (type: string) => events.filter((e) => e.event_type === type);
  t.equal(byType('llm_call').length, 2, 'both chat calls were recorded');
  t.equal(byType('embedding_call').length, 1);
  for (const e of [...byType('llm_call'), ...byType('embedding_call')])
    t.match(e.model, /^(gpt|text-embedding)-\[[A-Z_]+\]$/, 'the model is kept around its placeholder');
  const approvals = await svc.call('/api/approvals', { token: svc.pat });
  t.equal(approvals.status, 200);
  t.equal((approvals.body.data as unknown[]).length, 1, 'the stream asked for an approval');
  const kept = (e: Record<string, unknown>) => JSON.stringify(Object.assign({}, e, { personal: null }));
  t.notOk(events.map(kept).join('\n').includes(AWS), 'no AWS key in any event');
  t.notOk(JSON.stringify(approvals.body).includes(AWS), 'nor in the approval');
});
