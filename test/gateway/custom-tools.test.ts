import OpenAI from 'openai';
import t from 'tap';
import { publishOrgPolicy, serviceOnMockUpstream, type TestService } from '../helpers/service.js';

// OpenAI custom (freeform) tools: a tool whose input is free text, optionally held to a grammar.
// Declared, called in history, named by tool_choice and called by the model, they are accepted,
// forwarded and governed as function tools are (docs/policy.md, "What is scanned").

const SECRET = 'AKIAIOSFODNN7EXAMPLQ';
const EMAIL = 'jane.doe@example.com';

const SHELL: OpenAI.Chat.ChatCompletionCustomTool = {
  type: 'custom',
  custom: { name: 'shell', description: 'Runs one shell command', format: { type: 'text' } },
};
const SQL: OpenAI.Chat.ChatCompletionCustomTool = {
  type: 'custom',
  custom: {
    name: 'sql',
    description: 'One SELECT statement',
    format: { type: 'grammar', grammar: { syntax: 'lark', definition: 'start: "SELECT " /[a-z_, ]+/' } },
  },
};
const WEATHER: OpenAI.Chat.ChatCompletionFunctionTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: {} } },
};

/** A conversation in which the model called `shell` with `input` and got its result. */
function history(input: string): OpenAI.Chat.ChatCompletionMessageParam[] {
  return [
    { role: 'user', content: 'list the files' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'custom', custom: { name: 'shell', input } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: 'a.txt b.txt' },
    { role: 'user', content: 'and now?' },
  ];
}

interface Assembled {
  id?: string;
  type?: string;
  name?: string;
  input: string;
}

/**
 * The custom tool calls of choice 0 of a stream, put together from their deltas as a client does
 * (id and name from the first, pieces of input concatenated). The openai package's chunk type
 * models function deltas only, so the custom member is read untyped.
 */
function assembled(chunks: readonly OpenAI.Chat.ChatCompletionChunk[]): Assembled[] {
  const calls: Assembled[] = [];
  for (const c of chunks)
    for (const ch of c.choices)
      for (const tc of (ch.delta.tool_calls ?? []) as any[]) {
        const call = (calls[tc.index] ??= { input: '' });
        if (tc.id) call.id = tc.id;
        if (tc.type) call.type = tc.type;
        if (tc.custom?.name) call.name = tc.custom.name;
        if (typeof tc.custom?.input === 'string') call.input += tc.custom.input;
      }
  return calls;
}

