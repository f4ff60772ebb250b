import t from 'tap';
import {
  type AnthropicMessage,
  anthropicResponseToOpenai,
  CACHE_WRITE_TOKENS,
  type ChatCompletion,
  openaiResponseToAnthropic,
  RAW_ARGUMENTS_KEY,
} from '../../../src/providers/wire/index.js';
import { STOP_REASONS } from '../../helpers/stop-reasons.js';

function completion(message: ChatCompletion['choices'][0]['message'], finish: string | null): ChatCompletion {
  return {
    id: 'chatcmpl-abc123',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'gpt-4o-2024-08-06',
    choices: [{ index: 0, message, finish_reason: finish as ChatCompletion['choices'][0]['finish_reason'] }],
    usage: { prompt_tokens: 120, completion_tokens: 30, total_tokens: 150 },
  };
}

t.test('openaiResponseToAnthropic: text', async (t) => {
  const out = openaiResponseToAnthropic(
    completion({ role: 'assistant', content: 'Hello!' }, 'stop'),
    'gpt-4o',
  );
  t.strictSame(out, {
    id: 'msg_abc123',
    type: 'message',
    role: 'assistant',
    model: 'gpt-4o',
    content: [{ type: 'text', text: 'Hello!' }],
    stop_reason: 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: 120, output_tokens: 30 },
  });
});

t.test('openaiResponseToAnthropic: tool calls, invalid arguments kept raw', async (t) => {
  const res = completion(
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_a', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
        { id: 'call_b', type: 'function', function: { name: 'weather', arguments: '{"city": "Ro' } },
        { id: 'call_c', type: 'function', function: { name: 'list', arguments: '[1,2]' } },
      ],
    },
    'tool_calls',
  );
  const out = openaiResponseToAnthropic(res, 'gpt-4o');
  t.strictSame(out.content, [
    { type: 'tool_use', id: 'call_a', name: 'weather', input: { city: 'Paris' } },
    { type: 'tool_use', id: 'call_b', name: 'weather', input: { [RAW_ARGUMENTS_KEY]: '{"city": "Ro' } },
    { type: 'tool_use', id: 'call_c', name: 'list', input: { [RAW_ARGUMENTS_KEY]: '[1,2]' } },
  ]);
  t.equal(out.stop_reason, 'tool_use');
  // and back: the raw strings come back unchanged
  const back = anthropicResponseToOpenai(out, 1);
  t.strictSame(back.choices[0]?.message.tool_calls, res.choices[0]?.message.tool_calls);
});

t.test('openaiResponseToAnthropic: finish reasons, refusal, cached usage, missing usage', async (t) => {
  const map = (finish: string | null) =>
    openaiResponseToAnthropic(completion({ role: 'assistant', content: 'x' }, finish), 'm').stop_reason;
  t.equal(map('stop'), 'end_turn');
  t.equal(map('length'), 'max_tokens');
  t.equal(map('tool_calls'), 'tool_use');
  t.equal(map('content_filter'), 'refusal');
  t.equal(map('function_call'), 'end_turn');
  t.equal(map(null), 'end_turn');

  const refusal = openaiResponseToAnthropic(
    completion({ role: 'assistant', content: null, refusal: 'I can’t help.' }, 'stop'),
    'm',
  );
  t.strictSame(refusal.content, [{ type: 'text', text: 'I can’t help.' }]);

  const cached = completion({ role: 'assistant', content: 'x' }, 'stop');
  cached.usage = {
    prompt_tokens: 1000,
    completion_tokens: 5,
    total_tokens: 1005,
    prompt_tokens_details: { cached_tokens: 800 },
  };
  t.strictSame(openaiResponseToAnthropic(cached, 'm').usage, {
    input_tokens: 200,
    output_tokens: 5,
    cache_read_input_tokens: 800,
  });

  const noUsage = completion({ role: 'assistant', content: '' }, 'stop');
  delete noUsage.usage;
  const out = openaiResponseToAnthropic(noUsage, 'm');
  t.strictSame(out.usage, { input_tokens: 0, output_tokens: 0 });
  t.strictSame(out.content, [], 'empty content gives no text block');

  const noChoices = completion({ role: 'assistant', content: 'x' }, 'stop');
  noChoices.choices = [];
  t.strictSame(openaiResponseToAnthropic(noChoices, 'm').content, []);
});

const claudeMessage: AnthropicMessage = {
  id: 'msg_01XYZ',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-5',
  content: [
    { type: 'thinking', thinking: 'hmm', signature: 's' },
    { type: 'text', text: 'Let me look ' },
    { type: 'text', text: 'that up.' },
    { type: 'tool_use', id: 'toolu_1', name: 'search', input: { q: 'govgate', limit: 3 } },
    { type: 'tool_use', id: 'toolu_2', name: 'clock', input: {} },
  ],
  stop_reason: 'tool_use',
  stop_sequence: null,
  usage: {
    input_tokens: 50,
    output_tokens: 20,
    cache_creation_input_tokens: 10,
    cache_read_input_tokens: 40,
  },
};

