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