async function collect(stream: AsyncIterable<OpenAI.Chat.ChatCompletionChunk>) {
  const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

/** The llm_call event of an answer (its service envelope's audit_url). */
async function callEvent(svc: TestService, service: { audit_url: string }): Promise<any> {
  const audit = await svc.call(new URL(service.audit_url).pathname, { token: svc.pat });
  return audit.body.data.find((e: { event_type: string }) => e.event_type === 'llm_call');
}

t.test('custom tools through govgate to an OpenAI upstream', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const post = (body: unknown, headers?: Record<string, string>) =>
    svc.call('/v1/chat/completions', { token: svc.agentKey, body, ...(headers ? { headers } : {}) });
  t.afterEach(() => {
    upstream.customInput = undefined;
    upstream.behaviour = { kind: 'normal' };
  });

  t.test('validation accepts every documented shape', async (t) => {
    const formats: unknown[] = [
      undefined,
      null,
      { type: 'text' },
      { type: 'grammar', grammar: { syntax: 'lark', definition: 'start: "a"+' } },
      { type: 'grammar', grammar: { syntax: 'regex', definition: '^a+$' } },
    ];
    for (const format of formats) {
      const custom: Record<string, unknown> = { name: 'shell' };
      if (format !== undefined) custom.format = format;
      const res = await post({
        model: 'gpt-test',
        messages: history('ls'),
        tools: [{ type: 'custom', custom }],
        tool_choice: { type: 'custom', custom: { name: 'shell' } },
      });
      t.equal(res.status, 200, `format ${JSON.stringify(format)}: ${JSON.stringify(res.body.error)}`);
    }
  });

  t.test('validation refuses bad shapes, naming the param', async (t) => {
    const tool = (custom: unknown) => ({ type: 'custom', custom });
    const grammar = (g: unknown) => tool({ name: 'sql', format: { type: 'grammar', grammar: g } });
    const call = (c: Record<string, unknown>) => [
      { role: 'user', content: 'x' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'custom', ...c }] },
      { role: 'tool', tool_call_id: 'c', content: 'ok' },
    ];
    const cases: [string, Record<string, unknown>, string][] = [
      ['no custom object', { tools: [{ type: 'custom' }] }, 'tools[0].custom'],
      ['no name', { tools: [tool({})] }, 'tools[0].custom.name'],
      ['an empty name', { tools: [WEATHER, tool({ name: '' })] }, 'tools[1].custom.name'],
      [
        'a description that is not text',
        { tools: [tool({ name: 'a', description: 3 })] },
        'tools[0].custom.description',
      ],
      [
        'a format that is not an object',
        { tools: [tool({ name: 'a', format: 'text' })] },
        'tools[0].custom.format',
      ],
      [
        'an unknown format',
        { tools: [tool({ name: 'a', format: { type: 'json' } })] },
        'tools[0].custom.format.type',
      ],
      ['a grammar format without grammar', { tools: [grammar(undefined)] }, 'tools[0].custom.format.grammar'],
      [
        'an unknown syntax',
        { tools: [grammar({ syntax: 'ebnf', definition: 'a' })] },
        'tools[0].custom.format.grammar.syntax',
      ],
      [
        'a definition that is not text',
        { tools: [grammar({ syntax: 'regex', definition: 7 })] },
        'tools[0].custom.format.grammar.definition',
      ],
      [
        'an empty definition',
        { tools: [grammar({ syntax: 'regex', definition: '' })] },
        'tools[0].custom.format.grammar.definition',
      ],
      [
        'a definition over 100,000 characters',
        { tools: [grammar({ syntax: 'regex', definition: 'a'.repeat(100_001) })] },
        'tools[0].custom.format.grammar.definition',
      ],
      ['a history call without custom', { messages: call({}) }, 'messages[1].tool_calls[0].custom'],
      [
        'a history call without a name',
        { messages: call({ custom: { input: 'ls' } }) },
        'messages[1].tool_calls[0].custom.name',
      ],
      [
        'a history call whose input is not text',
        { messages: call({ custom: { name: 'shell', input: { cmd: 'ls' } } }) },
        'messages[1].tool_calls[0].custom.input',
      ],
      [
        'a custom tool_choice without a name',
        { tools: [SHELL], tool_choice: { type: 'custom', custom: {} } },
        'tool_choice.custom.name',
      ],
    ];
    upstream.requests.length = 0;
    for (const [name, fields, param] of cases) {
      const res = await post({ model: 'gpt-test', messages: [{ role: 'user', content: 'x' }], ...fields });
      t.equal(res.status, 400, `${name}: 400`);
      t.equal(res.body.error?.code, 'invalid_request', `${name}: invalid_request`);
      t.equal(res.body.error?.param, param, `${name}: param ${param}`);
    }
    t.equal(upstream.requests.length, 0, 'nothing reached the provider');
    // Exactly at the limit passes.
    const at = await post({
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'x' }],
      tools: [grammar({ syntax: 'regex', definition: 'a'.repeat(100_000) })],
    });
    t.equal(at.status, 200, 'a definition of 100,000 characters is accepted');
  });

  t.test(
    'tools, tool_choice and history reach the provider as sent; the call comes back whole',
    async (t) => {
      upstream.requests.length = 0;
      const params = {
        model: 'gpt-test',
        messages: history('ls -la /srv'),
        tools: [SHELL, SQL, WEATHER],
        tool_choice: { type: 'custom' as const, custom: { name: 'shell' } },
      };
      const res = await openai.chat.completions.create(params);
      const seen = upstream.requests.at(-1)?.body as Record<string, unknown>;
      t.strictSame(seen.tools, params.tools);
      t.strictSame(seen.tool_choice, params.tool_choice);
      t.strictSame(seen.messages, params.messages);
      t.equal(res.choices[0]?.finish_reason, 'tool_calls');
      t.strictSame(res.choices[0]?.message.tool_calls, [
        { id: 'call_up_1', type: 'custom', custom: { name: 'shell', input: 'ls -la' } },
      ]);
      const event = await callEvent(svc, (res as any).service);
      t.strictSame(event.details.tool_calls, ['shell'], 'the audit trail names the tool the model called');
    },
  );

  t.test('a streamed custom call is reassembled by the client', async (t) => {
    upstream.customInput = 'find / -name "*.log" -mtime -1';
    const chunks = await collect(
      await openai.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'logs?' }],
        tools: [SHELL],
      }),
    );
    t.strictSame(assembled(chunks), [
      { id: 'call_up_1', type: 'custom', name: 'shell', input: 'find / -name "*.log" -mtime -1' },
    ]);
    t.equal(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0]?.finish_reason, 'tool_calls');
    const event = await callEvent(svc, (chunks.at(-1) as any).service);
    t.strictSame(event.details.tool_calls, ['shell']);
  });

  t.test('input: descriptions and history inputs are redacted in place, as text', async (t) => {
    upstream.requests.length = 0;
    await openai.chat.completions.create({
      model: 'gpt-test',
      messages: history(`aws configure set key ${SECRET} && mail ${EMAIL}`),
      tools: [{ type: 'custom', custom: { name: 'shell', description: `Reports go to ${EMAIL}` } }],
    });
    const seen = upstream.requests.at(-1)?.body as any;
    t.equal(seen.tools[0].custom.description, 'Reports go to [EMAIL]');
    t.equal(seen.messages[1].tool_calls[0].custom.input, 'aws configure set key [SECRET] && mail [EMAIL]');
    t.notMatch(upstream.requests.at(-1)?.raw ?? '', new RegExp(`${SECRET}|jane\\.doe`));
  });

  t.test(
    'input: a grammar definition cannot be rewritten, so a finding to redact refuses the call',
    async (t) => {
      upstream.requests.length = 0;
      const res = await openai.chat.completions.create({
        model: 'gpt-test',
        messages: [{ role: 'user', content: 'query' }],
        tools: [
          SHELL,
          {
            type: 'custom',
            custom: {
              name: 'login',
              format: { type: 'grammar', grammar: { syntax: 'regex', definition: `^login ${SECRET}$` } },
            },
          },
        ],
      });
      t.equal(upstream.requests.length, 0, 'the provider never saw it');
      t.equal((res as any).service.blocked, true);
      t.equal((res as any).service.rule_id, 'detector:secrets');
      t.match((res as any).service.reason, /tools\[1\]\.custom\.format\.grammar\.definition/);
    },
  );

  t.test(
    'input: secrets=block blocks a secret in a description, a definition or a history input',
    async (t) => {
      const headers = { headers: { 'x-service-flags': 'secrets=block' } };
      const grammarTool: OpenAI.Chat.ChatCompletionCustomTool = {
        type: 'custom',
        custom: { name: 'k', format: { type: 'grammar', grammar: { syntax: 'regex', definition: SECRET } } },
      };
      const cases: [string, OpenAI.Chat.ChatCompletionCreateParamsNonStreaming][] = [
        [
          'description',
          {
            model: 'gpt-test',
            messages: [{ role: 'user', content: 'x' }],
            tools: [{ type: 'custom', custom: { name: 'k', description: `key ${SECRET}` } }],
          },
        ],
        [
          'definition',
          { model: 'gpt-test', messages: [{ role: 'user', content: 'x' }], tools: [grammarTool] },
        ],
        ['history input', { model: 'gpt-test', messages: history(`echo ${SECRET}`), tools: [SHELL] }],
      ];
      for (const [name, body] of cases) {
        upstream.requests.length = 0;
        const res = await openai.chat.completions.create(body, headers);
        t.equal((res as any).service.blocked, true, `${name}: blocked`);
        t.equal((res as any).service.rule_id, 'detector:secrets', `${name}: by the secrets detector`);
        t.equal(upstream.requests.length, 0, `${name}: the provider was not called`);
      }
    },
  );

  t.test("output: the model's custom input is redacted, whole and streamed", async (t) => {
    upstream.customInput = `aws configure set key ${SECRET} && mail ${EMAIL}`;
    const expected = 'aws configure set key [SECRET] && mail [EMAIL]';
    const whole = await openai.chat.completions.create({
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'configure it' }],
      tools: [SHELL],
    });
    const call = whole.choices[0]?.message.tool_calls?.[0];
    t.equal(call?.type === 'custom' ? call.custom.input : undefined, expected);
    t.strictSame((await callEvent(svc, (whole as any).service)).details.output_detections, ['email']);
    const chunks = await collect(
      await openai.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'configure it' }],
        tools: [SHELL],
      }),
    );
    t.strictSame(assembled(chunks), [{ id: 'call_up_1', type: 'custom', name: 'shell', input: expected }]);
    t.notMatch(JSON.stringify(chunks), new RegExp(`${SECRET}|jane\\.doe`));
    const event = await callEvent(svc, (chunks.at(-1) as any).service);
    t.strictSame(event.details.output_detections, ['email']);
    t.strictSame(event.details.tool_calls, ['shell']);
  });

  t.test(
    "output: secrets=block blocks the answer on the model's custom input, whole and streamed",
    async (t) => {
      upstream.customInput = `export KEY=${SECRET}`;
      const headers = { headers: { 'x-service-flags': 'secrets=block' } };
      const params = {
        model: 'gpt-test',
        messages: [{ role: 'user' as const, content: 'x' }],
        tools: [SHELL],
      };
      const whole = await openai.chat.completions.create(params, headers);
      t.notMatch(JSON.stringify(whole), new RegExp(SECRET));
      t.equal((whole as any).service.blocked, true);
      t.equal((whole as any).service.stage, 'output');
      t.match(whole.choices[0]?.message.content, /blocked by governance policy/);
      const chunks = await collect(
        await openai.chat.completions.create({ ...params, stream: true }, headers),
      );
      t.notMatch(JSON.stringify(chunks), new RegExp(SECRET), 'no piece of the secret went out');
      t.strictSame(assembled(chunks), [], 'no tool call went out');
      const last = chunks.at(-1) as any;
      t.equal(last.service.blocked, true);
      t.equal(last.service.stage, 'output');
      t.equal((await callEvent(svc, last.service)).details.blocked_stage, 'output_tool_call');
    },
  );

  t.test('Idempotency-Key replays an answer with a custom call, whole and streamed', async (t) => {
    const body = {
      model: 'gpt-test',
      messages: [{ role: 'user' as const, content: 'once' }],
      tools: [SHELL],
    };
    const before = upstream.requests.length;
    const first = await openai.chat.completions.create(body, { headers: { 'Idempotency-Key': 'ct-1' } });
    const again = await openai.chat.completions
      .create(body, { headers: { 'Idempotency-Key': 'ct-1' } })
      .withResponse();
    t.equal(again.response.headers.get('idempotent-replayed'), 'true');
    t.strictSame(again.data, first);
    t.equal(again.data.choices[0]?.message.tool_calls?.[0]?.type, 'custom');
    const s1 = await collect(
      await openai.chat.completions.create(
        { ...body, stream: true },
        { headers: { 'Idempotency-Key': 'ct-2' } },
      ),
    );
    const s2 = await collect(
      await openai.chat.completions.create(
        { ...body, stream: true },
        { headers: { 'Idempotency-Key': 'ct-2' } },
      ),
    );
    t.strictSame(s2, s1);
    t.strictSame(assembled(s2), [{ id: 'call_up_1', type: 'custom', name: 'shell', input: 'ls -la' }]);
    t.equal(upstream.requests.length, before + 2, 'one upstream call per key');
  });

  t.test('mock-tools calls a custom tool with the user text, then answers from its result', async (t) => {
    const first = await openai.chat.completions.create({
      model: 'mock-tools',
      messages: [{ role: 'user', content: 'uname -a' }],
      tools: [SHELL, WEATHER],
    });
    const call = first.choices[0]?.message.tool_calls?.[0];
    t.equal(first.choices[0]?.finish_reason, 'tool_calls');
    t.equal(call?.type, 'custom');
    t.strictSame(call?.type === 'custom' ? call.custom : undefined, { name: 'shell', input: 'uname -a' });
    const streamed = await collect(
      await openai.chat.completions.create({
        model: 'mock-tools',
        stream: true,
        messages: [{ role: 'user', content: 'uname -a' }],
        tools: [SHELL],
      }),
    );
    const [s] = assembled(streamed);
    t.match(s, { type: 'custom', name: 'shell', input: 'uname -a' });
    t.match(s?.id, /^call_/);
    const second = await openai.chat.completions.create({
      model: 'mock-tools',
      tools: [SHELL],
      messages: [
        { role: 'user', content: 'uname -a' },
        { role: 'assistant', content: null, tool_calls: first.choices[0]?.message.tool_calls ?? [] },
        { role: 'tool', tool_call_id: call?.id ?? '', content: 'Linux' },
      ],
    });
    t.equal(second.choices[0]?.message.content, 'The tool returned: Linux');
  });
});

