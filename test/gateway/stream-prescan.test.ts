import OpenAI from 'openai';
import t from 'tap';
import { type OutputGuard, outputGuard } from '../../src/core/guardrails/index.js';
import { mergeFlags } from '../../src/core/policy/index.js';
import { AnthropicStreamGovernor } from '../../src/gateway/anthropic-output.js';
import { OutputStreamGovernor } from '../../src/gateway/output-stream.js';
import { OFFLOAD_CHARS, ScanPool } from '../../src/govern/scan-pool.js';
import type { AnthropicStreamEvent, ChatCompletionChunk } from '../../src/providers/wire/index.js';
import { compileOk } from '../core/policy/helpers.js';
import { serviceOnMockUpstream } from '../helpers/service.js';

// A streamed answer's large texts (one event of 8 MiB, a tool call's arguments held until it
// ends) are scanned in the scan worker before the event is governed, so one answer cannot hold
// the event loop, and every other call, for its scan: what goes out must be exactly what the
// inline scan lets out, and no large text may be scanned inline.

const POLICY = compileOk({
  mode: 'enforce',
  default: 'allow',
  detectors: { pii: { action: 'redact' }, secrets: { action: 'block' }, unicode: { action: 'flag' } },
  rules: [],
});
const GUARD = outputGuard(POLICY, mergeFlags(POLICY, {}).flags);

/** GUARD, recording the length of every text it scans itself. */
function spying(lengths: number[]): OutputGuard {
  return {
    active: GUARD.active,
    detectOptions: GUARD.detectOptions,
    classify: (f) => GUARD.classify(f),
    scan(text) {
      lengths.push(text.length);
      return GUARD.scan(text);
    },
  };
}

const prose = (n: number): string =>
  'The quick brown fox jumps over the lazy dog. '.repeat(Math.ceil(n / 45)).slice(0, n);
const EMAIL = ' write to jane.doe@example.com today ';
const KEY = ' AKIAIOSFODNN7EXAMPLE ';

/** A text of about `n` characters with `insert` at `at` (a fraction of it). */
const withAt = (n: number, insert: string, at: number): string => {
  const p = prose(n);
  const i = Math.floor(p.length * at);
  return p.slice(0, i) + insert + p.slice(i);
};

const chunk = (
  delta: Record<string, unknown>,
  finish: string | null = null,
  index = 0,
): ChatCompletionChunk =>
  ({
    id: 'c1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'gpt-test',
    choices: [{ index, delta, finish_reason: finish }],
  }) as ChatCompletionChunk;

const BIG = OFFLOAD_CHARS * 3;
const openaiCases: Record<string, ChatCompletionChunk[]> = {
  'one large content event with an email (redacted)': [
    chunk({ role: 'assistant', content: withAt(BIG, EMAIL, 0.5) }),
    chunk({}, 'stop'),
  ],
  'an email at the end of a large event, cut by the hold': [
    chunk({ content: withAt(BIG, EMAIL, 0.9999) }),
    chunk({ content: ' and more.' }),
    chunk({}, 'stop'),
  ],
  'a key in the second of two large events (blocks)': [
    chunk({ content: prose(BIG) }),
    chunk({ content: withAt(BIG, KEY, 0.3) }),
    chunk({}, 'stop'),
  ],
  'a large event that finishes the answer': [chunk({ content: withAt(BIG, EMAIL, 0.2) }, 'stop')],
  'a large refusal': [chunk({ refusal: withAt(BIG, EMAIL, 0.7) }), chunk({}, 'stop')],
  'large tool arguments held across fragments, a key in them': [
    chunk({
      tool_calls: [
        { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":"' } },
      ],
    }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: withAt(BIG, KEY, 0.5) } }] }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '"}' } }] }, 'tool_calls'),
  ],
  'large tool arguments with escapes, an email in them (redacted)': [
    chunk({
      tool_calls: [
        { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":"\\u0041' } },
      ],
    }),
    chunk(
      { tool_calls: [{ index: 0, function: { arguments: `${withAt(BIG, EMAIL, 0.5)}"}` } }] },
      'tool_calls',
    ),
  ],
  'large tool arguments the stream ends without finishing': [
    chunk({
      tool_calls: [
        {
          index: 0,
          id: 'call_1',
          type: 'function',
          function: { name: 'f', arguments: `{"a":"${withAt(BIG, EMAIL, 0.1)}"}` },
        },
      ],
    }),
  ],
  'a large custom tool input': [
    chunk(
      {
        tool_calls: [
          { index: 0, id: 'call_1', type: 'custom', custom: { name: 'sh', input: withAt(BIG, EMAIL, 0.4) } },
        ],
      },
      'tool_calls',
    ),
  ],
  'two choices, one large': [
    chunk({ content: 'hi' }),
    chunk({ content: withAt(BIG, EMAIL, 0.5) }, null, 1),
    chunk({}, 'stop'),
    chunk({}, 'stop', 1),
  ],
};

