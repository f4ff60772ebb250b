import t from 'tap';
import { isServiceError } from '../../../src/core/errors.js';
import {
  type AnthropicMessage,
  type AnthropicStreamEvent,
  AnthropicStreamToOpenai,
  anthropicResponseToOpenai,
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatCompletionRequest,
  customToolNames,
  OpenaiStreamToAnthropic,
  type OpenaiTool,
  openaiRequestToAnthropic,
  openaiResponseToAnthropic,
  WireStreamError,
} from '../../../src/providers/wire/index.js';

// OpenAI custom (freeform) tools on Anthropic models (src/providers/wire/custom-tools.ts): a
// text-format tool is a tool of one string, `input`; a grammar-format one is refused.

const opts = { defaultMaxTokens: 4096 };
const ONE_STRING = {
  type: 'object',
  properties: { input: { type: 'string' } },
  required: ['input'],
  additionalProperties: false,
};
const SHELL: OpenaiTool = { type: 'custom', custom: { name: 'shell', description: 'Runs a command' } };
const WEATHER: OpenaiTool = {
  type: 'function',
  function: { name: 'weather', parameters: { type: 'object' } },
};

t.test('openaiRequestToAnthropic: text custom tools, their calls and tool_choice', async (t) => {
  const req: ChatCompletionRequest = {
    model: 'claude',
    messages: [
      { role: 'user', content: 'list' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'c1', type: 'custom', custom: { name: 'shell', input: 'ls "a b"\n' } },
          { id: 'c2', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'a b' },
      { role: 'tool', tool_call_id: 'c2', content: 'cold' },
    ],
    tools: [SHELL, WEATHER, { type: 'custom', custom: { name: 'note', format: { type: 'text' } } }],
    tool_choice: { type: 'custom', custom: { name: 'shell' } },
    parallel_tool_calls: false,
  };
  const out = openaiRequestToAnthropic(req, opts);
  t.strictSame(out.tools, [
    { name: 'shell', description: 'Runs a command', input_schema: ONE_STRING },
    { name: 'weather', input_schema: { type: 'object' } },
    { name: 'note', input_schema: ONE_STRING },
  ]);
  t.strictSame(out.tool_choice, { type: 'tool', name: 'shell', disable_parallel_tool_use: true });
  t.strictSame(out.messages, [
    { role: 'user', content: 'list' },
    {
      role: 'assistant',
      content: [
        { type: 'tool_use', id: 'c1', name: 'shell', input: { input: 'ls "a b"\n' } },
        { type: 'tool_use', id: 'c2', name: 'weather', input: { city: 'Oslo' } },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'c1', content: 'a b' },
        { type: 'tool_result', tool_use_id: 'c2', content: 'cold' },
      ],
    },
  ]);
});

t.test('openaiRequestToAnthropic: a grammar-format custom tool is refused, naming it', async (t) => {
  for (const syntax of ['lark', 'regex'] as const) {
    const req: ChatCompletionRequest = {
      model: 'claude',
      messages: [{ role: 'user', content: 'x' }],
      tools: [
        SHELL,
        {
          type: 'custom',
          custom: { name: 'sql', format: { type: 'grammar', grammar: { syntax, definition: 'a' } } },
        },
      ],
    };
    let err: unknown;
    try {
      openaiRequestToAnthropic(req, opts);
    } catch (e) {
      err = e;
    }
    t.ok(isServiceError(err), `${syntax}: a ServiceError`);
    if (!isServiceError(err)) continue;
    t.equal(err.code, 'invalid_request');
    t.equal(err.status, 400);
    t.equal(err.param, 'tools[1].custom.format');
    t.match(err.message, new RegExp(`sql has a ${syntax} grammar`));
  }
});

t.test('customToolNames: the custom tools, undefined without any', async (t) => {
  t.equal(customToolNames(undefined), undefined);
  t.equal(customToolNames([WEATHER]), undefined);
  t.strictSame([...(customToolNames([SHELL, WEATHER]) ?? [])], ['shell']);
});

