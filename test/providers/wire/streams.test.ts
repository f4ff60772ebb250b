import fc from 'fast-check';
import t from 'tap';
import {
  type AnthropicMessage,
  type AnthropicStreamEvent,
  AnthropicStreamToOpenai,
  type ChatCompletionChunk,
  type OpenaiFinishReason,
  OpenaiStreamToAnthropic,
  type OpenaiToolCallDelta,
  type OpenaiUsage,
  WireStreamError,
} from '../../../src/providers/wire/index.js';

// ---------- helpers: re-assemble a stream into a whole message, checking the protocol ----------

function check(condition: unknown, message: string): void {
  if (!condition) throw new Error(`stream protocol violated: ${message}`);
}

interface AssembledCompletion {
  ids: Set<string>;
  role: string | undefined;
  content: string;
  toolCalls: Array<{ id: string; name: string; arguments: string }>;
  finishReason: OpenaiFinishReason | null;
  usage: OpenaiUsage | undefined;
}

function assembleChunks(chunks: ChatCompletionChunk[]): AssembledCompletion {
  const out: AssembledCompletion = {
    ids: new Set(),
    role: undefined,
    content: '',
    toolCalls: [],
    finishReason: null,
    usage: undefined,
  };
  for (const chunk of chunks) {
    check(chunk.object === 'chat.completion.chunk', 'object');
    out.ids.add(chunk.id);
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) out.role = choice.delta.role;
      if (choice.delta.content) out.content += choice.delta.content;
      for (const call of choice.delta.tool_calls ?? []) {
        let target = out.toolCalls[call.index];
        if (!target) {
          check(call.id, 'the first fragment of a tool call has an id');
          check(call.index === out.toolCalls.length, 'tool call indexes are dense');
          target = { id: call.id ?? '', name: call.function?.name ?? '', arguments: '' };
          out.toolCalls[call.index] = target;
        }
        target.arguments += call.function?.arguments ?? '';
      }
      if (choice.finish_reason) out.finishReason = choice.finish_reason;
    }
  }
  return out;
}

function assembleEvents(events: AnthropicStreamEvent[]): AnthropicMessage {
  const first = events[0];
  if (first?.type !== 'message_start') throw new Error('stream must begin with message_start');
  const message: AnthropicMessage = structuredClone(first.message);
  const json: string[] = [];
  const open = new Set<number>();
  let stopped = false;
  let sawDelta = false;
  for (const event of events.slice(1)) {
    check(!stopped, 'nothing after message_stop');
    switch (event.type) {
      case 'content_block_start':
        check(event.index === message.content.length, 'blocks are started in index order');
        check(!sawDelta, 'no block after message_delta');
        message.content.push(structuredClone(event.content_block));
        open.add(event.index);
        json[event.index] = '';
        break;
      case 'content_block_delta': {
        check(open.has(event.index), 'delta goes to an open block');
        const block = message.content[event.index];
        if (event.delta.type === 'text_delta' && block?.type === 'text') block.text += event.delta.text;
        else if (event.delta.type === 'input_json_delta' && block?.type === 'tool_use') {
          json[event.index] += event.delta.partial_json;
        } else check(false, `delta ${event.delta.type} does not fit block ${block?.type}`);
        break;
      }
      case 'content_block_stop':
        check(open.delete(event.index), 'stop closes an open block');
        break;
      case 'message_delta':
        check(open.size === 0, 'all blocks closed before message_delta');
        sawDelta = true;
        message.stop_reason = event.delta.stop_reason;
        message.stop_sequence = event.delta.stop_sequence;
        message.usage.output_tokens = event.usage.output_tokens;
        if (typeof event.usage.input_tokens === 'number')
          message.usage.input_tokens = event.usage.input_tokens;
        if (typeof event.usage.cache_read_input_tokens === 'number') {
          message.usage.cache_read_input_tokens = event.usage.cache_read_input_tokens;
        }
        break;
      case 'message_stop':
        check(sawDelta, 'message_delta before message_stop');
        stopped = true;
        break;
      default:
        break;
    }
  }
  check(stopped, 'stream ends with message_stop');
  message.content.forEach((block, i) => {
    if (block.type === 'tool_use' && json[i]) block.input = JSON.parse(json[i]) as Record<string, unknown>;
  });
  return message;
}

// ---------- fixtures ----------

const start = (id = 'msg_01ABC'): AnthropicStreamEvent => ({
  type: 'message_start',
  message: {
    id,
    type: 'message',
    role: 'assistant',
    model: 'claude-sonnet-4-5',
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 25, output_tokens: 1 },
  },
});

