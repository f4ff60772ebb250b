import OpenAI from 'openai';
import t from 'tap';
import { IdempotencyStore } from '../../src/store/idempotency.js';
import { callHttp } from '../helpers/http.js';
import { createOrg, serviceOnMockUpstream, useMockUpstream } from '../helpers/service.js';

t.test('Idempotency-Key replays the stored response without a second upstream call', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const body = { model: 'gpt-test', messages: [{ role: 'user' as const, content: 'charge once' }] };

  upstream.requests.length = 0;
  const first = await client.chat.completions
    .create(body, { headers: { 'Idempotency-Key': 'k-1' } })
    .withResponse();
  const second = await client.chat.completions
    .create(body, { headers: { 'Idempotency-Key': 'k-1' } })
    .withResponse();
  t.equal(upstream.requests.length, 1, 'the upstream saw one call');
  t.same(second.data, first.data, 'same body replayed, envelope included');
  t.equal(second.response.headers.get('idempotent-replayed'), 'true');
  t.equal(first.response.headers.get('idempotent-replayed'), null);

  const other = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'k-1' },
    body: { ...body, messages: [{ role: 'user', content: 'different' }] },
  });
  t.equal(other.status, 409);
  t.equal(other.body.error.code, 'idempotency_mismatch');

  // Keys are per agent: another agent using the same key gets its own call.
  const agent2 = await svc.call('/api/agents/onboard', { token: svc.pat, body: { agent_id: 'second' } });
  const c2 = new OpenAI({ apiKey: agent2.body.api_key.api_key, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  await c2.chat.completions.create(body, { headers: { 'Idempotency-Key': 'k-1' } });
  t.equal(upstream.requests.length, 2);

  // A failed call is not kept: the same key can be retried.
  upstream.behaviour = { kind: 'status', status: 500 };
  const failed = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'k-2' },
    body,
  });
  t.equal(failed.status, 502);
  upstream.behaviour = { kind: 'normal' };
  const retried = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'k-2' },
    body,
  });
  t.equal(retried.status, 200);

  // Concurrent use of one key: the second is refused while the first runs.
  upstream.behaviour = { kind: 'delay', ms: 300 };
  const [a, b] = await Promise.all([
    svc.call('/v1/chat/completions', { token: svc.agentKey, headers: { 'idempotency-key': 'k-3' }, body }),
    new Promise((r) => setTimeout(r, 50)).then(() =>
      svc.call('/v1/chat/completions', { token: svc.agentKey, headers: { 'idempotency-key': 'k-3' }, body }),
    ),
  ]);
  upstream.behaviour = { kind: 'normal' };
  t.equal(a.status, 200);
  t.equal(b.status, 409);
  t.equal(b.body.error.code, 'idempotency_in_progress');

  // Streams are replayed too, byte for byte.
  const streamBody = JSON.stringify({ ...body, stream: true });
  const headers = {
    authorization: `Bearer ${svc.agentKey}`,
    'content-type': 'application/json',
    'idempotency-key': 'k-s',
  };
  const before = upstream.requests.length;
  const s1 = await (
    await fetch(`${svc.url}/v1/chat/completions`, { method: 'POST', headers, body: streamBody })
  ).text();
  const r2 = await fetch(`${svc.url}/v1/chat/completions`, { method: 'POST', headers, body: streamBody });
  t.equal(await r2.text(), s1);
  t.match(r2.headers.get('content-type'), /text\/event-stream/);
  t.equal(upstream.requests.length, before + 1);
});

/** Spec 4.1: Idempotency-Key is a header of every gateway call, embeddings included. */
t.test('Idempotency-Key on /v1/embeddings: one provider call, a 409 for another body', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const body = { model: 'text-embedding-3-small', input: 'embed once' };
  upstream.requests.length = 0;
  const first = await client.embeddings
    .create(body, { headers: { 'Idempotency-Key': 'e-1' } })
    .withResponse();
  const second = await client.embeddings
    .create(body, { headers: { 'Idempotency-Key': 'e-1' } })
    .withResponse();
  t.equal(upstream.requests.length, 1, 'the upstream saw one call');
  t.same(second.data, first.data, 'the same answer, envelope included');
  t.equal(second.response.headers.get('idempotent-replayed'), 'true');
  const badTask = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'e-1', 'x-task-id': 'bad task!' },
    body,
  });
  t.equal(badTask.status, 400, 'a replay checks the caller ids as a call does');
  t.equal(badTask.body.error.param, 'X-Task-Id');

  const other = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'e-1' },
    body: { ...body, input: 'different' },
  });
  t.equal(other.status, 409);
  t.equal(other.body.error.code, 'idempotency_mismatch');
  // A key names one call of one endpoint: the same key on chat is another body.
  const chat = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'e-1' },
    body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] },
  });
  t.equal(chat.status, 409);
  const long = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'k'.repeat(256) },
    body,
  });
  t.equal(long.status, 400);
  t.equal(long.body.error.param, 'Idempotency-Key');

  // A failed call is not kept: the same key can be retried.
  upstream.behaviour = { kind: 'status', status: 500 };
  const failed = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'e-2' },
    body,
  });
  t.equal(failed.status, 502);
  upstream.behaviour = { kind: 'normal' };
  const retried = await svc.call('/v1/embeddings', {
    token: svc.agentKey,
    headers: { 'idempotency-key': 'e-2' },
    body,
  });
  t.equal(retried.status, 200);
  t.equal(retried.headers.get('idempotent-replayed'), null, 'a new call');

  const replays = await svc.call('/api/audit?event_type=idempotent_replay', { token: svc.pat });
  t.equal(replays.body.data.length, 1, 'the replay is recorded');
  t.equal(replays.body.data[0].details.endpoint, '/v1/embeddings');
});

