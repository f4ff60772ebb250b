import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

// An OpenAI client's custom (freeform) tools on an Anthropic model (docs/lifecycle.md, "Custom
// tools on an Anthropic model"): a text-format tool goes as a tool of one string, `input`, and
// comes back as a custom call; a grammar-format tool is refused, as Anthropic cannot enforce it.

const SECRET = 'AKIAIOSFODNN7EXAMPLQ';
const SHELL: OpenAI.Chat.ChatCompletionCustomTool = {
  type: 'custom',
  custom: { name: 'shell', description: 'Runs one shell command' },
};
const ONE_STRING = {
  type: 'object',
  properties: { input: { type: 'string' } },
  required: ['input'],
  additionalProperties: false,
};

/** An Anthropic answer calling `shell` with `input`. */
function callsShell(input: string): Record<string, unknown> {
  return {
    id: 'msg_ct',
    type: 'message',
    role: 'assistant',
    model: 'claude-test',
    content: [
      { type: 'text', text: 'Running it.' },
      { type: 'tool_use', id: 'toolu_ct', name: 'shell', input: { input } },
    ],
    stop_reason: 'tool_use',
    stop_sequence: null,
    usage: { input_tokens: 10, output_tokens: 5 },
  };
}

async function customCall(stream: AsyncIterable<OpenAI.Chat.ChatCompletionChunk>) {
  const call = { id: '', type: '', name: '', input: '' };
  let last: any;
  for await (const c of stream) {
    last = c;
    for (const tc of (c.choices[0]?.delta.tool_calls ?? []) as any[]) {
      if (tc.id) call.id = tc.id;
      if (tc.type) call.type = tc.type;
      if (tc.custom?.name) call.name = tc.custom.name;
      call.input += tc.custom?.input ?? '';
    }
  }
  return { call, last };
}