const anthropicTextStream: AnthropicStreamEvent[] = [
  start(),
  { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
  { type: 'ping' },
  { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello' } },
  { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ', world' } },
  { type: 'content_block_stop', index: 0 },
  {
    type: 'message_delta',
    delta: { stop_reason: 'end_turn', stop_sequence: null },
    usage: { output_tokens: 12 },
  },
  { type: 'message_stop' },
];

const anthropicToolStream: AnthropicStreamEvent[] = [
  start('msg_tools'),
  { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
  { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Checking.' } },
  { type: 'content_block_stop', index: 0 },
  {
    type: 'content_block_start',
    index: 1,
    content_block: { type: 'tool_use', id: 'toolu_A', name: 'weather', input: {} },
  },
  { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '' } },
  { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"ci' } },
  { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: 'ty": "Par' } },
  { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: 'is"}' } },
  { type: 'content_block_stop', index: 1 },
  {
    type: 'content_block_start',
    index: 2,
    content_block: { type: 'tool_use', id: 'toolu_B', name: 'weather', input: {} },
  },
  {
    type: 'content_block_delta',
    index: 2,
    delta: { type: 'input_json_delta', partial_json: '{"city":"Rome"}' },
  },
  { type: 'content_block_stop', index: 2 },
  {
    type: 'message_delta',
    delta: { stop_reason: 'tool_use', stop_sequence: null },
    usage: { output_tokens: 40, input_tokens: 30, cache_read_input_tokens: 5 },
  },
  { type: 'message_stop' },
];

function chunk(
  delta: ChatCompletionChunk['choices'][0]['delta'] | null,
  finish: OpenaiFinishReason | null = null,
  usage?: OpenaiUsage,
): ChatCompletionChunk {
  const c: ChatCompletionChunk = {
    id: 'chatcmpl-xyz',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'gpt-4o',
    choices: delta ? [{ index: 0, delta, finish_reason: finish }] : [],
  };
  if (usage) c.usage = usage;
  return c;
}

const usageTotals: OpenaiUsage = { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 };

const openaiTextStream: ChatCompletionChunk[] = [
  chunk({ role: 'assistant', content: '', refusal: null }),
  chunk({ content: 'Hi' }),
  chunk({ content: ' there' }),
  chunk({}, 'stop'),
  chunk(null, null, usageTotals),
];

const toolDelta = (d: OpenaiToolCallDelta) => chunk({ tool_calls: [d] });
const openaiToolStream: ChatCompletionChunk[] = [
  chunk({ role: 'assistant', content: null }),
  toolDelta({ index: 0, id: 'call_1', type: 'function', function: { name: 'weather', arguments: '' } }),
  toolDelta({ index: 0, function: { arguments: '{"ci' } }),
  toolDelta({ index: 0, function: { arguments: 'ty":"Paris"}' } }),
  toolDelta({ index: 1, id: 'call_2', type: 'function', function: { name: 'time', arguments: '{"tz"' } }),
  toolDelta({ index: 1, function: { arguments: ':"CET"}' } }),
  chunk({}, 'tool_calls'),
  chunk(null, null, { ...usageTotals, prompt_tokens_details: { cached_tokens: 4 } }),
];

// ---------- AnthropicStreamToOpenai ----------

t.test('AnthropicStreamToOpenai: text-only stream, exact chunks', async (t) => {
  const conv = new AnthropicStreamToOpenai({ created: 1_700_000_001, model: 'claude-sonnet-4-5' });
  const chunks = anthropicTextStream.flatMap((e) => conv.push(e));
  const base = {
    id: 'chatcmpl-01ABC',
    object: 'chat.completion.chunk',
    created: 1_700_000_001,
    model: 'claude-sonnet-4-5',
  };
  t.strictSame(chunks, [
    { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: { content: 'Hello' }, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: { content: ', world' }, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
    // Usage in a last chunk of its own, as OpenAI sends it with stream_options.include_usage.
    { ...base, choices: [], usage: { prompt_tokens: 25, completion_tokens: 12, total_tokens: 37 } },
  ]);
});

t.test('AnthropicStreamToOpenai: tool calls indexed among tool blocks only', async (t) => {
  const conv = new AnthropicStreamToOpenai({ id: 'chatcmpl-fixed', created: 5, model: 'claude' });
  const chunks = anthropicToolStream.flatMap((e) => conv.push(e));
  t.ok(
    chunks.every((c) => c.id === 'chatcmpl-fixed'),
    'the given id is used',
  );
  const toolDeltas = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
  t.strictSame(toolDeltas, [
    { index: 0, id: 'toolu_A', type: 'function', function: { name: 'weather', arguments: '' } },
    { index: 0, function: { arguments: '{"ci' } },
    { index: 0, function: { arguments: 'ty": "Par' } },
    { index: 0, function: { arguments: 'is"}' } },
    { index: 1, id: 'toolu_B', type: 'function', function: { name: 'weather', arguments: '' } },
    { index: 1, function: { arguments: '{"city":"Rome"}' } },
  ]);
  const whole = assembleChunks(chunks);
  t.equal(whole.content, 'Checking.');
  t.equal(whole.finishReason, 'tool_calls');
  t.strictSame(whole.usage, {
    prompt_tokens: 35,
    completion_tokens: 40,
    total_tokens: 75,
    prompt_tokens_details: { cached_tokens: 5 },
  });
  t.strictSame(
    whole.toolCalls.map((c) => JSON.parse(c.arguments)),
    [{ city: 'Paris' }, { city: 'Rome' }],
  );
});

t.test('AnthropicStreamToOpenai: error event throws WireStreamError', async (t) => {
  const conv = new AnthropicStreamToOpenai({ created: 0, model: 'claude' });
  conv.push(start());
  let caught: unknown;
  try {
    conv.push({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
  } catch (err) {
    caught = err;
  }
  t.ok(caught instanceof WireStreamError, 'a WireStreamError is thrown');
  t.match(caught, { errorType: 'overloaded_error', message: 'Overloaded', code: 'upstream_error' });
});

t.test('AnthropicStreamToOpenai: thinking and unknown events emit nothing', async (t) => {
  const conv = new AnthropicStreamToOpenai({ created: 0, model: 'claude' });
  conv.push(start());
  t.strictSame(
    conv.push({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'thinking', thinking: '', signature: '' },
    }),
    [],
  );
  t.strictSame(
    conv.push({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'x' } }),
    [],
  );
  t.strictSame(
    conv.push({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: '{}' },
    }),
    [],
  );
  t.strictSame(conv.push({ type: 'content_block_stop', index: 0 }), []);
  t.strictSame(conv.push({ type: 'message_stop' }), []);
  t.strictSame(conv.push({ type: 'future_event' } as unknown as AnthropicStreamEvent), []);
});

// ---------- OpenaiStreamToAnthropic ----------

t.test('OpenaiStreamToAnthropic: text-only stream with a usage-only last chunk, exact events', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_xyz', model: 'gpt-4o' });
  const events = openaiTextStream.flatMap((c) => conv.push(c));
  t.strictSame(events, [
    {
      type: 'message_start',
      message: {
        id: 'msg_xyz',
        type: 'message',
        role: 'assistant',
        model: 'gpt-4o',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 0, output_tokens: 0 },
      },
    },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ' there' } },
    { type: 'content_block_stop', index: 0 },
    {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { output_tokens: 7, input_tokens: 11 },
    },
    { type: 'message_stop' },
  ]);
  t.strictSame(conv.finish(), [], 'finish after the end emits nothing');
  t.strictSame(conv.push(chunk({ content: 'late' })), [], 'chunks after the end are ignored');
});

