import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import type { MockUpstream } from '../helpers/mock-upstream.js';
import { serviceOnMockUpstream, type TestService } from '../helpers/service.js';

// Answers from the provider that break its wire format: the agent gets the contract's error and
// the call, which reached the provider, is audited.

function completion(
  message: unknown,
  usage: unknown = { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 },
) {
  return JSON.stringify({
    id: 'chatcmpl-bad',
    object: 'chat.completion',
    created: 1,
    model: 'gpt-test',
    choices: [{ index: 0, message, finish_reason: 'stop' }],
    usage,
  });
}

const toolMessage = (call: unknown) => ({ role: 'assistant', content: null, tool_calls: [call] });

/** The llm_call events of a session. */
async function callEvents(svc: TestService, session: string): Promise<any[]> {
  const res = await svc.call(`/api/audit/session/${session}`, { token: svc.pat });
  return ((res.body.data ?? []) as any[]).filter((e) => e.event_type === 'llm_call');
}

async function post(
  svc: TestService,
  path: string,
  body: unknown,
  session: string,
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${svc.url}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${svc.agentKey}`,
      'content-type': 'application/json',
      'x-session-id': session,
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

t.test('a malformed upstream completion is a 502, and the call is audited', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openaiCases: [string, string][] = [
    ['a tool call without function', completion(toolMessage({ id: 'c1', type: 'function' }))],
    [
      'tool arguments as an object',
      completion(toolMessage({ id: 'c1', type: 'function', function: { name: 'f', arguments: { a: 1 } } })),
    ],
    [
      'a tool call name that is not a string',
      completion(toolMessage({ id: 'c1', function: { arguments: '{}' } })),
    ],
    ['tool_calls that is not a list', completion({ role: 'assistant', content: null, tool_calls: {} })],
    ['content as a list of parts', completion({ role: 'assistant', content: [{ type: 'text', text: 'x' }] })],
    ['a choice without a message', completion(null)],
    ['usage with a non-number', completion({ role: 'assistant', content: 'x' }, { prompt_tokens: { n: 1 } })],
  ];
  const anthropicCases: [string, unknown][] = [
    ['a null content block', [null]],
    ['a text block without text', [{ type: 'text' }]],
    ['a tool_use block without a name', [{ type: 'tool_use', id: 'toolu_1', input: {} }]],
  ];
  let n = 0;
  const check = async (name: string, b: MockUpstream['behaviour'], path: string, model: string) => {
    upstream.behaviour = b;
    upstream.requests.length = 0;
    const session = `bad-answer-${n++}`;
    const body =
      path === '/v1/messages'
        ? { model, max_tokens: 50, messages: [{ role: 'user', content: 'q' }] }
        : { model, messages: [{ role: 'user', content: 'q' }] };
    const res = await post(svc, path, body, session);
    t.equal(upstream.requests.length, 1, `${name} (${path}, ${model}): the provider was called`);
    t.equal(res.status, 502, `${name} (${path}, ${model}): 502`);
    t.equal(res.body.error?.code, 'upstream_error');
    const events = await callEvents(svc, session);
    t.equal(events.length, 1, `${name} (${path}, ${model}): audited`);
    t.equal(events[0]?.outcome, 'error');
    t.equal(events[0]?.details.error_code, 'upstream_error');
  };
  for (const [name, body] of openaiCases) {
    const b = { kind: 'raw' as const, contentType: 'application/json', body };
    await check(name, b, '/v1/chat/completions', 'gpt-test');
    await check(name, b, '/v1/messages', 'gpt-test');
  }
  for (const [name, content] of anthropicCases) {
    const body = JSON.stringify({
      id: 'msg_bad',
      type: 'message',
      role: 'assistant',
      model: 'claude-test',
      content,
      stop_reason: 'end_turn',
      usage: { input_tokens: 1, output_tokens: 1 },
    });
    const b = { kind: 'raw' as const, contentType: 'application/json', body };
    await check(name, b, '/v1/chat/completions', 'claude-test');
    await check(name, b, '/v1/messages', 'claude-test');
  }

  // A failure after the provider answered (here: rendering an answer without an id as an
  // Anthropic message) is audited as an error, not as the allowed call it did not become.
  upstream.behaviour = {
    kind: 'raw',
    contentType: 'application/json',
    body: JSON.stringify({ ...JSON.parse(completion({ role: 'assistant', content: 'x' })), id: undefined }),
  };
  const res = await post(
    svc,
    '/v1/messages',
    { model: 'gpt-test', max_tokens: 50, messages: [{ role: 'user', content: 'q' }] },
    'no-id',
  );
  t.equal(res.status, 500);
  const events = await callEvents(svc, 'no-id');
  t.equal(events.length, 1, 'the call is audited once');
  t.equal(events[0]?.outcome, 'error', 'as an error');
  t.equal(events[0]?.details.error_code, 'internal_error');

  // Well-formed answers still pass, through the official clients.
  upstream.behaviour = { kind: 'normal' };
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const tools = [
    { type: 'function' as const, function: { name: 'weather', parameters: { type: 'object' } } },
  ];
  const ok = await openai.chat.completions.create({
    model: 'gpt-test',
    tools,
    messages: [{ role: 'user', content: 'q' }],
  });
  t.equal((ok.choices[0]?.message.tool_calls?.[0] as any)?.function.arguments, '{"city":"Paris"}');
  const msg = await anthropic.messages.create({
    model: 'claude-test',
    max_tokens: 50,
    messages: [{ role: 'user', content: 'q' }],
  });
  t.equal(msg.content[0]?.type, 'text');
});

t.test('an upstream stream that ends before its terminal event is an upstream failure', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const base = { id: 'chatcmpl-cut', object: 'chat.completion.chunk', created: 1, model: 'gpt-test' };
  const chunk = (delta: unknown, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const ev = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const anthropicStart =
    ev('message_start', {
      message: {
        id: 'msg_cut',
        type: 'message',
        role: 'assistant',
        model: 'claude-test',
        content: [],
        stop_reason: null,
        usage: { input_tokens: 3, output_tokens: 0 },
      },
    }) +
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
    ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'The answer is' } });
  const sse = (body: string) => ({ kind: 'raw' as const, contentType: 'text/event-stream', body });
  const cases: [string, MockUpstream['behaviour'], string][] = [
    [
      'openai, no [DONE]',
      sse(chunk({ role: 'assistant', content: '' }) + chunk({ content: 'The answer is' })),
      'gpt-test',
    ],
    [
      'openai, finish chunk but no [DONE]',
      sse(chunk({ role: 'assistant', content: 'The answer is' }) + chunk({}, 'stop')),
      'gpt-test',
    ],
    ['anthropic, no message_stop', sse(anthropicStart), 'claude-test'],
    [
      'anthropic, message_delta but no message_stop',
      sse(
        `${anthropicStart}${ev('content_block_stop', { index: 0 })}${ev('message_delta', {
          delta: { stop_reason: 'end_turn', stop_sequence: null },
          usage: { output_tokens: 3 },
        })}`,
      ),
      'claude-test',
    ],
  ];
  let n = 0;
  for (const [name, behaviour, model] of cases) {
    for (const path of ['/v1/chat/completions', '/v1/messages']) {
      upstream.behaviour = behaviour;
      const session = `cut-${n++}`;
      const res = await fetch(`${svc.url}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${svc.agentKey}`,
          'content-type': 'application/json',
          'x-session-id': session,
        },
        body: JSON.stringify({
          model,
          max_tokens: 50,
          stream: true,
          messages: [{ role: 'user', content: 'q' }],
        }),
      });
      const text = await res.text();
      const what = `${name} (${path})`;
      t.equal(res.status, 200, `${what}: the stream had started`);
      t.notMatch(text, /data: \[DONE\]|event: message_stop|"service"/, `${what}: not presented as complete`);
      // A finish the upstream did send is relayed; none is made up.
      if (!name.includes('finish chunk') && !name.includes('message_delta'))
        t.notMatch(text, /"finish_reason":"stop"|"end_turn"/, `${what}: no finish made up`);
      if (path === '/v1/messages') {
        // Anthropic's error event, whose `error` is the contract's error object.
        const data = /event: error\ndata: (.*)\n\n/.exec(text)?.[1];
        t.strictSame(
          JSON.parse(data ?? 'null'),
          {
            type: 'error',
            error: {
              type: 'api_error',
              code: 'upstream_error',
              message: JSON.parse(data ?? '{"error":{}}').error.message,
              request_id: res.headers.get('x-request-id'),
            },
          },
          `${what}: error event`,
        );
      } else
        t.match(
          text,
          /data: \{"type":"error","error":\{[^\n]*"code":"upstream_error"/,
          `${what}: error event`,
        );
      const events = await callEvents(svc, session);
      t.equal(events.length, 1, `${what}: audited`);
      t.equal(events[0]?.outcome, 'error', `${what}: audited as an error`);
      t.equal(events[0]?.details.error_code, 'upstream_error');
    }
  }

  // A 2xx answer that is no event stream at all fails before the first byte: a plain 502.
  upstream.behaviour = { kind: 'raw', contentType: 'application/json', body: '{"choices":[]}' };
  for (const model of ['gpt-test', 'claude-test']) {
    const session = `not-sse-${model}`;
    const res = await post(
      svc,
      '/v1/chat/completions',
      { model, stream: true, messages: [{ role: 'user', content: 'q' }] },
      session,
    );
    t.equal(res.status, 502, `${model}: 502`);
    t.equal(res.body.error.code, 'upstream_error');
    const events = await callEvents(svc, session);
    t.equal(events[0]?.outcome, 'error', `${model}: audited as an error`);
  }

  // Complete streams are unchanged.
  upstream.behaviour = { kind: 'normal' };
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  let last: any;
  for await (const c of await openai.chat.completions.create({
    model: 'claude-test',
    stream: true,
    messages: [{ role: 'user', content: 'q' }],
  }))
    last = c;
  t.equal(last.service.blocked, false);
});
