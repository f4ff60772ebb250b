import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { ENGINES, startService, useMockUpstream } from '../helpers/service.js';

const WEATHER = {
  name: 'get_weather',
  description: 'Weather for a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};

for (const engine of ENGINES) {
  t.test(`official anthropic client through govgate (${engine})`, async (t) => {
    const upstream = await startMockUpstream();
    const svc = await startService({ engine, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
    t.teardown(async () => {
      await svc.close();
      await upstream.close();
    });
    await useMockUpstream(svc, svc.pat, upstream.url);
    const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
    const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });

    t.test('messages to an anthropic model: x-api-key, system, default max_tokens', async (t) => {
      upstream.requests.length = 0;
      const res = await anthropic.messages.create({
        model: 'claude-test-1',
        max_tokens: 100,
        system: 'be brief',
        messages: [{ role: 'user', content: 'hi' }],
      });
      const text = res.content[0]?.type === 'text' ? res.content[0].text : '';
      t.equal(text, 'upstream-anthropic [system:be brief]: hi');
      t.equal(res.stop_reason, 'end_turn');
      t.equal(res.usage.input_tokens, 13);
      t.equal((res as unknown as { service: { blocked: boolean } }).service.blocked, false);
      const seen = upstream.requests.at(-1);
      t.equal(seen?.path, '/v1/messages');
      t.equal(seen?.headers['x-api-key'], 'sk-ant-test-0002');
      t.equal((seen?.body as { max_tokens: number }).max_tokens, 100);
      const raw = await svc.call('/v1/messages', {
        headers: { 'x-api-key': svc.agentKey },
        body: { model: 'claude-test-1', messages: [{ role: 'user', content: 'no max' }] },
      });
      t.equal(raw.status, 200);
      t.equal(
        (upstream.requests.at(-1)?.body as { max_tokens: number }).max_tokens,
        4096,
        'max_tokens defaults to 4096',
      );
    });

    t.test('messages streaming: events, text, envelope on message_delta', async (t) => {
      const stream = anthropic.messages.stream({
        model: 'claude-test-1',
        max_tokens: 50,
        messages: [{ role: 'user', content: 'stream' }],
      });
      let sawEnvelope = false;
      stream.on('streamEvent', (e) => {
        if (e.type === 'message_delta' && (e as unknown as { service?: unknown }).service) sawEnvelope = true;
      });
      const final = await stream.finalMessage();
      const text = final.content[0]?.type === 'text' ? final.content[0].text : '';
      t.equal(text, 'upstream-anthropic: stream');
      t.ok(sawEnvelope, 'service envelope rides on message_delta');
    });

    t.test('anthropic client → openai model (translation), with tools, non-streaming', async (t) => {
      upstream.requests.length = 0;
      const res = await anthropic.messages.create({
        model: 'gpt-test',
        max_tokens: 64,
        system: 'sys prompt',
        tools: [WEATHER],
        messages: [{ role: 'user', content: 'weather?' }],
      });
      const seen = upstream.requests.at(-1);
      t.equal(seen?.path, '/v1/chat/completions', 'went to the openai upstream');
      const body = seen?.body as { messages: { role: string; content: unknown }[]; tools: unknown[] };
      t.same(body.messages[0], { role: 'system', content: 'sys prompt' });
      t.equal(body.tools.length, 1);
      const tool = res.content.find((b) => b.type === 'tool_use');
      t.equal(res.stop_reason, 'tool_use');
      t.same(tool?.type === 'tool_use' ? tool.input : null, { city: 'Paris' });
    });

    t.test('anthropic client → openai model, streaming', async (t) => {
      const final = await anthropic.messages
        .stream({ model: 'gpt-test', max_tokens: 64, messages: [{ role: 'user', content: 'cross stream' }] })
        .finalMessage();
      t.equal(
        final.content[0]?.type === 'text' ? final.content[0].text : '',
        'upstream-openai: cross stream',
      );
      const tools = await anthropic.messages
        .stream({
          model: 'gpt-test',
          max_tokens: 64,
          tools: [WEATHER],
          messages: [{ role: 'user', content: 'w' }],
        })
        .finalMessage();
      const tu = tools.content.find((b) => b.type === 'tool_use');
      t.same(tu?.type === 'tool_use' ? tu.input : null, { city: 'Paris' });
    });

    t.test('openai client → anthropic model (translation), system + tools + streaming', async (t) => {
      upstream.requests.length = 0;
      const res = await openai.chat.completions.create({
        model: 'claude-test-2',
        messages: [
          { role: 'system', content: 'be kind' },
          { role: 'user', content: 'hello' },
        ],
      });
      t.equal(res.choices[0]?.message.content, 'upstream-anthropic [system:be kind]: hello');
      const seen = upstream.requests.at(-1);
      t.equal(seen?.path, '/v1/messages');
      t.equal((seen?.body as { system: string }).system, 'be kind');
      t.equal((seen?.body as { max_tokens: number }).max_tokens, 4096);
      const tools = await openai.chat.completions.create({
        model: 'claude-test-2',
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER.input_schema } }],
        messages: [{ role: 'user', content: 'weather?' }],
      });
      const call = tools.choices[0]?.message.tool_calls?.[0];
      t.equal(tools.choices[0]?.finish_reason, 'tool_calls');
      t.same(JSON.parse(call?.type === 'function' ? call.function.arguments : '{}'), { city: 'Paris' });
      const stream = await openai.chat.completions.create({
        model: 'claude-test-2',
        stream: true,
        messages: [{ role: 'user', content: 'streamed' }],
      });
      let text = '';
      let envelope: unknown;
      for await (const c of stream) {
        text += c.choices[0]?.delta.content ?? '';
        envelope = (c as unknown as { service?: unknown }).service ?? envelope;
      }
      t.equal(text, 'upstream-anthropic: streamed');
      t.ok(envelope);
      const toolStream = openai.chat.completions.stream({
        model: 'claude-test-2',
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER.input_schema } }],
        messages: [{ role: 'user', content: 'weather?' }],
      });
      const final = await toolStream.finalChatCompletion();
      const tc = final.choices[0]?.message.tool_calls?.[0];
      t.equal(tc?.type === 'function' ? tc.function.arguments : '', '{"city":"Paris"}');
    });

    t.test('mock provider through the anthropic client', async (t) => {
      const res = await anthropic.messages.create({
        model: 'mock-echo',
        max_tokens: 10,
        messages: [{ role: 'user', content: 'echo me' }],
      });
      t.equal(res.content[0]?.type === 'text' ? res.content[0].text : '', 'echo me');
    });
  });
}
