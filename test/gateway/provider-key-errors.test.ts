import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger } from '../../src/util/log.js';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { startService } from '../helpers/service.js';

// An upstream that quotes govgate's provider key in an error (a self-hosted OpenAI-compatible
// proxy, a gateway in front of a model) must not hand it to the org's agents, nor write it into
// the chain, which cannot be erased, nor into the log. The keys here are of formats the secrets
// detector does not know (an Azure-style 32-hex key, a Groq-style `gsk_` key), so only their
// replacement by value keeps them out.

t.test('the provider key an upstream quotes in an error reaches neither agent, chain nor log', async (t) => {
  const openaiKey = randomBytes(16).toString('hex');
  const anthropicKey = `gsk_${randomBytes(24).toString('hex')}`;
  const lines: string[] = [];
  const upstream = await startMockUpstream();
  const svc = await startService({
    logger: createLogger('debug', (line) => lines.push(line)),
    env: { SERVICE_EGRESS_ALLOW: upstream.hostPort },
  });
  t.teardown(async () => {
    await svc.close();
    await upstream.close();
  });
  const providers = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token: svc.pat,
    body: {
      providers: [
        { name: 'openai', api_key: openaiKey, base_url: `${upstream.url}/v1`, models: ['gpt-*'] },
        // Named, not a glob: only the openai upstream is asked for its models.
        { name: 'anthropic', api_key: anthropicKey, base_url: upstream.url, models: ['claude-test-1'] },
      ],
    },
  });
  t.equal(providers.status, 200);
  const chat = (model: string, stream = false) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model, stream, messages: [{ role: 'user', content: 'hi' }] },
    });
  const quoting = (key: string) => `Invalid model for API key ${key}; check the key`;
  /** What the agent got: its error names the placeholder where the upstream quoted the key. */
  const seen: string[] = [];
  const check = (what: string, res: { status: number; body: unknown }, status: number) => {
    const text = typeof res.body === 'string' ? res.body : JSON.stringify(res.body);
    seen.push(text);
    t.equal(res.status, status, `${what}: status`);
    t.match(text, /\[PROVIDER_KEY\]/, `${what}: the key's place is named`);
  };

  for (const [model, key] of [
    ['gpt-test', openaiKey],
    ['claude-test-1', anthropicKey],
  ] as const) {
    upstream.behaviour = { kind: 'status', status: 400, body: { error: { message: quoting(key) } } };
    check(`${model} 400`, await chat(model), 400);
    // Upper case, as a log line of the upstream's might quote it.
    upstream.behaviour = { kind: 'status', status: 500, body: { message: quoting(key.toUpperCase()) } };
    check(`${model} 500`, await chat(model), 502);
  }
  // An error event inside a 200 stream, from each kind of upstream (before any output: a 502).
  upstream.behaviour = {
    kind: 'raw',
    contentType: 'text/event-stream',
    body: `data: ${JSON.stringify({ error: { message: quoting(openaiKey) } })}\n\n`,
  };
  check('openai stream error event', await chat('gpt-test', true), 502);
  const anthropicError = `event: error\ndata: ${JSON.stringify({
    type: 'error',
    error: { type: 'overloaded_error', message: quoting(anthropicKey) },
  })}\n\n`;
  upstream.behaviour = { kind: 'raw', contentType: 'text/event-stream', body: anthropicError };
  check('anthropic stream error event (chat)', await chat('claude-test-1', true), 502);
  const messages = () =>
    svc.call('/v1/messages', {
      token: svc.agentKey,
      body: {
        model: 'claude-test-1',
        max_tokens: 16,
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      },
    });
  check('anthropic stream error event (messages)', await messages(), 200);
  // A message that is not a string is repeated as String(message): scrubbed as well.
  upstream.behaviour = {
    kind: 'raw',
    contentType: 'text/event-stream',
    body: `event: error\ndata: ${JSON.stringify({
      type: 'error',
      error: { type: 'overloaded_error', message: [quoting(anthropicKey)] },
    })}\n\n`,
  };
  check('anthropic stream error event whose message is an array (messages)', await messages(), 200);
  // Embeddings, and the model list (whose failure only the log names).
  upstream.behaviour = { kind: 'status', status: 422, body: { error: { message: quoting(openaiKey) } } };
  check(
    'embeddings 422',
    await svc.call('/v1/embeddings', { token: svc.agentKey, body: { model: 'gpt-embed', input: 'x' } }),
    400,
  );
  upstream.behaviour = { kind: 'status', status: 503, body: { error: { message: quoting(openaiKey) } } };
  t.equal((await svc.call('/v1/models', { token: svc.agentKey })).status, 200);
  upstream.behaviour = { kind: 'normal' };

  t.ok(
    upstream.requests.some((r) => r.headers.authorization === `Bearer ${openaiKey}`) &&
      upstream.requests.some((r) => r.headers['x-api-key'] === anthropicKey),
    'the upstream was sent the keys it quoted',
  );
  const chain = await svc.call('/api/audit/export?format=jsonl', { token: svc.pat });
  t.equal(chain.status, 200);
  const events = String(chain.body)
    .split('\n')
    .filter((l) => l.includes('"llm_call"') || l.includes('"embedding_call"'));
  t.equal(events.filter((l) => l.includes('[PROVIDER_KEY]')).length, 9, 'every failed call is audited');
  t.ok(
    lines.some((l) => l.includes('upstream_models_unavailable') && l.includes('[PROVIDER_KEY]')),
    'the model list failure is logged',
  );
  for (const [where, text] of [
    ['the agent', seen.join('\n')],
    ['the chain', String(chain.body)],
    ['the log', lines.join('')],
  ] as const) {
    for (const key of [openaiKey, anthropicKey])
      t.notOk(text.toLowerCase().includes(key.toLowerCase()), `${where} never holds a provider key`);
  }
});
