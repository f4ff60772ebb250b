import { randomBytes } from 'node:crypto';
import t from 'tap';
import { createLogger, type Logger } from '../../src/util/log.js';
import { anthropicTextSse, startMockUpstream } from '../helpers/mock-upstream.js';
import { startService } from '../helpers/service.js';

// An upstream that quotes govgate's provider key in an error (a self-hosted OpenAI-compatible
// proxy, a gateway in front of a model) must not hand it to the org's agents, nor write it into
// the chain, which cannot be erased, nor into the log. The keys here are of formats the secrets
// detector does not know (an Azure-style 32-hex key, a Groq-style `gsk_` key), so only their
// replacement by value keeps them out.

/**
 * A service whose openai and anthropic providers are a mock upstream, configured with the keys
 * given (as an admin would paste them), for the tests below; `logger` collects the log.
 */
async function keyedService(
  t: { teardown(fn: () => Promise<void>): void; equal(a: unknown, b: unknown): void },
  keys: { openai: string; anthropic: string },
  logger?: Logger,
) {
  const upstream = await startMockUpstream();
  const svc = await startService({
    ...(logger === undefined ? {} : { logger }),
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
        { name: 'openai', api_key: keys.openai, base_url: `${upstream.url}/v1`, models: ['gpt-*'] },
        // Named, not a glob: only the openai upstream is asked for its models.
        { name: 'anthropic', api_key: keys.anthropic, base_url: upstream.url, models: ['claude-test-1'] },
      ],
    },
  });
  t.equal(providers.status, 200);
  return { svc, upstream };
}

