import t from 'tap';
import {
  type AnthropicMessagesRequest,
  anthropicRequestToOpenai,
  RAW_ARGUMENTS_KEY,
  TOOL_ERROR_PREFIX,
} from '../../../src/providers/wire/index.js';

t.test('system string and text blocks become one leading system message', async (t) => {
  const base = { model: 'gpt-4o', max_tokens: 100, messages: [{ role: 'user' as const, content: 'hi' }] };
  const fromString = anthropicRequestToOpenai({ ...base, system: 'Be brief.' });
  t.strictSame(fromString.messages, [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'hi' },
  ]);
  const fromBlocks = anthropicRequestToOpenai({
    ...base,
    system: [
      { type: 'text', text: 'Rule one.' },
      { type: 'text', text: 'Rule two.', cache_control: { type: 'ephemeral' } },
    ],
  });
  t.strictSame(fromBlocks.messages[0], { role: 'system', content: 'Rule one.\n\nRule two.' });
  const empty = anthropicRequestToOpenai({ ...base, system: '' });
  t.equal(empty.messages.length, 1, 'an empty system prompt adds no message');
});

t.test('scalar fields', async (t) => {
  const out = anthropicRequestToOpenai({
    model: 'gpt-4o',
    max_tokens: 512,
    temperature: 0.3,
    top_p: 0.9,
    top_k: 40,
    stop_sequences: ['END', '###'],
    stream: true,
    metadata: { user_id: 'user-42' },
    messages: [{ role: 'user', content: 'hi' }],
  });
  t.strictSame(out, {
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 512,
    temperature: 0.3,
    top_p: 0.9,
    stop: ['END', '###'],
    stream: true,
    stream_options: { include_usage: true },
    user: 'user-42',
  });
  t.notOk('top_k' in out, 'top_k has no OpenAI equivalent');
});

t.test('images: base64 and url sources become image_url parts', async (t) => {
  const out = anthropicRequestToOpenai({
    model: 'gpt-4o',
    max_tokens: 10,
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in these?' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
          { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
        ],
      },
    ],
  });
  t.strictSame(out.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is in these?' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
      ],
    },
  ]);
});

t.test('a base64 PDF document becomes a file part', async (t) => {
  const out = anthropicRequestToOpenai({
    model: 'gpt-4o',
    max_tokens: 10,
    messages: [
      {
        role: 'user',
        content: [
          { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } },
          { type: 'text', text: 'Summarise' },
        ],
      },
    ],
  });
  t.strictSame(out.messages[0], {
    role: 'user',
    content: [
      { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'document.pdf' } },
      { type: 'text', text: 'Summarise' },
    ],
  });
});

const toolConversation: AnthropicMessagesRequest = {
  model: 'gpt-4o',
  max_tokens: 1024,
  messages: [
    { role: 'user', content: 'Weather in Paris and Rome?' },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'two lookups', signature: 'sig' },
        { type: 'text', text: 'Checking both.' },
        { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } },
        { type: 'tool_use', id: 'toolu_2', name: 'weather', input: { city: 'Rome', unit: 'C' } },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_1', content: '18C sunny' },
        {
          type: 'tool_result',
          tool_use_id: 'toolu_2',
          is_error: true,
          content: [
            { type: 'text', text: 'service down' },
            { type: 'text', text: 'retry later' },
          ],
        },
        { type: 'text', text: 'Summarise please.' },
      ],
    },
  ],
};

