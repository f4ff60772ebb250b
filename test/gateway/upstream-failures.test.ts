import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { ENGINES, startService, type TestService, useMockUpstream } from '../helpers/service.js';

/** The call of `session` is audited as the client going away, not as a provider failure. */
async function checkDisconnectAudit(
  t: Test,
  svc: TestService,
  session: string,
  eventType = 'llm_call',
): Promise<void> {
  let event: any;
  for (let i = 0; i < 100 && !event; i++) {
    const res = await svc.call(`/api/audit/session/${session}`, { token: svc.pat });
    event = (res.body.data ?? []).find((e: any) => e.event_type === eventType);
    if (!event) await new Promise((r) => setTimeout(r, 10));
  }
  t.equal(event?.outcome, 'error', 'audited as an error');
  t.equal(event?.reason, 'client disconnected');
  t.equal(event?.details.client_disconnected, true);
  t.equal(event?.details.error_code, null, 'not as a provider error');
  t.equal(event?.details.status, 499, 'with the status the metrics count it under');
  const metrics = await svc.call('/api/metrics');
  t.notMatch(
    String(metrics.body),
    /govgate_upstream_duration_seconds_count\{provider="openai",outcome="error"\}/,
    'not counted as a provider error',
  );
}

for (const engine of ENGINES) {
  t.test(`upstream failures map to the contract (${engine})`, async (t) => {
    const upstream = await startMockUpstream();
    const svc = await startService({
      engine,
      env: { SERVICE_EGRESS_ALLOW: upstream.hostPort, SERVICE_UPSTREAM_TIMEOUT_MS: '400' },
    });
    t.teardown(async () => {
      upstream.behaviour = { kind: 'normal' };
      await svc.close();
      await upstream.close();
    });
    await useMockUpstream(svc, svc.pat, upstream.url);
    const body = { model: 'gpt-test', messages: [{ role: 'user', content: 'x' }] };
    const call = (b: unknown = body) => svc.call('/v1/chat/completions', { token: svc.agentKey, body: b });

    upstream.behaviour = { kind: 'status', status: 500 };
    let res = await call();
    t.equal(res.status, 502);
    t.equal(res.body.error.code, 'upstream_error');

    upstream.behaviour = { kind: 'status', status: 401 };
    res = await call();
    t.equal(res.status, 502, 'a provider credential problem is not the agent’s to fix');
    t.notMatch(JSON.stringify(res.body), /sk-test-openai/, 'the provider key is never echoed');

    upstream.behaviour = { kind: 'status', status: 400, body: { error: { message: 'bad param foo' } } };
    res = await call();
    t.equal(res.status, 400);
    t.match(res.body.error.message, /bad param foo/);

    upstream.behaviour = { kind: 'status', status: 429 };
    res = await call();
    t.equal(res.status, 429);
    t.equal(res.body.error.code, 'rate_limited');
    t.ok(res.headers.get('retry-after'));

    upstream.behaviour = { kind: 'hang' };
    res = await call();
    t.equal(res.status, 504);
    t.equal(res.body.error.code, 'upstream_timeout');
    res = await call({ ...body, stream: true });
    t.equal(res.status, 504, 'a stream that never starts is a plain 504');

    // Unreachable provider: point openai at a closed port.
    upstream.behaviour = { kind: 'normal' };
    const dead = await svc.call('/api/settings/providers', {
      method: 'PUT',
      token: svc.pat,
      body: { providers: [{ name: 'openai', api_key: 'sk-x-1234', base_url: 'http://127.0.0.1:9/v1' }] },
    });
    t.equal(dead.status, 400, 'loopback is refused by the SSRF guard unless allowed');
    t.match(dead.body.error.message, /forbidden address/);

    // The failed calls are audited too.
    const events = await svc.call(new URL((await call()).body.service.audit_url).pathname, {
      token: svc.pat,
    });
    t.equal(events.status, 200);
  });

  /** A service whose OpenAI provider is a fresh recording upstream, both closed after `t`. */
  const withUpstream = async (t: Test) => {
    const upstream = await startMockUpstream();
    const svc = await startService({ engine, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
    t.teardown(async () => {
      upstream.behaviour = { kind: 'normal' };
      await svc.close();
      await upstream.close();
    });
    await useMockUpstream(svc, svc.pat, upstream.url);
    return { upstream, svc };
  };

  /**
   * Sends `body` to `path` on a hanging upstream and hangs up once the upstream has the request:
   * the upstream call is aborted, and the call is audited as the client going away.
   */
  const disconnectWhileWaiting = async (
    t: Test,
    path: string,
    body: Record<string, unknown>,
    session: string,
    eventType: string,
  ) => {
    const { upstream, svc } = await withUpstream(t);
    upstream.behaviour = { kind: 'hang' };
    const ac = new AbortController();
    const pending = fetch(`${svc.url}${path}`, {
      method: 'POST',
      signal: ac.signal,
      headers: {
        authorization: `Bearer ${svc.agentKey}`,
        'content-type': 'application/json',
        'x-session-id': session,
      },
      body: JSON.stringify(body),
    }).catch(() => 'aborted');
    // Wait until the upstream has the request, then hang up.
    for (let i = 0; i < 100 && upstream.requests.length === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    t.equal(upstream.requests.length, 1);
    ac.abort();
    t.equal(await pending, 'aborted');
    for (let i = 0; i < 100 && upstream.aborted.length === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    t.same(upstream.aborted, [path], 'govgate closed its upstream request');
    await checkDisconnectAudit(t, svc, session, eventType);
  };

  t.test(`a client disconnect aborts the upstream call (${engine})`, (t) =>
    disconnectWhileWaiting(
      t,
      '/v1/chat/completions',
      { model: 'gpt-test', messages: [{ role: 'user', content: 'slow' }] },
      'disc-whole',
      'llm_call',
    ),
  );

  t.test(`a client disconnect aborts an embeddings call, audited as such (${engine})`, (t) =>
    disconnectWhileWaiting(
      t,
      '/v1/embeddings',
      { model: 'text-embedding-3-small', input: 'slow' },
      'disc-embed',
      'embedding_call',
    ),
  );

  t.test(`a client disconnect mid-stream aborts the upstream stream (${engine})`, async (t) => {
    const { upstream, svc } = await withUpstream(t);
    upstream.behaviour = { kind: 'stall-stream' };
    const ac = new AbortController();
    const res = await fetch(`${svc.url}/v1/chat/completions`, {
      method: 'POST',
      signal: ac.signal,
      headers: {
        authorization: `Bearer ${svc.agentKey}`,
        'content-type': 'application/json',
        'x-session-id': 'disc-stream',
      },
      body: JSON.stringify({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'slow' }],
      }),
    });
    t.equal(res.status, 200, 'the stream started');
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    t.match(first, /^data: \{/, 'the first event was relayed before the upstream stalled');
    ac.abort();
    await reader.read().catch(() => undefined);
    for (let i = 0; i < 200 && upstream.aborted.length === 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    t.same(upstream.aborted, ['/v1/chat/completions'], 'govgate closed its upstream stream');
    await checkDisconnectAudit(t, svc, 'disc-stream');
    upstream.behaviour = { kind: 'normal' };
    const after = await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'gpt-test', messages: [{ role: 'user', content: 'still serving' }] },
    });
    t.equal(after.status, 200, 'the gateway keeps serving');
  });
}

t.test('a provider that breaks off its answer is recorded as such, not as unreachable', async (t) => {
  // Answers the head and part of the body, then resets the connection.
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c;
    });
    req.on('end', () => {
      const stream = JSON.parse(body).stream === true;
      res.writeHead(
        200,
        stream
          ? { 'content-type': 'text/event-stream' }
          : { 'content-type': 'application/json', 'content-length': '500' },
      );
      res.write(
        stream
          ? 'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}\n\n'
          : '{"id":"c1","object":"chat.comp',
      );
      setTimeout(() => res.socket?.resetAndDestroy(), 50);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const svc = await startService({ env: { SERVICE_EGRESS_ALLOW: `127.0.0.1:${port}` } });
  t.teardown(async () => {
    await svc.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  await useMockUpstream(svc, svc.pat, `http://127.0.0.1:${port}`);
  const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const request = { model: 'gpt-test', messages: [{ role: 'user' as const, content: 'hi' }] };

  await t.rejects(client.chat.completions.create(request), { status: 502, message: /broke off its answer/ });
  const stream = await client.chat.completions.create({ ...request, stream: true });
  await t.rejects(
    (async () => {
      for await (const _ of stream);
    })(),
    /broke off its answer/,
    'the stream ends with the error',
  );
  const events = await svc.call('/api/audit?event_type=llm_call&limit=10', { token: svc.pat });
  const reasons = events.body.data.map((e: { reason: string }) => e.reason);
  t.equal(reasons.length, 2);
  for (const r of reasons) {
    t.match(r, /^provider openai broke off its answer/, 'the trail says the answer broke off');
    t.notMatch(r, /unreachable/);
  }
});