t.test('the provider key an upstream quotes in an error reaches neither agent, chain nor log', async (t) => {
  const openaiKey = randomBytes(16).toString('hex');
  const anthropicKey = `gsk_${randomBytes(24).toString('hex')}`;
  const lines: string[] = [];
  const { svc, upstream } = await keyedService(
    t,
    { openai: openaiKey, anthropic: anthropicKey },
    createLogger('debug', (line) => lines.push(line)),
  );
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

// A misconfigured or hostile upstream can put the key in a successful answer too (an echo service
// behind an OpenAI-compatible base URL, a proxy that reflects request headers). Whatever the
// org's detectors are set to, the org's own credential never reaches its agents: it is replaced
// and the call's event records `secret:provider_key` among its output detections.
t.test('the provider key an upstream echoes in a 200 answer never reaches the agent', async (t) => {
  const openaiKey = randomBytes(16).toString('hex');
  const anthropicKey = `gsk_${randomBytes(24).toString('hex')}`;
  const { svc, upstream } = await keyedService(t, { openai: `Bearer ${openaiKey}`, anthropic: anthropicKey });
  const echo = (key: string) => `your key is ${key} and, shouting, ${key.toUpperCase()}.`;
  const completion = (key: string) =>
    JSON.stringify({
      id: 'chatcmpl-echo',
      object: 'chat.completion',
      created: 1,
      model: 'gpt-test',
      choices: [{ index: 0, message: { role: 'assistant', content: echo(key) }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
  const openaiStream = (key: string) =>
    [
      { choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] },
      { choices: [{ index: 0, delta: { content: echo(key) } }] },
      { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
    ]
      .map(
        (c) =>
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-test', ...c })}\n\n`,
      )
      .join('') + 'data: [DONE]\n\n';
  const anthropicMessage = (key: string) =>
    JSON.stringify({
      id: 'msg_echo',
      type: 'message',
      role: 'assistant',
      model: 'claude-test-1',
      content: [{ type: 'text', text: echo(key) }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 1, output_tokens: 1 },
    });
  const anthropicStream = (key: string) => anthropicTextSse('msg_echo', [echo(key)]);

  const seen: string[] = [];
  const call = async (what: string, path: string, body: Record<string, unknown>, flags?: string) => {
    const res = await svc.call(path, {
      token: svc.agentKey,
      body,
      headers: flags === undefined ? undefined : { 'x-service-flags': flags },
    });
    const text = typeof res.body === 'string' ? res.body : JSON.stringify(res.body);
    seen.push(text);
    t.equal(res.status, 200, `${what}: status`);
    t.match(text, /\[PROVIDER_KEY\]/, `${what}: the key's place is named`);
  };
  const chat = (model: string, stream: boolean) => ({
    model,
    stream,
    messages: [{ role: 'user', content: 'hi' }],
  });
  const messages = (stream: boolean) => ({
    model: 'claude-test-1',
    max_tokens: 16,
    stream,
    messages: [{ role: 'user', content: 'hi' }],
  });
  // Under observe (nothing scanned or changed on the way out) and under the default policy.
  for (const flags of ['mode=observe', undefined]) {
    const tag = flags ?? 'default';
    upstream.behaviour = { kind: 'raw', contentType: 'application/json', body: completion(openaiKey) };
    await call(`openai answer (${tag})`, '/v1/chat/completions', chat('gpt-test', false), flags);
    upstream.behaviour = { kind: 'raw', contentType: 'text/event-stream', body: openaiStream(openaiKey) };
    await call(`openai stream (${tag})`, '/v1/chat/completions', chat('gpt-test', true), flags);
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'application/json',
      body: anthropicMessage(anthropicKey),
    };
    await call(
      `anthropic answer to chat (${tag})`,
      '/v1/chat/completions',
      chat('claude-test-1', false),
      flags,
    );
    await call(`anthropic answer to messages (${tag})`, '/v1/messages', messages(false), flags);
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body: anthropicStream(anthropicKey),
    };
    await call(
      `anthropic stream to chat (${tag})`,
      '/v1/chat/completions',
      chat('claude-test-1', true),
      flags,
    );
    await call(`anthropic stream to messages (${tag})`, '/v1/messages', messages(true), flags);
  }
  upstream.behaviour = { kind: 'normal' };

  for (const key of [openaiKey, anthropicKey])
    t.notOk(
      seen.join('\n').toLowerCase().includes(key.toLowerCase()),
      'the agent never holds a provider key',
    );
  const chain = await svc.call('/api/audit/export?format=jsonl', { token: svc.pat });
  t.equal(chain.status, 200);
  const calls = String(chain.body)
    .split('\n')
    .filter((l) => l.includes('"llm_call"'));
  t.equal(calls.length, 12, 'every call is audited');
  t.equal(
    calls.filter((l) => l.includes('secret:provider_key')).length,
    12,
    'each event records that the answer held the provider key',
  );
  t.notOk(String(chain.body).toLowerCase().includes(openaiKey.toLowerCase()), 'nor does the chain');
});

/** The text a client reads from an SSE answer: OpenAI deltas' content, Anthropic text deltas. */
function streamedText(sse: string): string {
  let out = '';
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
    const e = JSON.parse(line.slice(6));
    out += e.choices?.[0]?.delta?.content ?? '';
    if (e.type === 'content_block_delta' && e.delta?.type === 'text_delta') out += e.delta.text;
  }
  return out;
}

// A stream can spell the key out over several events (a model echoing a header it was shown, a
// proxy streaming a reflected request): the guard holds back at least the key's length, whatever
// the mode, so the key is found whole and replaced before any part of it goes out.
t.test('a provider key split across stream events never reaches the agent either', async (t) => {
  // Longer than the guard's usual hold-back of 96 characters.
  const openaiKey = `sk-${randomBytes(60).toString('hex')}`;
  const anthropicKey = `gsk_${randomBytes(60).toString('hex')}`;
  const { svc, upstream } = await keyedService(t, { openai: openaiKey, anthropic: anthropicKey });
  const pieces = (key: string) => [
    'x'.repeat(150),
    key.slice(0, 7),
    key.slice(7, 100),
    key.slice(100),
    ' end.',
  ];
  const openaiStream = (key: string) =>
    `${pieces(key)
      .map((content, i) => ({
        choices: [{ index: 0, delta: i === 0 ? { role: 'assistant', content } : { content } }],
      }))
      .concat([{ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] } as any])
      .map(
        (c) =>
          `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'gpt-test', ...c })}\n\n`,
      )
      .join('')}data: [DONE]\n\n`;
  const anthropicStream = (key: string) => anthropicTextSse('msg_split', pieces(key));
  const chat = (model: string) => ({ model, stream: true, messages: [{ role: 'user', content: 'hi' }] });
  const messages = {
    model: 'claude-test-1',
    max_tokens: 16,
    stream: true,
    messages: [{ role: 'user', content: 'hi' }],
  };
  const read: string[] = [];
  for (const flags of ['mode=observe', undefined]) {
    const call = async (what: string, path: string, body: unknown) => {
      const res = await svc.call(path, {
        token: svc.agentKey,
        body,
        headers: flags === undefined ? undefined : { 'x-service-flags': flags },
      });
      t.equal(res.status, 200, `${what}: status`);
      const text = streamedText(String(res.body));
      read.push(text);
      t.match(text, /\[PROVIDER_KEY\] end\.$/, `${what} (${flags ?? 'default'}): the key's place is named`);
    };
    upstream.behaviour = { kind: 'raw', contentType: 'text/event-stream', body: openaiStream(openaiKey) };
    await call('openai stream', '/v1/chat/completions', chat('gpt-test'));
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body: anthropicStream(anthropicKey),
    };
    await call('anthropic stream to chat', '/v1/chat/completions', chat('claude-test-1'));
    await call('anthropic stream to messages', '/v1/messages', messages);
  }
  upstream.behaviour = { kind: 'normal' };
  for (const key of [openaiKey, anthropicKey])
    for (const part of [key, key.slice(0, 40), key.slice(-40)])
      t.notOk(read.join('\n').includes(part), 'no part of a provider key reaches the agent');
  const chain = await svc.call('/api/audit/export?format=jsonl', { token: svc.pat });
  const calls = String(chain.body)
    .split('\n')
    .filter((l) => l.includes('"llm_call"'));
  t.equal(calls.length, 6);
  t.equal(calls.filter((l) => l.includes('secret:provider_key')).length, 6, 'each event records it');
});