t.test('anthropicResponseToOpenai: text joined, tool calls, usage with cache', async (t) => {
  t.strictSame(anthropicResponseToOpenai(claudeMessage, 1_700_000_123), {
    id: 'chatcmpl-01XYZ',
    object: 'chat.completion',
    created: 1_700_000_123,
    model: 'claude-sonnet-4-5',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: 'Let me look that up.',
          tool_calls: [
            {
              id: 'toolu_1',
              type: 'function',
              function: { name: 'search', arguments: '{"q":"govgate","limit":3}' },
            },
            { id: 'toolu_2', type: 'function', function: { name: 'clock', arguments: '{}' } },
          ],
        },
        finish_reason: 'tool_calls',
        logprobs: null,
      },
    ],
    usage: {
      prompt_tokens: 100,
      completion_tokens: 20,
      total_tokens: 120,
      prompt_tokens_details: { cached_tokens: 40 },
      // Cache writes have no field in OpenAI's usage: kept beside it for the cost, out of the JSON.
      [CACHE_WRITE_TOKENS]: 10,
    },
  });
});

t.test('anthropicResponseToOpenai: stop reasons and content null', async (t) => {
  const map = (stop: AnthropicMessage['stop_reason']) =>
    anthropicResponseToOpenai({ ...claudeMessage, stop_reason: stop }, 0).choices[0]?.finish_reason;
  t.equal(map('end_turn'), 'stop');
  t.equal(map('stop_sequence'), 'stop');
  t.equal(map('max_tokens'), 'length');
  t.equal(map('tool_use'), 'tool_calls');
  t.equal(map('refusal'), 'content_filter');
  t.equal(map('pause_turn'), 'stop');
  t.equal(map(null), 'stop');

  const toolsOnly = anthropicResponseToOpenai(
    { ...claudeMessage, content: [{ type: 'tool_use', id: 't', name: 'f', input: { a: 1 } }] },
    0,
  );
  t.equal(toolsOnly.choices[0]?.message.content, null);
  const empty = anthropicResponseToOpenai({ ...claudeMessage, content: [] }, 0);
  t.equal(empty.choices[0]?.message.content, '');
  t.notOk('tool_calls' in (empty.choices[0]?.message ?? {}));
});

t.test('round trip openai → anthropic → openai keeps content, calls, reason, usage', async (t) => {
  const original = completion(
    {
      role: 'assistant',
      content: 'Calling.',
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"x":[1,{"y":null}]}' } },
      ],
    },
    'tool_calls',
  );
  original.usage = {
    prompt_tokens: 9,
    completion_tokens: 4,
    total_tokens: 13,
    prompt_tokens_details: { cached_tokens: 3 },
  };
  const back = anthropicResponseToOpenai(
    openaiResponseToAnthropic(original, 'gpt-4o-2024-08-06'),
    original.created,
  );
  t.strictSame(back, {
    ...original,
    choices: [{ ...original.choices[0], logprobs: null }],
  });
});

t.test('round trip anthropic → openai → anthropic keeps text, tool uses, reason, usage', async (t) => {
  const original: AnthropicMessage = {
    ...claudeMessage,
    content: [
      { type: 'text', text: 'Let me look that up.' },
      { type: 'tool_use', id: 'toolu_1', name: 'search', input: { q: 'govgate', nested: { a: [1, 2] } } },
    ],
    usage: { input_tokens: 50, output_tokens: 20, cache_read_input_tokens: 40 },
  };
  const back = openaiResponseToAnthropic(anthropicResponseToOpenai(original, 0), original.model);
  t.strictSame(back, original);
});

t.test('an Anthropic stop finish_reason cannot say survives the OpenAI shape, unseen by JSON', async (t) => {
  const cases = STOP_REASONS;
  for (const [reason, sequence, finish] of cases) {
    const original: AnthropicMessage = {
      ...claudeMessage,
      content: [{ type: 'text', text: 'The answer.' }],
      stop_reason: reason,
      stop_sequence: sequence,
    };
    const openai = anthropicResponseToOpenai(original, 0);
    t.equal(openai.choices[0]?.finish_reason, finish, `${reason}: finish_reason ${finish}`);
    const json = JSON.parse(JSON.stringify(openai));
    t.strictSame(
      Object.keys(json.choices[0]),
      ['index', 'message', 'finish_reason', 'logprobs'],
      `${reason}: an OpenAI client sees only the standard fields`,
    );
    t.notMatch(JSON.stringify(openai), /stop_sequence|pause_turn|context_window|END/);
    const back = openaiResponseToAnthropic(openai, original.model);
    t.equal(back.stop_reason, reason, `${reason}: back to Anthropic`);
    t.equal(back.stop_sequence, sequence, `${reason}: with its sequence`);
  }

  // A finish_reason changed after the translation (the answer was replaced) wins over the carried stop.
  const changed = anthropicResponseToOpenai(
    { ...claudeMessage, stop_reason: 'stop_sequence', stop_sequence: 'END' },
    0,
  );
  const choice = changed.choices[0];
  if (choice) choice.finish_reason = 'length';
  const back = openaiResponseToAnthropic(changed, 'm');
  t.equal(back.stop_reason, 'max_tokens');
  t.equal(back.stop_sequence, null);
});