t.test(
  "an org's replays keep answers up to its quota; past it a replay is refused, not made again",
  async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t, {
      env: { SERVICE_IDEMPOTENCY_MAX_MB_PER_ORG: '1' },
    });
    const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
    const body = { model: 'gpt-test', messages: [{ role: 'user' as const, content: 'a long answer' }] };
    upstream.reply = 'lorem ipsum '.repeat(30_000); // ~360 KB per answer: two are kept, not three
    const idem = (key: string) => ({ headers: { 'Idempotency-Key': key } });
    const answers = [];
    for (const key of ['q-1', 'q-2', 'q-3'])
      answers.push(await client.chat.completions.create(body, idem(key)));
    t.equal(upstream.requests.length, 3);
    t.same(await client.chat.completions.create(body, idem('q-2')), answers[1], 'a kept answer replays');
    const refused = await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      headers: { 'idempotency-key': 'q-3' },
      body,
    });
    t.equal(refused.status, 409, 'the answer past the quota is not replayed');
    t.equal(refused.body.error.code, 'idempotency_not_kept');
    const { audit_url } = (answers[2] as unknown as { service: { audit_url: string } }).service;
    const ran = audit_url.slice(audit_url.lastIndexOf('/') + 1);
    t.match(ran, /^pl_/);
    t.ok(refused.body.error.message.includes(ran), 'the message names the call it ran');
    t.equal(upstream.requests.length, 3, 'and not made again upstream');

    // Another org's quota is its own.
    const other = await createOrg(svc, 'quota-b');
    await useMockUpstream(svc, other.adminPat, upstream.url);
    const c2 = new OpenAI({ apiKey: other.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
    const b1 = await c2.chat.completions.create(body, idem('q-1'));
    t.same(await c2.chat.completions.create(body, idem('q-1')), b1, "another org's answer is kept");
    t.equal(upstream.requests.length, 4);
  },
);

/**
 * The key binds the request, not its bytes: a client retrying the same body re-serialized (its
 * members in another order, other whitespace) gets the stored answer; another value is still 409.
 */
t.test('Idempotency-Key: the same body in another member order or spacing is a replay', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const url = `${svc.url}/v1/chat/completions`;
  const send = (body: string) =>
    callHttp(url, { token: svc.agentKey, headers: { 'idempotency-key': 'k-order' }, body });
  upstream.requests.length = 0;
  const first = await send(
    '{"model":"gpt-test","messages":[{"role":"user","content":"charge once"}],"temperature":0.5}',
  );
  t.equal(first.status, 200);
  const reordered = await send(
    '{ "temperature": 0.50, "messages": [ { "content": "charge once", "role": "user" } ], "model": "gpt-test" }',
  );
  t.equal(reordered.status, 200, reordered.text);
  t.equal(reordered.headers.get('idempotent-replayed'), 'true');
  t.same(reordered.body, first.body, 'the stored answer');
  t.equal(upstream.requests.length, 1, 'the upstream saw one call');
  const other = await send(
    '{"temperature":0.6,"messages":[{"content":"charge once","role":"user"}],"model":"gpt-test"}',
  );
  t.equal(other.status, 409);
  t.equal((other.body as { error: { code: string } }).error.code, 'idempotency_mismatch');
});

/**
 * A replay record is committed before its answer is sent: a crash right after the answer (kill -9
 * under load lost it, and the retry called the provider again) cannot lose it. The record's write
 * is slowed here; each answer must still come only after it, whole or streamed, chat or embeddings.
 */
t.test('an answer under an Idempotency-Key is sent only once its replay is committed', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const original = IdempotencyStore.prototype.keep;
  let committedAt = 0;
  IdempotencyStore.prototype.keep = async function (this: IdempotencyStore, ...args) {
    committedAt = 0;
    await new Promise((r) => setTimeout(r, 150));
    await original.apply(this, args);
    committedAt = performance.now();
  };
  t.teardown(() => {
    IdempotencyStore.prototype.keep = original;
  });
  const calls: Array<[string, string, Record<string, unknown>]> = [
    ['chat', '/v1/chat/completions', { model: 'gpt-test', messages: [{ role: 'user', content: 'once' }] }],
    [
      'stream',
      '/v1/chat/completions',
      { model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'once' }] },
    ],
    ['embeddings', '/v1/embeddings', { model: 'text-embedding-3-small', input: 'once' }],
  ];
  for (const [what, path, body] of calls) {
    upstream.requests.length = 0;
    const res = await callHttp(`${svc.url}${path}`, {
      token: svc.agentKey,
      headers: { 'idempotency-key': `slow-${what}` },
      body: JSON.stringify(body),
    });
    const answeredAt = performance.now();
    t.equal(res.status, 200, what);
    t.ok(committedAt > 0 && committedAt <= answeredAt, `${what}: the replay was committed first`);
    const again = await callHttp(`${svc.url}${path}`, {
      token: svc.agentKey,
      headers: { 'idempotency-key': `slow-${what}` },
      body: JSON.stringify(body),
    });
    t.equal(again.headers.get('idempotent-replayed'), 'true', `${what}: replayed`);
    t.equal(again.text, res.text, `${what}: the same answer`);
    t.equal(upstream.requests.length, 1, `${what}: one provider call`);
  }
});