function message(content: AnthropicMessage['content']): AnthropicMessage {
  return {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'claude',
    content,
    stop_reason: 'tool_use',
    stop_sequence: null,
    usage: { input_tokens: 3, output_tokens: 4 },
  };
}

t.test("anthropicResponseToOpenai: a custom tool's tool_use is a custom call", async (t) => {
  const res = message([
    { type: 'text', text: 'Running.' },
    { type: 'tool_use', id: 'toolu_1', name: 'shell', input: { input: 'ls -la' } },
    { type: 'tool_use', id: 'toolu_2', name: 'weather', input: { city: 'Oslo' } },
    // The model did not keep to the schema: the input's JSON text, nothing lost.
    { type: 'tool_use', id: 'toolu_3', name: 'shell', input: { cmd: 'pwd' } },
    { type: 'tool_use', id: 'toolu_4', name: 'shell', input: { input: 'a', more: 'b' } },
  ]);
  const out = anthropicResponseToOpenai(res, 1, customToolNames([SHELL, WEATHER]));
  t.strictSame(out.choices[0]?.message.tool_calls, [
    { id: 'toolu_1', type: 'custom', custom: { name: 'shell', input: 'ls -la' } },
    { id: 'toolu_2', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
    { id: 'toolu_3', type: 'custom', custom: { name: 'shell', input: '{"cmd":"pwd"}' } },
    { id: 'toolu_4', type: 'custom', custom: { name: 'shell', input: '{"input":"a","more":"b"}' } },
  ]);
  t.equal(out.choices[0]?.finish_reason, 'tool_calls');
  const plain = anthropicResponseToOpenai(res, 1);
  t.equal(
    plain.choices[0]?.message.tool_calls?.[0]?.type,
    'function',
    'without custom tools, all are functions',
  );
});

/** An Anthropic stream: text, then a custom tool's tool_use with its JSON in `pieces`. */
function toolStream(pieces: string[], close = true): AnthropicStreamEvent[] {
  const events: AnthropicStreamEvent[] = [
    {
      type: 'message_start',
      message: { ...message([]), stop_reason: null, usage: { input_tokens: 3, output_tokens: 1 } },
    },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Running.' } },
    { type: 'content_block_stop', index: 0 },
    {
      type: 'content_block_start',
      index: 1,
      content_block: { type: 'tool_use', id: 'toolu_1', name: 'shell', input: {} },
    },
    ...pieces.map(
      (partial_json): AnthropicStreamEvent => ({
        type: 'content_block_delta',
        index: 1,
        delta: { type: 'input_json_delta', partial_json },
      }),
    ),
  ];
  if (close) events.push({ type: 'content_block_stop', index: 1 });
  events.push(
    {
      type: 'message_delta',
      delta: { stop_reason: 'tool_use', stop_sequence: null },
      usage: { output_tokens: 9 },
    },
    { type: 'message_stop' },
  );
  return events;
}

function toolDeltas(chunks: readonly ChatCompletionChunk[]) {
  return chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
}

t.test('AnthropicStreamToOpenai: a custom call streams its name, then its whole input', async (t) => {
  // Split inside an escape: the string is read out of the whole JSON, not the pieces.
  const json = JSON.stringify({ input: 'echo "hi"\nls' });
  const at = json.indexOf('\\n') + 1;
  const conv = new AnthropicStreamToOpenai({ created: 1, model: 'claude', custom: new Set(['shell']) });
  const chunks = toolStream([json.slice(0, at), json.slice(at)]).flatMap((e) => conv.push(e));
  t.strictSame(toolDeltas(chunks), [
    { index: 0, id: 'toolu_1', type: 'custom', custom: { name: 'shell', input: '' } },
    { index: 0, custom: { input: 'echo "hi"\nls' } },
  ]);
  const finish = chunks.findIndex((c) => c.choices[0]?.finish_reason === 'tool_calls');
  const input = chunks.findIndex((c) => c.choices[0]?.delta.tool_calls?.[0]?.custom?.input);
  t.ok(input >= 0 && input < finish, 'the input comes before the finish');
});

t.test('AnthropicStreamToOpenai: an unclosed custom block, or JSON that is not, loses nothing', async (t) => {
  const unclosed = new AnthropicStreamToOpenai({ created: 1, model: 'claude', custom: new Set(['shell']) });
  const chunks = toolStream(['{"input":', '"pwd"}'], false).flatMap((e) => unclosed.push(e));
  t.strictSame(toolDeltas(chunks).at(-1), { index: 0, custom: { input: 'pwd' } });
  t.ok(
    chunks.findIndex((c) => c.choices[0]?.delta.tool_calls) <
      chunks.findIndex((c) => c.choices[0]?.finish_reason),
  );
  const broken = new AnthropicStreamToOpenai({ created: 1, model: 'claude', custom: new Set(['shell']) });
  const raw = toolStream(['{"input": "pw', 'd']).flatMap((e) => broken.push(e));
  t.strictSame(toolDeltas(raw).at(-1), { index: 0, custom: { input: '{"input": "pwd' } });
});

function completion(message: ChatCompletion['choices'][0]['message']): ChatCompletion {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'gpt',
    choices: [{ index: 0, message, finish_reason: 'tool_calls' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
}

t.test('openaiResponseToAnthropic: a custom call is a tool_use of one string', async (t) => {
  const out = openaiResponseToAnthropic(
    completion({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'custom', custom: { name: 'shell', input: 'ls' } }],
    }),
    'gpt',
  );
  t.strictSame(out.content, [{ type: 'tool_use', id: 'c1', name: 'shell', input: { input: 'ls' } }]);
});

function chunk(delta: ChatCompletionChunk['choices'][0]['delta'], finish: 'tool_calls' | null = null) {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk' as const,
    created: 1,
    model: 'gpt',
    choices: [{ index: 0, delta, finish_reason: finish }],
  };
}