t.test('tool_use becomes tool_calls; tool_result becomes tool messages before the user text', async (t) => {
  const out = anthropicRequestToOpenai(toolConversation);
  t.strictSame(out.messages, [
    { role: 'user', content: 'Weather in Paris and Rome?' },
    {
      role: 'assistant',
      content: 'Checking both.',
      tool_calls: [
        { id: 'toolu_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
        {
          id: 'toolu_2',
          type: 'function',
          function: { name: 'weather', arguments: '{"city":"Rome","unit":"C"}' },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'toolu_1', content: '18C sunny' },
    { role: 'tool', tool_call_id: 'toolu_2', content: `${TOOL_ERROR_PREFIX}service down\nretry later` },
    { role: 'user', content: 'Summarise please.' },
  ]);
});

t.test('assistant with only tool calls has null content; raw arguments are restored', async (t) => {
  const out = anthropicRequestToOpenai({
    model: 'gpt-4o',
    max_tokens: 10,
    messages: [
      { role: 'user', content: 'go' },
      {
        role: 'assistant',
        content: [{ type: 'tool_use', id: 't1', name: 'f', input: { [RAW_ARGUMENTS_KEY]: '{"a":' } }],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1' }] },
    ],
  });
  t.strictSame(out.messages.slice(1), [
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '{"a":' } }],
    },
    { role: 'tool', tool_call_id: 't1', content: '' },
  ]);
});

t.test('images inside a tool result follow in a user message', async (t) => {
  const out = anthropicRequestToOpenai({
    model: 'gpt-4o',
    max_tokens: 10,
    messages: [
      {
        role: 'user',
        content: [
          {
            type: 'tool_result',
            tool_use_id: 'shot',
            content: [
              { type: 'text', text: 'screenshot taken' },
              { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: '/9j/' } },
            ],
          },
        ],
      },
    ],
  });
  t.strictSame(out.messages, [
    { role: 'tool', tool_call_id: 'shot', content: 'screenshot taken' },
    { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/' } }] },
  ]);
});

t.test('tools and tool_choice', async (t) => {
  const tools = [
    {
      name: 'weather',
      description: 'Current weather',
      input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
    { type: 'web_search_20250305', name: 'web_search' },
  ];
  const base = {
    model: 'gpt-4o',
    max_tokens: 10,
    messages: [{ role: 'user' as const, content: 'x' }],
    tools,
  };
  const auto = anthropicRequestToOpenai({ ...base, tool_choice: { type: 'auto' } });
  t.strictSame(auto.tools, [
    {
      type: 'function',
      function: {
        name: 'weather',
        description: 'Current weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    },
  ]);
  t.equal(auto.tool_choice, 'auto');
  t.notOk('parallel_tool_calls' in auto);
  t.equal(anthropicRequestToOpenai({ ...base, tool_choice: { type: 'any' } }).tool_choice, 'required');
  t.equal(anthropicRequestToOpenai({ ...base, tool_choice: { type: 'none' } }).tool_choice, 'none');
  const named = anthropicRequestToOpenai({
    ...base,
    tool_choice: { type: 'tool', name: 'weather', disable_parallel_tool_use: true },
  });
  t.strictSame(named.tool_choice, { type: 'function', function: { name: 'weather' } });
  t.equal(named.parallel_tool_calls, false);

  const serverOnly = anthropicRequestToOpenai({
    ...base,
    tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    tool_choice: { type: 'any' },
  });
  t.notOk('tools' in serverOnly, 'no client tools: no tools field');
  t.notOk('tool_choice' in serverOnly, 'no tool_choice without tools');
});

t.test('consecutive text blocks in a user message stay separate parts', async (t) => {
  const out = anthropicRequestToOpenai({
    model: 'm',
    max_tokens: 1,
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b' },
        ],
      },
    ],
  });
  t.strictSame(out.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'a' },
        { type: 'text', text: 'b' },
      ],
    },
  ]);
});

t.test('reasoning models get max_completion_tokens (they refuse max_tokens)', async (t) => {
  const messages = [{ role: 'user' as const, content: 'hi' }];
  for (const model of ['o3-mini', 'o1', 'gpt-5', 'gpt-5-mini', 'gpt-5.2']) {
    const out = anthropicRequestToOpenai({ model, max_tokens: 300, messages });
    t.equal(out.max_completion_tokens, 300, model);
    t.notOk('max_tokens' in out, `${model}: no max_tokens`);
  }
  for (const model of ['gpt-4o', 'gpt-5-chat-latest', 'claude-sonnet-4']) {
    const out = anthropicRequestToOpenai({ model, max_tokens: 300, messages });
    t.equal(out.max_tokens, 300, model);
    t.notOk('max_completion_tokens' in out, `${model}: no max_completion_tokens`);
  }
});