t.test('custom tools on an Anthropic model', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  t.afterEach(() => {
    upstream.anthropicMessage = undefined;
  });

  t.test('allowed_tools: only the allowed tools reach an Anthropic model, and required is any', async (t) => {
    upstream.requests.length = 0;
    const body = {
      model: 'claude-test',
      messages: [{ role: 'user', content: 'note it' }],
      tools: [SHELL, { type: 'custom', custom: { name: 'note', format: { type: 'text' } } }],
      tool_choice: {
        type: 'allowed_tools',
        allowed_tools: { mode: 'required', tools: [{ type: 'custom', custom: { name: 'note' } }] },
      },
    };
    await openai.chat.completions.create(body as any);
    let seen = upstream.requests.at(-1)?.body as any;
    t.strictSame(seen.tools, [{ name: 'note', input_schema: ONE_STRING }]);
    t.strictSame(seen.tool_choice, { type: 'any' });
    body.tool_choice.allowed_tools.mode = 'auto';
    await openai.chat.completions.create(body as any);
    seen = upstream.requests.at(-1)?.body as any;
    t.strictSame(seen.tools, [{ name: 'note', input_schema: ONE_STRING }]);
    t.strictSame(seen.tool_choice, { type: 'auto' });
  });

  t.test('a text-format tool, its call in the history and tool_choice are translated', async (t) => {
    upstream.anthropicMessage = callsShell('ls -la /tmp');
    upstream.requests.length = 0;
    const res = await openai.chat.completions.create({
      model: 'claude-test',
      messages: [
        { role: 'user', content: 'list it' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'custom', custom: { name: 'shell', input: 'ls /' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'tmp usr' },
      ],
      tools: [SHELL, { type: 'custom', custom: { name: 'note', format: { type: 'text' } } }],
      tool_choice: { type: 'custom', custom: { name: 'shell' } },
    });
    const seen = upstream.requests.at(-1)?.body as any;
    t.equal(upstream.requests.at(-1)?.path, '/v1/messages');
    t.strictSame(seen.tools, [
      { name: 'shell', description: 'Runs one shell command', input_schema: ONE_STRING },
      { name: 'note', input_schema: ONE_STRING },
    ]);
    t.strictSame(seen.tool_choice, { type: 'tool', name: 'shell' });
    t.strictSame(seen.messages, [
      { role: 'user', content: 'list it' },
      {
        role: 'assistant',
        content: [{ type: 'tool_use', id: 'call_1', name: 'shell', input: { input: 'ls /' } }],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: 'tmp usr' }] },
    ]);
    t.equal(res.choices[0]?.finish_reason, 'tool_calls');
    t.equal(res.choices[0]?.message.content, 'Running it.');
    t.strictSame(res.choices[0]?.message.tool_calls, [
      { id: 'toolu_ct', type: 'custom', custom: { name: 'shell', input: 'ls -la /tmp' } },
    ]);
  });

  t.test("the model's call comes back a custom call when streamed too", async (t) => {
    upstream.anthropicMessage = callsShell('grep -rn "TODO" src/');
    const { call, last } = await customCall(
      await openai.chat.completions.create({
        model: 'claude-test',
        stream: true,
        messages: [{ role: 'user', content: 'find todos' }],
        tools: [SHELL],
      }),
    );
    t.strictSame(call, { id: 'toolu_ct', type: 'custom', name: 'shell', input: 'grep -rn "TODO" src/' });
    t.equal(last.service.blocked, false);
  });

  t.test('the custom input the model gives is guarded, whole and streamed', async (t) => {
    upstream.anthropicMessage = callsShell(`aws configure set key ${SECRET}`);
    const params = {
      model: 'claude-test',
      messages: [{ role: 'user' as const, content: 'x' }],
      tools: [SHELL],
    };
    const whole = await openai.chat.completions.create(params);
    const c = whole.choices[0]?.message.tool_calls?.[0];
    t.equal(c?.type === 'custom' ? c.custom.input : '', 'aws configure set key [SECRET]');
    const { call } = await customCall(await openai.chat.completions.create({ ...params, stream: true }));
    t.equal(call.input, 'aws configure set key [SECRET]');
    const blocked = await openai.chat.completions.create(params, {
      headers: { 'x-service-flags': 'secrets=block' },
    });
    t.equal((blocked as any).service.blocked, true);
    t.notMatch(JSON.stringify(blocked), new RegExp(SECRET));
  });

  t.test('a grammar-format tool is refused with a 400 naming it, whole or streamed', async (t) => {
    for (const stream of [false, true]) {
      upstream.requests.length = 0;
      const res = await svc.call('/v1/chat/completions', {
        token: svc.agentKey,
        body: {
          model: 'claude-test',
          stream,
          messages: [{ role: 'user', content: 'q' }],
          tools: [
            SHELL,
            {
              type: 'custom',
              custom: {
                name: 'sql',
                format: { type: 'grammar', grammar: { syntax: 'lark', definition: 'start: "a"' } },
              },
            },
          ],
        },
      });
      t.equal(res.status, 400, `stream ${stream}: 400`);
      t.equal(res.body.error.code, 'invalid_request');
      t.equal(res.body.error.param, 'tools[1].custom.format');
      t.match(res.body.error.message, /grammar/);
      t.equal(upstream.requests.length, 0, `stream ${stream}: the provider never saw it`);
    }
    // The refusal is on the audit trail, as a call that could not be made: no provider got it.
    const audit = await svc.call('/api/audit?event_type=llm_call&limit=2', { token: svc.pat });
    for (const event of audit.body.data) {
      t.equal(event.outcome, 'error');
      t.equal(event.details.error_code, 'invalid_request');
      t.equal(event.details.status, 400);
      t.equal(event.provider, null, 'no provider received it');
      t.equal(event.details.routed_provider, 'anthropic', 'the one it was routed to is a detail');
    }
    const metrics = await svc.call('/api/metrics', { token: svc.pat });
    t.notMatch(
      String(metrics.body),
      /govgate_upstream_duration_seconds_count\{provider="anthropic",outcome="error"\}/,
      'nor is it counted as a provider error',
    );
  });
});
