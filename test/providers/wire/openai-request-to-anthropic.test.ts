import t from 'tap';
import {
  type ChatCompletionRequest,
  openaiRequestToAnthropic,
  RAW_ARGUMENTS_KEY,
  TOOL_ERROR_PREFIX,
} from '../../../src/providers/wire/index.js';

const opts = { defaultMaxTokens: 4096 };

t.test('system and developer messages are joined into system', async (t) => {
  const out = openaiRequestToAnthropic(
    {
      model: 'claude-sonnet-4-5',
      messages: [
        { role: 'system', content: 'You are terse.' },
        {
          role: 'developer',
          content: [
            { type: 'text', text: 'Line A' },
            { type: 'text', text: 'Line B' },
          ],
        },
        { role: 'user', content: 'Hello' },
        { role: 'system', content: 'Late rule.' },
      ],
    },
    opts,
  );
  t.strictSame(out, {
    model: 'claude-sonnet-4-5',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 4096,
    system: 'You are terse.\n\nLine A\nLine B\n\nLate rule.',
  });
});

t.test('scalar fields: max tokens precedence, stop, temperature clamping, user', async (t) => {
  const base: ChatCompletionRequest = { model: 'claude', messages: [{ role: 'user', content: 'x' }] };
  t.equal(openaiRequestToAnthropic(base, opts).max_tokens, 4096);
  t.equal(openaiRequestToAnthropic({ ...base, max_tokens: 100 }, opts).max_tokens, 100);
  t.equal(
    openaiRequestToAnthropic({ ...base, max_tokens: 100, max_completion_tokens: 200 }, opts).max_tokens,
    200,
  );

  t.strictSame(openaiRequestToAnthropic({ ...base, stop: 'END' }, opts).stop_sequences, ['END']);
  t.strictSame(openaiRequestToAnthropic({ ...base, stop: ['a', '', 'b'] }, opts).stop_sequences, ['a', 'b']);
  t.notOk('stop_sequences' in openaiRequestToAnthropic({ ...base, stop: null }, opts));
  t.notOk('stop_sequences' in openaiRequestToAnthropic({ ...base, stop: [] }, opts));

  t.equal(openaiRequestToAnthropic({ ...base, temperature: 0 }, opts).temperature, 0);
  t.equal(openaiRequestToAnthropic({ ...base, temperature: 0.7 }, opts).temperature, 0.7, 'the same number');
  t.equal(openaiRequestToAnthropic({ ...base, temperature: 1 }, opts).temperature, 1);
  t.equal(openaiRequestToAnthropic({ ...base, temperature: 1.4 }, opts).temperature, 1, 'clamped to 1');
  t.equal(openaiRequestToAnthropic({ ...base, temperature: 2 }, opts).temperature, 1);
  t.equal(openaiRequestToAnthropic({ ...base, temperature: -1 }, opts).temperature, 0, 'clamped low');

  const full = openaiRequestToAnthropic(
    { ...base, top_p: 0.8, stream: true, user: 'end-user-7', n: 2, seed: 5, presence_penalty: 1 },
    opts,
  );
  t.strictSame(full, {
    model: 'claude',
    messages: [{ role: 'user', content: 'x' }],
    max_tokens: 4096,
    top_p: 0.8,
    stream: true,
    metadata: { user_id: 'end-user-7' },
  });
});

t.test('consecutive same-role messages are merged', async (t) => {
  const out = openaiRequestToAnthropic(
    {
      model: 'claude',
      messages: [
        { role: 'user', content: 'one' },
        { role: 'user', content: [{ type: 'text', text: 'two' }] },
        { role: 'assistant', content: 'a' },
        { role: 'assistant', content: [{ type: 'text', text: 'b' }] },
        { role: 'user', content: '' },
        { role: 'user', content: 'three' },
      ],
    },
    opts,
  );
  t.strictSame(out.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'one' },
        { type: 'text', text: 'two' },
      ],
    },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'a' },
        { type: 'text', text: 'b' },
      ],
    },
    { role: 'user', content: 'three' },
  ]);
});

t.test('tool calls and tool results', async (t) => {
  const out = openaiRequestToAnthropic(
    {
      model: 'claude',
      messages: [
        { role: 'user', content: 'Weather in Paris and Rome?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
            { id: 'call_2', type: 'function', function: { name: 'weather', arguments: '{"city":' } },
            { id: 'call_3', type: 'function', function: { name: 'now', arguments: '' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '18C' },
        {
          role: 'tool',
          tool_call_id: 'call_2',
          content: [{ type: 'text', text: `${TOOL_ERROR_PREFIX}bad args` }],
        },
        { role: 'tool', tool_call_id: 'call_3', content: '' },
        { role: 'user', content: 'Thanks' },
      ],
    },
    opts,
  );
  t.strictSame(out.messages, [
    { role: 'user', content: 'Weather in Paris and Rome?' },
    {
      role: 'assistant',
      content: [
        { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } },
        { type: 'tool_use', id: 'call_2', name: 'weather', input: { [RAW_ARGUMENTS_KEY]: '{"city":' } },
        { type: 'tool_use', id: 'call_3', name: 'now', input: {} },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'call_1', content: '18C' },
        { type: 'tool_result', tool_use_id: 'call_2', is_error: true, content: 'bad args' },
        { type: 'tool_result', tool_use_id: 'call_3' },
        { type: 'text', text: 'Thanks' },
      ],
    },
  ]);
});

