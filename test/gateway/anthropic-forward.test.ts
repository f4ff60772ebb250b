import Anthropic from '@anthropic-ai/sdk';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

// An Anthropic client's call to an Anthropic model goes to the provider as the caller wrote it,
// and the answer comes back as the provider gave it: what the canonical (OpenAI) shape cannot say
// (thinking and its signature, cache_control, top_k, service_tier, cache usage) is not lost, and
// the guard works on the blocks themselves.

const SIGNATURE = 'EqQBCkYIBxgCKkBsig0123456789abcdef';

/** A conversation that uses what only the Messages API has: thinking, caching, top_k. */
function richRequest(): Record<string, unknown> {
  return {
    model: 'claude-test-1',
    max_tokens: 2048,
    temperature: 1,
    top_k: 40,
    service_tier: 'auto',
    thinking: { type: 'enabled', budget_tokens: 1024 },
    metadata: { user_id: 'user-42' },
    stop_sequences: ['\n\nHuman:'],
    system: [{ type: 'text', text: 'You are a careful assistant.', cache_control: { type: 'ephemeral' } }],
    tools: [
      {
        name: 'get_weather',
        description: 'Weather for a city',
        input_schema: { type: 'object', properties: { city: { type: 'string' } } },
        cache_control: { type: 'ephemeral', ttl: '1h' },
      },
    ],
    messages: [
      {
        role: 'user',
        content: [{ type: 'text', text: 'Weather in Paris?', cache_control: { type: 'ephemeral' } }],
      },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'The user wants the weather; call the tool.', signature: SIGNATURE },
          { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: 'Sunny, 21C' }] },
        ],
      },
    ],
  };
}

function answer(content: unknown[], stop = 'end_turn'): Record<string, unknown> {
  return {
    id: 'msg_native_1',
    type: 'message',
    role: 'assistant',
    model: 'claude-test-1',
    content,
    stop_reason: stop,
    stop_sequence: null,
    usage: {
      input_tokens: 20,
      output_tokens: 30,
      cache_creation_input_tokens: 100,
      cache_read_input_tokens: 400,
    },
  };
}

