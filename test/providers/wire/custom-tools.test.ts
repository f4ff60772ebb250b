import t from 'tap';
import { isServiceError } from '../../../src/core/errors.js';
import {
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatCompletionRequest,
  OpenaiStreamToAnthropic,
  openaiRequestToAnthropic,
  openaiResponseToAnthropic,
  WireStreamError,
} from '../../../src/providers/wire/index.js';

// OpenAI custom (freeform) tools and Anthropic (src/providers/wire/custom-tools.ts): a custom
// call is a tool_use of one string, `input`; a custom tool cannot be declared to an Anthropic model.

t.test('openaiRequestToAnthropic: a custom tool is refused, naming it; its calls are tool_use', async (t) => {
  const req: ChatCompletionRequest = {
    model: 'claude',
    messages: [
      { role: 'user', content: 'list' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'custom', custom: { name: 'shell', input: 'ls' } }],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'a b' },
    ],
  };
  t.strictSame(openaiRequestToAnthropic(req, { defaultMaxTokens: 10 }).messages[1], {
    role: 'assistant',
    content: [{ type: 'tool_use', id: 'c1', name: 'shell', input: { input: 'ls' } }],
  });
  let err: unknown;
  try {
    openaiRequestToAnthropic(
      {
        ...req,
        tools: [
          { type: 'function', function: { name: 'w' } },
          { type: 'custom', custom: { name: 'shell' } },
        ],
      },
      { defaultMaxTokens: 10 },
    );
  } catch (e) {
    err = e;
  }
  t.ok(isServiceError(err));
  if (isServiceError(err)) {
    t.equal(err.code, 'invalid_request');
    t.equal(err.param, 'tools[1]');
  }
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
