import t from 'tap';
import { createLogger } from '../../src/util/log.js';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { startService, useMockUpstream } from '../helpers/service.js';

// The log an operator correlates a user's request id with: failures at warn (with the cause),
// every request at debug, nothing per request at info.

async function loggedService(t: { teardown(fn: () => Promise<void>): void }, level: 'info' | 'debug') {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger(level, (line) => lines.push(JSON.parse(line)));
  const upstream = await startMockUpstream();
  const svc = await startService({ logger, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
  t.teardown(async () => {
    await svc.close();
    await upstream.close();
  });
  await useMockUpstream(svc, svc.pat, upstream.url);
  return { svc, upstream, lines };
}

t.test('provider failures are logged at warn with the request id and the cause', async (t) => {
  const { svc, upstream, lines } = await loggedService(t, 'info');
  const chat = { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] };
  const ok = await svc.call('/v1/chat/completions', { token: svc.agentKey, body: chat });
  t.equal(ok.status, 200);
  t.same(
    lines.filter((l) => l.msg === 'request' || l.msg === 'request failed'),
    [],
    'a success writes nothing at info',
  );

  upstream.behaviour = { kind: 'status', status: 503 };
  const failed = await svc.call('/v1/chat/completions', { token: svc.agentKey, body: chat });
  t.equal(failed.status, 502);
  const line = lines.find((l) => l.msg === 'request failed');
  t.match(line, {
    level: 'warn',
    request_id: failed.headers.get('x-request-id'),
    method: 'POST',
    route: '/v1/chat/completions',
    status: 502,
    reason: 'upstream_error',
    error: /503/,
  });

  // A stream cut off after its first chunk fails inside a 200.
  lines.length = 0;
  upstream.behaviour = {
    kind: 'raw',
    contentType: 'text/event-stream',
    body: 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"content":"par"},"finish_reason":null}]}\n\n',
  };
  const cut = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    body: { ...chat, stream: true },
  });
  t.equal(cut.status, 200);
  t.match(
    lines.find((l) => l.msg === 'request failed'),
    {
      status: 200,
      reason: 'upstream_error',
      error: /before \[DONE\]/,
      request_id: cut.headers.get('x-request-id'),
    },
  );
  upstream.behaviour = { kind: 'normal' };
});

t.test('a provider whose model list cannot be fetched is logged, and the list still answers', async (t) => {
  const { svc, upstream, lines } = await loggedService(t, 'info');
  const listed = await svc.call('/v1/models', { token: svc.agentKey });
  t.equal(listed.status, 200);
  t.ok(listed.body.data.length > 0, 'the upstream lists models');
  t.equal(lines.filter((l) => l.msg === 'request failed').length, 0);
  // A wrong key answers 401: the listing must not look like a provider with no models.
  upstream.behaviour = { kind: 'status', status: 401 };
  const unlisted = await svc.call('/v1/models', { token: svc.agentKey });
  t.equal(unlisted.status, 200);
  t.match(
    lines.find((l) => l.msg === 'request failed'),
    {
      level: 'warn',
      route: '/v1/models',
      status: 200,
      reason: 'upstream_models_unavailable',
      error: /^openai: .*401/,
      request_id: unlisted.headers.get('x-request-id'),
    },
  );
  upstream.behaviour = { kind: 'normal' };
});

t.test('at debug every request is logged', async (t) => {
  const { svc, lines } = await loggedService(t, 'debug');
  const res = await svc.call('/api/me', { token: svc.pat });
  t.equal(res.status, 200);
  t.match(
    lines.find((l) => l.msg === 'request' && l.route === '/api/me'),
    {
      level: 'debug',
      status: 200,
      method: 'GET',
      request_id: res.headers.get('x-request-id'),
    },
  );
});

/**
 * The log's `error` says why a request failed, never a secret (docs/ops.md): a model name, an
 * agent id or a tool name an agent sends is its own text, and the messages quote it.
 */
t.test('a secret an agent puts in a name or a request id is not written to the log', async (t) => {
  const { svc, lines } = await loggedService(t, 'debug');
  const secret = 'ghp_GHPsecretAbCdEfGhIjKlMnOpQrStUvWxYz01';
  const model = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-request-id': secret },
    body: { model: secret, messages: [{ role: 'user', content: 'hi' }] },
  });
  t.equal(model.status, 400);
  const acting = await svc.call('/v1/chat/completions', {
    token: svc.pat,
    headers: { 'x-agent-id': secret },
    body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] },
  });
  t.equal(acting.status, 404);
  const logged = JSON.stringify(lines);
  t.notMatch(logged, secret, 'neither the secret nor its request id');
  t.match(logged, /\[SECRET\]/, 'its placeholder stands in');
});