t.test('OpenaiStreamToAnthropic: tool calls with split arguments', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_t', model: 'gpt-4o' });
  const events = [...openaiToolStream.flatMap((c) => conv.push(c)), ...conv.finish()];
  const message = assembleEvents(events);
  t.strictSame(message.content, [
    { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } },
    { type: 'tool_use', id: 'call_2', name: 'time', input: { tz: 'CET' } },
  ]);
  t.equal(message.stop_reason, 'tool_use');
  t.strictSame(message.usage, { input_tokens: 7, output_tokens: 7, cache_read_input_tokens: 4 });
  t.notOk(
    events.some(
      (e) =>
        e.type === 'content_block_delta' &&
        e.delta.type === 'input_json_delta' &&
        e.delta.partial_json === '',
    ),
    'empty argument fragments are not sent',
  );
});

t.test('OpenaiStreamToAnthropic: text then tool call closes the text block first', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_m', model: 'm' });
  const events = [
    ...conv.push(chunk({ role: 'assistant', content: 'Let me check.' })),
    ...conv.push(
      toolDelta({ index: 0, id: 'call_9', type: 'function', function: { name: 'f', arguments: '{}' } }),
    ),
  ];
  t.strictSame(
    events.map((e) => e.type),
    [
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
    ],
  );
});