t.test('a tool result merged after user text is moved ahead of it', async (t) => {
  const out = openaiRequestToAnthropic(
    {
      model: 'claude',
      messages: [
        {
          role: 'assistant',
          content: 'ok',
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'user', content: 'note' },
        { role: 'tool', tool_call_id: 'c', content: 'done' },
      ],
    },
    opts,
  );
  t.strictSame(out.messages[1], {
    role: 'user',
    content: [
      { type: 'tool_result', tool_use_id: 'c', content: 'done' },
      { type: 'text', text: 'note' },
    ],
  });
  t.strictSame(out.messages[0], {
    role: 'assistant',
    content: [
      { type: 'text', text: 'ok' },
      { type: 'tool_use', id: 'c', name: 'f', input: {} },
    ],
  });
});

t.test('image_url parts: data URLs to base64, http(s) to url, others dropped', async (t) => {
  const out = openaiRequestToAnthropic(
    {
      model: 'claude',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image_url', image_url: { url: 'data:image/webp;base64,UklGRg==', detail: 'high' } },
            { type: 'image_url', image_url: { url: 'HTTPS://example.com/a.png' } },
            { type: 'image_url', image_url: { url: 'ftp://example.com/a.png' } },
            { type: 'image_url', image_url: { url: 'data:image/png,notbase64' } },
            { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
            { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' } },
          ],
        },
      ],
    },
    opts,
  );
  t.strictSame(out.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'look' },
        { type: 'image', source: { type: 'base64', media_type: 'image/webp', data: 'UklGRg==' } },
        { type: 'image', source: { type: 'url', url: 'HTTPS://example.com/a.png' } },
        { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } },
      ],
    },
  ]);
});

t.test('tools, tool_choice and parallel_tool_calls', async (t) => {
  const tools: ChatCompletionRequest['tools'] = [
    {
      type: 'function',
      function: { name: 'weather', description: 'Weather', parameters: { type: 'object', properties: {} } },
    },
    { type: 'function', function: { name: 'noargs' } },
  ];
  const base: ChatCompletionRequest = { model: 'claude', messages: [{ role: 'user', content: 'x' }], tools };
  const out = openaiRequestToAnthropic(base, opts);
  t.strictSame(out.tools, [
    { name: 'weather', description: 'Weather', input_schema: { type: 'object', properties: {} } },
    { name: 'noargs', input_schema: { type: 'object', properties: {} } },
  ]);
  t.notOk('tool_choice' in out);
  t.strictSame(openaiRequestToAnthropic({ ...base, tool_choice: 'auto' }, opts).tool_choice, {
    type: 'auto',
  });
  t.strictSame(openaiRequestToAnthropic({ ...base, tool_choice: 'required' }, opts).tool_choice, {
    type: 'any',
  });
  t.strictSame(openaiRequestToAnthropic({ ...base, tool_choice: 'none' }, opts).tool_choice, {
    type: 'none',
  });
  t.strictSame(
    openaiRequestToAnthropic(
      {
        ...base,
        tool_choice: { type: 'function', function: { name: 'weather' } },
        parallel_tool_calls: false,
      },
      opts,
    ).tool_choice,
    { type: 'tool', name: 'weather', disable_parallel_tool_use: true },
  );
  t.strictSame(openaiRequestToAnthropic({ ...base, parallel_tool_calls: false }, opts).tool_choice, {
    type: 'auto',
    disable_parallel_tool_use: true,
  });
  const noTools = openaiRequestToAnthropic(
    {
      model: 'claude',
      messages: [{ role: 'user', content: 'x' }],
      tool_choice: 'required',
      parallel_tool_calls: false,
    },
    opts,
  );
  t.notOk('tool_choice' in noTools, 'no tool_choice without tools');
});

t.test('assistant refusal becomes text', async (t) => {
  const out = openaiRequestToAnthropic(
    {
      model: 'claude',
      messages: [
        { role: 'user', content: 'x' },
        { role: 'assistant', content: null, refusal: 'I cannot help with that.' },
        { role: 'assistant', content: [{ type: 'refusal', refusal: 'Still no.' }] },
      ],
    },
    opts,
  );
  t.strictSame(out.messages[1], {
    role: 'assistant',
    content: [
      { type: 'text', text: 'I cannot help with that.' },
      { type: 'text', text: 'Still no.' },
    ],
  });
});