t.test('anthropic client to an anthropic model: forwarded as written', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const lastBody = (): Record<string, unknown> => upstream.requests.at(-1)?.body as Record<string, unknown>;
  t.teardown(() => {
    upstream.anthropicMessage = undefined;
  });

  t.test(
    'thinking, cache_control, top_k, service_tier and the signed history reach the provider',
    async (t) => {
      const request = richRequest();
      for (const stream of [false, true]) {
        upstream.requests.length = 0;
        const res = await svc.call('/v1/messages', {
          headers: { 'x-api-key': svc.agentKey },
          body: { ...request, stream },
        });
        t.equal(res.status, 200);
        const seen = lastBody();
        for (const key of Object.keys(request))
          t.same(seen[key], request[key], `${key} is forwarded unchanged (stream: ${stream})`);
        t.equal(seen.stream, stream);
      }
    },
  );

  t.test("the caller's anthropic-beta header reaches the provider; a malformed one is refused", async (t) => {
    const beta = 'interleaved-thinking-2025-05-14, context-1m-2025-08-07';
    for (const stream of [false, true]) {
      upstream.requests.length = 0;
      const res = await svc.call('/v1/messages', {
        headers: { 'x-api-key': svc.agentKey, 'anthropic-beta': beta },
        body: { ...richRequest(), stream },
      });
      t.equal(res.status, 200);
      t.equal(upstream.requests.at(-1)?.headers['anthropic-beta'], beta, `passed on (stream: ${stream})`);
    }
    upstream.requests.length = 0;
    await svc.call('/v1/messages', { headers: { 'x-api-key': svc.agentKey }, body: richRequest() });
    t.equal(upstream.requests.at(-1)?.headers['anthropic-beta'], undefined, 'not invented');
    upstream.requests.length = 0;
    const bad = await svc.call('/v1/messages', {
      headers: { 'x-api-key': svc.agentKey, 'anthropic-beta': 'x\ty' },
      body: richRequest(),
    });
    t.equal(bad.status, 400);
    t.equal(bad.body.error.param, 'anthropic-beta');
    t.equal(upstream.requests.length, 0);
  });

  t.test('what would run out of the gateway sight is not forwarded', async (t) => {
    upstream.requests.length = 0;
    const request = richRequest();
    request.mcp_servers = [{ type: 'url', url: 'https://mcp.example.com/sse', name: 'x' }];
    request.container = 'container_123';
    (request.tools as unknown[]).push({ type: 'web_search_20250305', name: 'web_search', max_uses: 2 });
    (request.messages as { content: unknown[] }[])[1]?.content.push({
      type: 'server_tool_use',
      id: 'srvtoolu_1',
      name: 'web_search',
      input: { query: 'paris weather' },
    });
    const res = await svc.call('/v1/messages', { headers: { 'x-api-key': svc.agentKey }, body: request });
    t.equal(res.status, 200);
    const seen = lastBody();
    t.notOk('mcp_servers' in seen, 'mcp_servers dropped');
    t.notOk('container' in seen, 'container dropped');
    t.same(
      (seen.tools as { name: string }[]).map((x) => x.name),
      ['get_weather'],
      'server tools dropped',
    );
    const assistant = (seen.messages as { content: { type: string }[] }[])[1];
    t.same(
      assistant?.content.map((b) => b.type),
      ['thinking', 'tool_use'],
      'server tool history dropped, the rest kept in order',
    );
  });

  t.test('thinking blocks and cache usage come back (whole answer)', async (t) => {
    upstream.anthropicMessage = answer([
      { type: 'thinking', thinking: 'Sunny weather means no umbrella.', signature: SIGNATURE },
      { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP' },
      { type: 'text', text: 'It is sunny in Paris.' },
    ]);
    const res = await anthropic.messages.create(richRequest() as never);
    t.same(
      res.content.map((b) => b.type),
      ['thinking', 'redacted_thinking', 'text'],
    );
    const thinking = res.content[0];
    t.equal(thinking?.type === 'thinking' ? thinking.signature : '', SIGNATURE, 'signature kept');
    t.equal(res.usage.cache_creation_input_tokens, 100);
    t.equal(res.usage.cache_read_input_tokens, 400);
    t.equal(res.usage.input_tokens, 20);
    const service = (res as unknown as { service: { audit_url: string; blocked: boolean } }).service;
    t.equal(service.blocked, false);
    const audit = await svc.call(new URL(service.audit_url).pathname, { token: svc.pat });
    const call = audit.body.data.find((e: { event_type: string }) => e.event_type === 'llm_call');
    t.same(
      call.usage,
      { prompt_tokens: 520, completion_tokens: 30, total_tokens: 550 },
      'the audit trail counts cached prompt tokens',
    );
  });

  t.test('thinking blocks and cache usage come back (stream)', async (t) => {
    upstream.anthropicMessage = answer(
      [
        {
          type: 'thinking',
          thinking: 'Rain is likely, so the user wants an umbrella.',
          signature: SIGNATURE,
        },
        { type: 'text', text: 'Take an umbrella in Paris today.' },
        { type: 'tool_use', id: 'toolu_02', name: 'get_weather', input: { city: 'Lyon' } },
      ],
      'tool_use',
    );
    const stream = anthropic.messages.stream(richRequest() as never);
    let envelope: { blocked: boolean; audit_url: string } | undefined;
    stream.on('streamEvent', (e) => {
      const s = (e as unknown as { service?: typeof envelope }).service;
      if (e.type === 'message_delta' && s) envelope = s;
    });
    const final = await stream.finalMessage();
    t.same(
      final.content.map((b) => b.type),
      ['thinking', 'text', 'tool_use'],
    );
    const [thinking, text, tool] = final.content;
    t.equal(
      thinking?.type === 'thinking' ? thinking.thinking : '',
      'Rain is likely, so the user wants an umbrella.',
    );
    t.equal(thinking?.type === 'thinking' ? thinking.signature : '', SIGNATURE);
    t.equal(text?.type === 'text' ? text.text : '', 'Take an umbrella in Paris today.');
    t.same(tool?.type === 'tool_use' ? tool.input : null, { city: 'Lyon' });
    t.equal(final.stop_reason, 'tool_use');
    t.equal(final.usage.cache_read_input_tokens, 400);
    t.equal(envelope?.blocked, false, 'the envelope rides on message_delta');
    const audit = await svc.call(new URL(envelope?.audit_url ?? 'http://x/').pathname, { token: svc.pat });
    const call = audit.body.data.find((e: { event_type: string }) => e.event_type === 'llm_call');
    t.same(call.details.tool_calls, ['get_weather']);
    t.equal(call.details.finish_reason, 'tool_calls');
    t.equal(call.usage.prompt_tokens, 520);
  });
});

