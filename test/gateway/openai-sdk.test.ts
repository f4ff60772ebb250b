import OpenAI from 'openai';
import t from 'tap';
import { type MockUpstream, startMockUpstream } from '../helpers/mock-upstream.js';
import { ENGINES, startService, type TestService, useMockUpstream } from '../helpers/service.js';

const TOOL = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

for (const engine of ENGINES) {
  t.test(`official openai client through govgate (${engine})`, async (t) => {
    const upstream: MockUpstream = await startMockUpstream();
    const svc: TestService = await startService({ engine, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
    t.teardown(async () => {
      await svc.close();
      await upstream.close();
    });
    await useMockUpstream(svc, svc.pat, upstream.url);
    const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });

    t.test(
      'chat completion reaches the openai upstream with the provider key, not the agent key',
      async (t) => {
        upstream.requests.length = 0;
        const res = await client.chat.completions.create({
          model: 'gpt-test',
          messages: [{ role: 'user', content: 'hello there' }],
        });
        t.equal(res.choices[0]?.message.content, 'upstream-openai: hello there');
        t.equal(res.usage?.total_tokens, 18);
        const service = (res as unknown as { service: Record<string, unknown> }).service;
        t.equal(service.blocked, false);
        t.match(service.session_id, /^ses_/);
        t.match(service.task_id, /^tsk_/);
        t.match(service.audit_url, new RegExp(`^${svc.url}/api/audit/pipeline/pl_`));
        const seen = upstream.requests.at(-1);
        t.equal(seen?.path, '/v1/chat/completions');
        t.equal(seen?.headers.authorization, 'Bearer sk-test-openai-0001');
        t.equal((seen?.body as { temperature?: number }).temperature, 0.7, 'default temperature applied');
        const audit = await svc.call(new URL(service.audit_url as string).pathname, { token: svc.pat });
        t.equal(audit.status, 200);
        t.equal(audit.body.data[0].event_type, 'llm_call');
        t.equal(audit.body.data[0].provider, 'openai');
        t.equal(audit.body.data[0].agent_id, 'default-agent');
      },
    );

    t.test('explicit temperature and unknown fields pass through unchanged', async (t) => {
      upstream.requests.length = 0;
      await client.chat.completions.create({
        model: 'gpt-test',
        messages: [{ role: 'user', content: 'x' }],
        temperature: 0.2,
        seed: 7,
        ...({ vendor_extra: { a: 1 } } as any),
      });
      const body = upstream.requests.at(-1)?.body as Record<string, unknown>;
      t.equal(body.temperature, 0.2);
      t.equal(body.seed, 7);
      t.same(body.vendor_extra, { a: 1 });
    });

    t.test('reasoning models get no default temperature (they refuse any but their own)', async (t) => {
      const expected: [string, number | undefined][] = [
        ['o9-mini', undefined],
        ['gpt-5', undefined],
        ['gpt-5-mini', undefined],
        ['gpt-5.2', undefined],
        ['gpt-5-chat-latest', 0.7],
        ['gpt-4.1', 0.7],
      ];
      for (const [model, temperature] of expected) {
        await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
        const body = upstream.requests.at(-1)?.body as { temperature?: number };
        t.equal(body.temperature, temperature, `${model}: temperature ${temperature ?? 'absent'}`);
      }
    });

    t.test('temperature: null gets the default 0.7 too, streamed or not', async (t) => {
      for (const stream of [false, true]) {
        upstream.requests.length = 0;
        const res = await client.chat.completions.create({
          model: 'gpt-test',
          messages: [{ role: 'user', content: 'x' }],
          temperature: null,
          stream,
        });
        if (stream) for await (const _ of res as AsyncIterable<unknown>);
        const seen = upstream.requests.at(-1);
        t.equal(
          (seen?.body as { temperature?: unknown }).temperature,
          0.7,
          `stream ${stream}: 0.7 reached the provider`,
        );
        t.equal(seen?.raw.split('"temperature"').length, 2, `stream ${stream}: one temperature member`);
      }
    });

    t.test('a streamed request keeps every client member and asks the upstream for usage', async (t) => {
      upstream.requests.length = 0;
      const params = {
        model: 'gpt-test',
        stream: true,
        stream_options: { include_usage: false, vendor_option: 'x' },
        messages: [{ role: 'user', content: 'count me' }],
        temperature: 0.3,
        vendor_extra: { b: 2 },
      } as OpenAI.ChatCompletionCreateParamsStreaming;
      const stream = await client.chat.completions.create(params);
      const chunks: Record<string, unknown>[] = [];
      for await (const chunk of stream) chunks.push(chunk as unknown as Record<string, unknown>);
      const body = upstream.requests.at(-1)?.body as Record<string, unknown>;
      t.equal(body.stream, true);
      t.same(body.stream_options, { include_usage: true, vendor_option: 'x' });
      t.equal(body.temperature, 0.3);
      t.same(body.vendor_extra, { b: 2 });
      t.same(body.messages, [{ role: 'user', content: 'count me' }]);
      // The client did not ask for usage, so it gets none (the audit trail still records it).
      t.notOk(
        chunks.some((c) => c.usage),
        'no usage chunk reaches a client that did not ask for it',
      );
      const service = chunks.at(-1)?.service as { audit_url: string };
      const audit = await svc.call(new URL(service.audit_url).pathname, { token: svc.pat });
      t.same(audit.body.data[0].usage, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
    });

    t.test('streaming ends with the envelope chunk and [DONE]', async (t) => {
      const stream = await client.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'stream me' }],
      });
      let text = '';
      let last: Record<string, unknown> | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        last = chunk as unknown as Record<string, unknown>;
      }
      t.equal(text, 'upstream-openai: stream me');
      t.equal((last?.service as { blocked: boolean }).blocked, false);
      t.same(last?.choices, []);
    });

    t.test('raw SSE ends with data: [DONE]', async (t) => {
      const res = await fetch(`${svc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${svc.agentKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'gpt-test',
          stream: true,
          messages: [{ role: 'user', content: 'raw' }],
        }),
      });
      t.match(res.headers.get('content-type'), /text\/event-stream/);
      const body = await res.text();
      t.ok(body.endsWith('data: [DONE]\n\n'));
      t.ok(res.headers.get('x-request-id'));
    });

    t.test('tools and tool calls, non-streaming and streaming', async (t) => {
      const res = await client.chat.completions.create({
        model: 'gpt-test',
        tools: [TOOL],
        messages: [{ role: 'user', content: 'weather?' }],
      });
      const call = res.choices[0]?.message.tool_calls?.[0];
      t.equal(res.choices[0]?.finish_reason, 'tool_calls');
      t.equal(call?.type === 'function' ? call.function.name : '', 'get_weather');
      t.same(JSON.parse(call?.type === 'function' ? call.function.arguments : '{}'), { city: 'Paris' });
      const stream = client.chat.completions.stream({
        model: 'gpt-test',
        tools: [TOOL],
        messages: [{ role: 'user', content: 'weather?' }],
      });
      const final = await stream.finalChatCompletion();
      const streamed = final.choices[0]?.message.tool_calls?.[0];
      t.equal(streamed?.type === 'function' ? streamed.function.arguments : '', '{"city":"Paris"}');
    });

    t.test('mock-tools offline: tool call then answer from the tool result', async (t) => {
      const first = await client.chat.completions.create({
        model: 'mock-tools',
        tools: [TOOL],
        messages: [{ role: 'user', content: 'weather?' }],
      });
      const call = first.choices[0]?.message.tool_calls?.[0];
      t.ok(call);
      const second = await client.chat.completions.create({
        model: 'mock-tools',
        tools: [TOOL],
        messages: [
          { role: 'user', content: 'weather?' },
          { role: 'assistant', content: null, tool_calls: first.choices[0]?.message.tool_calls },
          { role: 'tool', tool_call_id: call?.id ?? '', content: 'sunny, 21C' },
        ],
      });
      t.equal(second.choices[0]?.message.content, 'The tool returned: sunny, 21C');
    });

    t.test('embeddings', async (t) => {
      const res = await client.embeddings.create({
        model: 'text-embedding-test',
        input: ['a', 'b'],
        encoding_format: 'float',
      });
      t.equal(res.data.length, 2);
      t.same(res.data[0]?.embedding, [0.1, 0.2, 0.3]);
      t.equal(upstream.requests.at(-1)?.path, '/v1/embeddings');
      const mock = await client.embeddings.create({
        model: 'mock-echo',
        input: 'same text',
        encoding_format: 'float',
      });
      const again = await client.embeddings.create({
        model: 'mock-echo',
        input: 'same text',
        encoding_format: 'float',
      });
      t.same(mock.data[0]?.embedding, again.data[0]?.embedding, 'mock embeddings are deterministic');
      // The SDK's default asks for base64 and decodes it: the mock answers it as OpenAI does.
      const b64 = await client.embeddings.create({ model: 'mock-echo', input: 'same text' });
      const vector = b64.data[0]?.embedding ?? [];
      t.equal(vector.length, 16);
      t.same(vector, (mock.data[0]?.embedding ?? []).map(Math.fround), 'the same vector, as float32');
    });

    t.test('models are filtered to the org providers', async (t) => {
      const models = [];
      for await (const m of client.models.list()) models.push(m.id);
      t.ok(models.includes('gpt-test'), 'openai glob match listed');
      t.ok(models.includes('o9-test'));
      t.notOk(models.includes('dall-e-x'), 'upstream model outside the configured globs is hidden');
      t.ok(models.includes('claude-test-1'), 'anthropic models listed');
      t.ok(models.includes('mock-echo'));
    });

    t.test('a model no provider offers is a 400 model_not_found', async (t) => {
      const err = await client.chat.completions
        .create({ model: 'llama-x', messages: [{ role: 'user', content: 'x' }] })
        .catch((e: unknown) => e);
      t.ok(err instanceof OpenAI.BadRequestError);
      t.equal((err as InstanceType<typeof OpenAI.APIError>).code, 'model_not_found');
    });
  });
}