t.test('custom tools under a published policy', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  // No output detector: the answer is not held, so the upstream's deltas go out as they came.
  await publishOrgPolicy(svc, 'no-shell', {
    mode: 'enforce',
    detectors: { pii: { action: 'off' }, secrets: { action: 'off' }, unicode: { action: 'off' } },
    rules: [
      {
        id: 'no-shell',
        when: { type: 'LLM_CALL', all: [{ field: 'payload.tools', op: 'contains', value: 'shell' }] },
        then: 'block',
        reason: 'agents get no shell',
      },
    ],
  });

  t.test('a rule on the declared tools sees a custom tool by its name', async (t) => {
    upstream.requests.length = 0;
    const res = await openai.chat.completions.create({
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'x' }],
      tools: [WEATHER, SHELL],
    });
    t.equal((res as any).service.blocked, true);
    t.equal((res as any).service.rule_id, 'no-shell');
    t.equal(upstream.requests.length, 0);
  });

  t.test("with the provider's key looked for, a custom tool's input is held whole", async (t) => {
    // The provider has a key: its answers are searched for it whatever the detectors say, and a
    // tool call is scanned whole (as the tool will read it) before it goes out.
    upstream.customInput = 'SELECT name, owner FROM tables';
    const chunks = await collect(
      await openai.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'x' }],
        tools: [SQL],
      }),
    );
    const pieces = chunks.filter((c) => (c.choices[0]?.delta.tool_calls?.[0] as any)?.custom?.input);
    t.equal(pieces.length, 1, 'in one piece');
    t.strictSame(assembled(chunks), [
      { id: 'call_up_1', type: 'custom', name: 'sql', input: 'SELECT name, owner FROM tables' },
    ]);
  });

  t.test('an unguarded stream passes the custom deltas on as they came', async (t) => {
    // A local server's placeholder key (`EMPTY`) is no secret: nothing is looked for, nothing held.
    const put = await svc.call('/api/settings/providers', {
      method: 'PUT',
      token: svc.pat,
      body: {
        providers: [{ name: 'openai', api_key: 'EMPTY', base_url: `${upstream.url}/v1`, models: ['gpt-*'] }],
      },
    });
    t.equal(put.status, 200);
    upstream.customInput = 'SELECT name, owner FROM tables';
    const chunks = await collect(
      await openai.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'x' }],
        tools: [SQL],
      }),
    );
    const pieces = chunks.filter((c) => (c.choices[0]?.delta.tool_calls?.[0] as any)?.custom?.input);
    t.ok(pieces.length > 1, 'in pieces');
    t.strictSame(assembled(chunks), [
      { id: 'call_up_1', type: 'custom', name: 'sql', input: 'SELECT name, owner FROM tables' },
    ]);
  });
});