t.test('anthropic client to an anthropic model: governed on its own blocks', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const lastBody = (): Record<string, unknown> => upstream.requests.at(-1)?.body as Record<string, unknown>;
  t.teardown(() => {
    upstream.anthropicMessage = undefined;
  });

  t.test('input PII is redacted in place; cache_control and the signed thinking stay', async (t) => {
    upstream.requests.length = 0;
    const request = richRequest();
    const messages = request.messages as { content: Record<string, unknown>[] }[];
    (messages[0]?.content[0] as { text: string }).text = 'Weather in Paris? Reply to jane.doe@example.com';
    (messages[1]?.content[1] as { input: unknown }).input = { city: 'Paris', notify: 'jane.doe@example.com' };
    const res = await svc.call('/v1/messages', { headers: { 'x-api-key': svc.agentKey }, body: request });
    t.equal(res.status, 200);
    t.equal(res.body.service.blocked, false);
    const seen = lastBody();
    t.notMatch(JSON.stringify(seen), /jane\.doe/, 'the provider never saw the address');
    const sent = seen.messages as { content: Record<string, unknown>[] }[];
    t.same(sent[0]?.content[0], {
      type: 'text',
      text: 'Weather in Paris? Reply to [EMAIL]',
      cache_control: { type: 'ephemeral' },
    });
    t.same(
      sent[1]?.content[1]?.input,
      { city: 'Paris', notify: '[EMAIL]' },
      'tool input redacted as an object',
    );
    t.same(sent[1]?.content[0], messages[1]?.content[0], 'thinking block unchanged, signature included');
  });

  t.test('PII inside signed thinking cannot be redacted: the call is refused, unsent', async (t) => {
    upstream.requests.length = 0;
    const request = richRequest();
    const messages = request.messages as { content: Record<string, unknown>[] }[];
    (messages[1]?.content[0] as { thinking: string }).thinking = 'I should email jane.doe@example.com later.';
    const res = await svc.call('/v1/messages', { headers: { 'x-api-key': svc.agentKey }, body: request });
    t.equal(res.status, 200);
    t.equal(res.body.service.blocked, true);
    t.match(res.body.service.reason, /messages\[1\]\.content\[0\]\.thinking/);
    t.equal(upstream.requests.length, 0, 'the provider was not called');
  });

  t.test('a secret anywhere forwarded is redacted, or blocked (system block, tool result)', async (t) => {
    const secret = 'AKIAIOSFODNN7EXAMPLE';
    for (const place of ['system', 'tool_result'] as const) {
      const request = (): Record<string, unknown> => {
        const r = richRequest();
        if (place === 'system') (r.system as { text: string }[])[0]!.text = `key ${secret}`;
        else
          (r.messages as { content: { content: { text: string }[] }[] }[])[2]!.content[0]!.content[0]!.text =
            `found ${secret}`;
        return r;
      };
      upstream.requests.length = 0;
      const redacted = await svc.call('/v1/messages', {
        headers: { 'x-api-key': svc.agentKey },
        body: request(),
      });
      t.equal(redacted.body.service.blocked, false, `${place}: redacted by default`);
      const sent = JSON.stringify(lastBody());
      t.notMatch(sent, /AKIA/, `${place}: the provider never saw the key`);
      t.match(sent, /ephemeral/, `${place}: cache_control kept`);
      upstream.requests.length = 0;
      const blocked = await svc.call('/v1/messages', {
        headers: { 'x-api-key': svc.agentKey, 'x-service-flags': 'secrets=block' },
        body: request(),
      });
      t.equal(blocked.body.service.blocked, true, `${place}: blocked under secrets=block`);
      t.equal(upstream.requests.length, 0, `${place}: the provider was not called`);
    }
  });

  t.test('output: text and tool input redacted, thinking with PII blocks (whole answer)', async (t) => {
    upstream.anthropicMessage = answer([
      { type: 'thinking', thinking: 'Nothing personal here.', signature: SIGNATURE },
      { type: 'text', text: 'Write to john.roe@example.org for details.' },
      {
        type: 'tool_use',
        id: 'toolu_03',
        name: 'get_weather',
        input: { city: 'Nice', cc: 'john.roe@example.org' },
      },
    ]);
    const res = await anthropic.messages.create(richRequest() as never);
    t.equal(res.content[1]?.type === 'text' ? res.content[1].text : '', 'Write to [EMAIL] for details.');
    t.same(res.content[2]?.type === 'tool_use' ? res.content[2].input : null, {
      city: 'Nice',
      cc: '[EMAIL]',
    });
    t.equal(res.content[0]?.type === 'thinking' ? res.content[0].signature : '', SIGNATURE);

    upstream.anthropicMessage = answer([
      { type: 'thinking', thinking: 'The address is john.roe@example.org.', signature: SIGNATURE },
      { type: 'text', text: 'Done.' },
    ]);
    const blocked = await anthropic.messages.create(richRequest() as never);
    t.equal((blocked as unknown as { service: { blocked: boolean } }).service.blocked, true);
    t.notMatch(JSON.stringify(blocked), /john\.roe/, 'the thinking did not reach the agent');
  });

  t.test('output stream: redacted across deltas, blocked on thinking, parsed by the SDK', async (t) => {
    upstream.anthropicMessage = answer([
      { type: 'text', text: `Contact ${'x'.repeat(200)} at john.roe@example.org or later.` },
    ]);
    const redacted = await anthropic.messages.stream(richRequest() as never).finalMessage();
    const text = redacted.content[0]?.type === 'text' ? redacted.content[0].text : '';
    t.equal(text, `Contact ${'x'.repeat(200)} at [EMAIL] or later.`);

    upstream.anthropicMessage = answer([
      { type: 'text', text: 'Let me think. ' },
      { type: 'thinking', thinking: 'Send it to john.roe@example.org quietly.', signature: SIGNATURE },
      { type: 'text', text: 'Done.' },
    ]);
    const stream = anthropic.messages.stream(richRequest() as never);
    let envelope: { blocked: boolean; stage?: string } | undefined;
    const raw: string[] = [];
    stream.on('streamEvent', (e) => {
      raw.push(JSON.stringify(e));
      const s = (e as unknown as { service?: typeof envelope }).service;
      if (s) envelope = s;
    });
    const final = await stream.finalMessage();
    t.equal(envelope?.blocked, true);
    t.equal(envelope?.stage, 'output');
    t.notMatch(raw.join('\n'), /john\.roe/, 'no byte of the thinking reached the agent');
    t.same(
      final.content.map((b) => b.type),
      ['text', 'text'],
    );
    t.match(final.content[1]?.type === 'text' ? final.content[1].text : '', /blocked by governance policy/);
  });
});