t.test('OpenaiStreamToAnthropic: finish() ends a stream that had no usage chunk', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_n', model: 'm' });
  const pushed = [...conv.push(chunk({ content: 'x' })), ...conv.push(chunk({}, 'length'))];
  t.notOk(
    pushed.some((e) => e.type === 'message_delta'),
    'waits for a possible usage chunk',
  );
  t.equal(pushed.at(-1)?.type, 'content_block_stop', 'the block is closed at finish_reason');
  const end = conv.finish();
  t.strictSame(end, [
    {
      type: 'message_delta',
      delta: { stop_reason: 'max_tokens', stop_sequence: null },
      usage: { output_tokens: 0 },
    },
    { type: 'message_stop' },
  ]);
  t.strictSame(conv.finish(), []);
});

t.test('OpenaiStreamToAnthropic: finish_reason and usage in one chunk end at once', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_o', model: 'm' });
  const events = conv.push(chunk({ content: 'ok' }, 'content_filter', usageTotals));
  t.strictSame(
    events.map((e) => e.type),
    [
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ],
  );
  const delta = events[4];
  t.equal(delta?.type === 'message_delta' && delta.delta.stop_reason, 'refusal');
});

t.test('OpenaiStreamToAnthropic: an empty stream is still well formed', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_e', model: 'm' });
  const message = assembleEvents(conv.finish());
  t.strictSame(message.content, []);
  t.equal(message.stop_reason, 'end_turn');
});

t.test('OpenaiStreamToAnthropic: repeated ids, reused index with a new id, late fragments', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_r', model: 'm' });
  const events = [
    ...conv.push(toolDelta({ index: 0, id: 'call_a', function: { name: 'f', arguments: '{"a"' } })),
    ...conv.push(toolDelta({ index: 0, id: 'call_a', function: { arguments: ':1}' } })),
    ...conv.push(toolDelta({ index: 0, id: 'call_b', function: { name: 'g', arguments: '{}' } })),
    ...conv.push(toolDelta({ index: 5, function: { name: 'h', arguments: '{"c":' } })),
    ...conv.push(chunk({ tool_calls: [{ index: 5, function: { arguments: '2}' } }] }, 'tool_calls')),
    ...conv.finish(),
  ];
  const message = assembleEvents(events);
  t.equal(message.content.length, 3);
  t.strictSame(message.content[0], { type: 'tool_use', id: 'call_a', name: 'f', input: { a: 1 } });
  t.strictSame(message.content[1], { type: 'tool_use', id: 'call_b', name: 'g', input: {} });
  const third = message.content[2];
  t.equal(third?.type === 'tool_use' && third.id, 'toolu_msg_r_2', 'a missing id is generated');
  t.strictSame(third?.type === 'tool_use' && third.input, { c: 2 });
});

t.test('OpenaiStreamToAnthropic: other choices and chunks without choices are ignored', async (t) => {
  const conv = new OpenaiStreamToAnthropic({ id: 'msg_c', model: 'm' });
  const other = chunk({ content: 'second choice' });
  other.choices = [{ index: 1, delta: { content: 'second choice' }, finish_reason: null }];
  const events = [...conv.push(chunk(null)), ...conv.push(other), ...conv.finish()];
  t.strictSame(
    events.map((e) => e.type),
    ['message_start', 'message_delta', 'message_stop'],
  );
});

// ---------- round trips through both classes ----------

function anthropicToOpenaiToAnthropic(events: AnthropicStreamEvent[]): AnthropicStreamEvent[] {
  const a2o = new AnthropicStreamToOpenai({ created: 0, model: 'claude-sonnet-4-5' });
  const o2a = new OpenaiStreamToAnthropic({ id: 'msg_01ABC', model: 'claude-sonnet-4-5' });
  const out: AnthropicStreamEvent[] = [];
  for (const event of events) for (const c of a2o.push(event)) out.push(...o2a.push(c));
  out.push(...o2a.finish());
  return out;
}

t.test('round trip: Anthropic text stream through OpenAI chunks and back', async (t) => {
  const original = assembleEvents(anthropicTextStream);
  const back = assembleEvents(anthropicToOpenaiToAnthropic(anthropicTextStream));
  t.strictSame(back.content, original.content);
  t.equal(back.stop_reason, original.stop_reason);
  t.equal(back.usage.output_tokens, 12);
  t.equal(back.usage.input_tokens, 25);
});