t.test(
  'OpenaiStreamToAnthropic: a custom call is sent as one JSON input when its block closes',
  async (t) => {
    const conv = new OpenaiStreamToAnthropic({ id: 'msg_1', model: 'gpt' });
    const events = [
      chunk({ tool_calls: [{ index: 0, id: 'c1', type: 'custom', custom: { name: 'shell', input: '' } }] }),
      chunk({ tool_calls: [{ index: 0, custom: { input: 'echo "a' } }] }),
      chunk({ tool_calls: [{ index: 0, custom: { input: '\\b"' } }] }),
      chunk({
        tool_calls: [{ index: 1, id: 'c2', type: 'function', function: { name: 'w', arguments: '{}' } }],
      }),
      chunk({}, 'tool_calls'),
    ].flatMap((c) => conv.push(c));
    const blocks = events.filter((e) => e.type.startsWith('content_block'));
    t.strictSame(blocks, [
      {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'tool_use', id: 'c1', name: 'shell', input: {} },
      },
      {
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'input_json_delta', partial_json: '{"input":"echo \\"a\\\\b\\""}' },
      },
      { type: 'content_block_stop', index: 0 },
      {
        type: 'content_block_start',
        index: 1,
        content_block: { type: 'tool_use', id: 'c2', name: 'w', input: {} },
      },
      { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{}' } },
      { type: 'content_block_stop', index: 1 },
    ]);
    const json = (blocks[1] as { delta: { partial_json: string } }).delta.partial_json;
    t.strictSame(JSON.parse(json), { input: 'echo "a\\b"' });
    // A piece of the closed custom call cannot be sent any more: the stream fails.
    t.throws(
      () => conv.push(chunk({ tool_calls: [{ index: 0, custom: { input: 'late' } }] })),
      WireStreamError,
    );
  },
);