// Found by the review of this change (review-s14 #1): each was scanned inline.
openaiCases['the same new tool call twice in one delta, and the finish'] = [
  chunk(
    {
      tool_calls: [
        { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":"' } },
        { index: 0, function: { arguments: `${withAt(BIG, KEY, 0.5)}"}` } },
      ],
    },
    'tool_calls',
  ),
];
openaiCases['arguments whose numbers grow when written out'] = [
  chunk(
    {
      tool_calls: [
        {
          index: 0,
          id: 'call_1',
          type: 'function',
          function: { name: 'f', arguments: `{"a":"\\u0041","n":[${'1E20,'.repeat(3000)}1]}` },
        },
      ],
    },
    'tool_calls',
  ),
];

const event = (e: Record<string, unknown>): AnthropicStreamEvent => e as unknown as AnthropicStreamEvent;
const anthropicCases: Record<string, AnthropicStreamEvent[]> = {
  'a large text delta': [
    event({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
    event({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text: withAt(BIG, EMAIL, 0.5) },
    }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'a large text in the block start, after another block': [
    event({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: 'first block ' } }),
    event({ type: 'content_block_stop', index: 0 }),
    event({
      type: 'content_block_start',
      index: 1,
      content_block: { type: 'text', text: withAt(BIG, EMAIL, 0.6) },
    }),
    event({ type: 'content_block_stop', index: 1 }),
  ],
  'a large tool input with a key': [
    event({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'tool_use', id: 't1', name: 'f', input: {} },
    }),
    event({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: '{"a":"' },
    }),
    event({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: withAt(BIG, KEY, 0.5) },
    }),
    event({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '"}' } }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'a large tool input with an email (redacted in the JSON)': [
    event({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'tool_use', id: 't1', name: 'f', input: {} },
    }),
    event({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: `{"a":"${withAt(BIG, EMAIL, 0.5)}"}` },
    }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'a large thinking block': [
    event({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'thinking', thinking: '', signature: '' },
    }),
    event({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: prose(BIG) } }),
    event({ type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig' } }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'a large citation': [
    event({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
    event({
      type: 'content_block_delta',
      index: 0,
      delta: {
        type: 'citations_delta',
        citation: { type: 'char_location', cited_text: withAt(BIG, EMAIL, 0.5) },
      },
    }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'large citations in a text block start': [
    event({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'text', text: 'hi', citations: [{ cited_text: prose(BIG) }] },
    }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'a block of another kind with one large delta that is not JSON': [
    event({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'web_search_tool_result', tool_use_id: 's1', content: [] },
    }),
    event({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'future_delta', data: withAt(BIG, EMAIL, 0.5) },
    }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'a block of another kind with a large start': [
    event({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'web_search_tool_result', tool_use_id: 's1', content: [{ text: prose(BIG) }] },
    }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
  'a large block of another kind': [
    event({
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'server_tool_use', id: 's1', name: 'web_search', input: {} },
    }),
    event({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'input_json_delta', partial_json: `{"q":"${withAt(BIG, EMAIL, 0.5)}"}` },
    }),
    event({ type: 'content_block_stop', index: 0 }),
  ],
};

interface Governed<E> {
  prescan(e: E | undefined, scans: ScanPool): Promise<void> | undefined;
  push(e: E): E[];
  end(): E[];
  readonly blocked: unknown;
  readonly pii: ReadonlySet<string>;
}

/** What a governor lets out of `events`, inline or with its large texts scanned in `pool`. */
async function run<E>(make: () => Governed<E>, events: readonly E[], pool?: ScanPool): Promise<unknown> {
  const g = make();
  const out: E[][] = [];
  let failed: string | undefined;
  try {
    for (const e of events) {
      if (pool) await g.prescan(e, pool);
      out.push(g.push(e));
      if (g.blocked) break;
    }
    if (!g.blocked) {
      if (pool) await g.prescan(undefined, pool);
      out.push(g.end());
    }
  } catch (err) {
    failed = (err as Error).message;
  }
  return { out, blocked: g.blocked, pii: [...g.pii].sort(), failed };
}

t.test(
  'large streamed texts are scanned in the worker, and what goes out is the inline scan’s',
  async (t) => {
    const pool = new ScanPool();
    t.teardown(() => pool.close());
    const check = async <E>(name: string, make: (g: OutputGuard) => Governed<E>, events: readonly E[]) => {
      const inline = await run(() => make(GUARD), events);
      const lengths: number[] = [];
      const before = pool.offloaded;
      const offloaded = await run(() => make(spying(lengths)), events, pool);
      t.same(offloaded, inline, `${name}: the same events out`);
      t.ok(pool.offloaded > before, `${name}: scanned in the worker`);
      const most = Math.max(0, ...lengths);
      t.ok(most < OFFLOAD_CHARS, `${name}: nothing large scanned inline (longest ${most})`);
    };
    for (const [name, events] of Object.entries(openaiCases))
      await check(name, (g) => new OutputStreamGovernor(g), events);
    for (const [name, events] of Object.entries(anthropicCases))
      await check(name, (g) => new AnthropicStreamGovernor(g), events);
    // The outcomes the cases were built for, so the comparison is not of two empty answers.
    t.match(
      await run(
        () => new OutputStreamGovernor(GUARD),
        openaiCases['a key in the second of two large events (blocks)'] as ChatCompletionChunk[],
      ),
      { blocked: { where: 'content' } },
    );
    t.match(
      await run(
        () => new OutputStreamGovernor(GUARD),
        openaiCases['one large content event with an email (redacted)'] as ChatCompletionChunk[],
      ),
      { blocked: undefined, pii: ['email'] },
    );
  },
);

t.test('ordinary events are not offloaded, and a worker that fails fails the stream', async (t) => {
  const pool = new ScanPool();
  t.teardown(() => pool.close());
  const g = new OutputStreamGovernor(GUARD);
  t.equal(
    g.prescan(chunk({ content: prose(OFFLOAD_CHARS - 500) }), pool),
    undefined,
    'a text under the threshold',
  );
  t.equal(new AnthropicStreamGovernor(GUARD).prescan(event({ type: 'ping' }), pool), undefined);
  const dying = new ScanPool(new URL('../helpers/dying-worker.js', import.meta.url));
  t.teardown(() => dying.close());
  await t.rejects(
    new OutputStreamGovernor(GUARD).prescan(chunk({ content: prose(BIG) }), dying) as Promise<void>,
    'the worker died: the event is not governed unscanned',
  );
});

t.test(
  'through the gateway: one large stream event is scanned off the loop and redacted alike',
  async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t);
    const text = withAt(BIG, EMAIL, 0.5);
    const sse = (o: unknown): string => `data: ${JSON.stringify(o)}\n\n`;
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body: `${sse(chunk({ role: 'assistant', content: text })) + sse(chunk({}, 'stop'))}data: [DONE]\n\n`,
    };
    const offloaded = async (): Promise<number> => {
      const m = await svc.call('/api/metrics', { token: svc.pat });
      return Number(String(m.body).match(/^govgate_content_scans_offloaded_total (\d+)/m)?.[1]);
    };
    t.equal(await offloaded(), 0);
    const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    let out = '';
    for await (const c of stream) out += c.choices[0]?.delta.content ?? '';
    t.equal(await offloaded(), 1, 'the large event was scanned in the worker');
    t.notOk(out.includes('jane.doe@example.com'), 'the address was redacted');
    t.equal(out, text.replace('jane.doe@example.com', '[EMAIL]'), 'and the rest is the answer as sent');
  },
);

t.test(
  'what was not foreseen fails the answer rather than being scanned inline, and is not kept',
  async (t) => {
    const pool = new ScanPool();
    t.teardown(() => pool.close());
    // A chunk that repeats a choice (OpenAI never sends one): refused whole.
    const dup = chunk({ content: 'x' });
    dup.choices.push({ index: 0, delta: { content: prose(BIG) }, finish_reason: null });
    const g = new OutputStreamGovernor(GUARD);
    await g.prescan(dup, pool);
    t.throws(() => g.push(dup), { code: 'upstream_error', message: /one choice twice/ });
    t.equal(
      (g as unknown as { prescans: { cache: Map<string, unknown> } }).prescans.cache.size,
      0,
      'its scan is not kept',
    );
    // Once the worker is in use, a large text scanned without it first is refused, not scanned here.
    const lengths: number[] = [];
    const h = new OutputStreamGovernor(spying(lengths));
    t.equal(h.prescan(chunk({ content: 'hi' }), pool), undefined);
    h.push(chunk({ content: 'hi' }));
    t.throws(() => h.push(chunk({ content: prose(BIG) })), {
      code: 'upstream_error',
      message: /off the event loop/,
    });
    t.ok(Math.max(0, ...lengths) < OFFLOAD_CHARS, 'nothing large was scanned inline');
    // Without the worker (never prescanned), large texts are scanned inline as before.
    t.doesNotThrow(() => new OutputStreamGovernor(GUARD).push(chunk({ content: prose(BIG) })));
  },
);