t.test('round trip: Anthropic tool stream through OpenAI chunks and back', async (t) => {
  const original = assembleEvents(anthropicToolStream);
  const back = assembleEvents(anthropicToOpenaiToAnthropic(anthropicToolStream));
  t.strictSame(back.content, original.content);
  t.strictSame(back.content[1], {
    type: 'tool_use',
    id: 'toolu_A',
    name: 'weather',
    input: { city: 'Paris' },
  });
  t.equal(back.stop_reason, 'tool_use');
  t.strictSame(back.usage, { input_tokens: 30, output_tokens: 40, cache_read_input_tokens: 5 });
});

function openaiToAnthropicToOpenai(chunks: ChatCompletionChunk[]): ChatCompletionChunk[] {
  const o2a = new OpenaiStreamToAnthropic({ id: 'msg_xyz', model: 'gpt-4o' });
  const a2o = new AnthropicStreamToOpenai({ created: 1_700_000_000, model: 'gpt-4o' });
  const events = [...chunks.flatMap((c) => o2a.push(c)), ...o2a.finish()];
  return events.flatMap((e) => a2o.push(e));
}

t.test('round trip: OpenAI streams through Anthropic events and back', async (t) => {
  for (const stream of [openaiTextStream, openaiToolStream]) {
    const original = assembleChunks(stream);
    const back = assembleChunks(openaiToAnthropicToOpenai(stream));
    t.strictSame(back.ids, new Set(['chatcmpl-xyz']));
    t.equal(back.role, 'assistant');
    t.equal(back.content, original.content);
    t.strictSame(back.toolCalls, original.toolCalls);
    t.equal(back.finishReason, original.finishReason);
    t.strictSame(back.usage, original.usage);
  }
});

t.test('property: tool arguments split anywhere survive both translations', async (t) => {
  const jsonValue = fc.jsonValue({ maxDepth: 3 });
  const args = fc.dictionary(fc.string({ minLength: 1, maxLength: 8 }), jsonValue, { maxKeys: 5 });
  fc.assert(
    fc.property(
      args,
      fc.array(fc.nat(), { maxLength: 6 }),
      fc.string({ maxLength: 20 }),
      (input, cuts, text) => {
        const json = JSON.stringify(input);
        const points = [...new Set(cuts.map((c) => c % (json.length + 1)))].sort((a, b) => a - b);
        const stream: ChatCompletionChunk[] = [chunk({ role: 'assistant', content: text })];
        let prev = 0;
        for (const p of [...points, json.length]) {
          const piece = json.slice(prev, p);
          stream.push(
            toolDelta(
              prev === 0
                ? { index: 0, id: 'call_p', type: 'function', function: { name: 'p', arguments: piece } }
                : { index: 0, function: { arguments: piece } },
            ),
          );
          prev = p;
        }
        stream.push(chunk({}, 'tool_calls'), chunk(null, null, usageTotals));
        const back = assembleChunks(openaiToAnthropicToOpenai(stream));
        return (
          back.content === text &&
          back.toolCalls.length === 1 &&
          back.toolCalls[0]?.arguments === json &&
          back.finishReason === 'tool_calls'
        );
      },
    ),
    { numRuns: 200 },
  );
  t.pass('all splits agree');
});

t.test('round trip: an Anthropic stop finish_reason cannot say survives the OpenAI chunks', async (t) => {
  const cases: [string, string | null][] = [
    ['stop_sequence', 'END'],
    ['pause_turn', null],
    ['model_context_window_exceeded', null],
    ['refusal', null],
  ];
  for (const [reason, sequence] of cases) {
    const stream = anthropicTextStream.map((e) =>
      e.type === 'message_delta'
        ? { ...e, delta: { stop_reason: reason, stop_sequence: sequence } as typeof e.delta }
        : e,
    );
    const a2o = new AnthropicStreamToOpenai({ created: 0, model: 'claude' });
    const chunks = stream.flatMap((e) => a2o.push(e));
    t.notMatch(
      JSON.stringify(chunks),
      /stop_sequence|pause_turn|context_window|END/,
      `${reason}: not in JSON`,
    );
    const back = assembleEvents(anthropicToOpenaiToAnthropic(stream));
    t.equal(back.stop_reason, reason, `${reason}: back to Anthropic`);
    t.equal(back.stop_sequence, sequence, `${reason}: with its sequence`);
  }
});
