import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { costOf, priceOf } from '../../src/core/guardrails/index.js';
import {
  callEvent,
  ENGINES,
  publishOrgPolicy,
  serviceOnMockUpstream,
  type TestService,
} from '../helpers/service.js';

// A stream that ends before the provider's usage (the client leaves, the output guard blocks, the
// upstream fails or stalls) is recorded with an estimated usage and cost (four characters a
// token: the prompt's texts, the output read from the upstream) and `details.usage_estimated`;
// every stream event says what reached the client (`details.delivered`). A stream with the
// provider's own usage keeps it.

const PROMPT = 'What is the answer to everything, then'; // 38 characters: 10 tokens
const PROMPT_TOKENS = 10;

/** `model`'s list price of these counts, as the audit trail rounds it. */
function priced(model: string, prompt: number, completion: number): number {
  const price = priceOf(model);
  if (!price) throw new Error(`no price for ${model}`);
  return Math.round(costOf(price, prompt, completion) * 1e9) / 1e9;
}

/** Makes the org's policy observe-only: the output is not guarded, text goes out as it comes. */
async function observeOnly(svc: TestService): Promise<void> {
  await publishOrgPolicy(svc, 'observe', { mode: 'observe', rules: [] });
}

for (const engine of ENGINES)
  t.test(`an answer read to its finish and left before the usage chunk (${engine})`, async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t, { engine });
    await observeOnly(svc);
    const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
    const reply = 'The answer is forty-two, as always.'; // 35 characters: 9 tokens
    upstream.reply = reply;
    let resume = (): void => {};
    // The usage chunk and [DONE] wait: the agent has the whole answer and its finish before them.
    upstream.behaviour = { kind: 'paused-stream', resume: new Promise<void>((r) => (resume = r)), tail: 2 };
    t.teardown(() => resume());
    const stream = await openai.chat.completions.create(
      { model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: PROMPT }] },
      { headers: { 'x-session-id': `read-then-leave-${engine}` } },
    );
    let text = '';
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason;
      if (finish) break; // the agent leaves (the SDK aborts its request)
    }
    t.equal(text, reply, 'the agent read the whole answer');
    t.equal(finish, 'stop');

    const event = await callEvent(svc, `read-then-leave-${engine}`);
    t.equal(event?.outcome, 'error', 'still recorded as the client going away');
    t.equal(event?.reason, 'client disconnected');
    t.equal(event?.details.status, 499);
    t.strictSame(
      event?.usage,
      { prompt_tokens: PROMPT_TOKENS, completion_tokens: 9, total_tokens: PROMPT_TOKENS + 9 },
      'usage estimated from the prompt and the output read',
    );
    t.equal(event?.details.usage_estimated, true, 'and marked as an estimate');
    t.equal(event?.cost, priced('gpt-4o-mini', PROMPT_TOKENS, 9), 'costed at list price');
    t.strictSame(
      event?.details.delivered,
      { chars: reply.length, complete: true },
      'all of it was delivered',
    );

    const overview = await svc.call('/api/audit/_overview', { token: svc.pat });
    t.equal(overview.body.tokens?.completion, 9, 'the overview counts the estimated tokens');
    t.equal(overview.body.cost, priced('gpt-4o-mini', PROMPT_TOKENS, 9), 'and their cost');
  });

t.test('a stream left mid-answer while the upstream stalls', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  upstream.behaviour = { kind: 'stall-stream' }; // one chunk, `partial ` (8 characters: 2 tokens)
  for (const guard of ['guarded', 'unguarded'] as const) {
    if (guard === 'unguarded') await observeOnly(svc);
    // Guarded, the text waits in the guard's window: read from the upstream, never delivered.
    const delivered = guard === 'guarded' ? 0 : 8;

    const session = `stall-openai-${guard}`;
    const stream = await openai.chat.completions.create(
      { model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: PROMPT }] },
      { headers: { 'x-session-id': session } },
    );
    for await (const _ of stream) break; // the first chunk, then the agent leaves
    const event = await callEvent(svc, session);
    t.equal(event?.reason, 'client disconnected', `${guard}: the client left`);
    t.strictSame(
      event?.usage,
      { prompt_tokens: PROMPT_TOKENS, completion_tokens: 2, total_tokens: PROMPT_TOKENS + 2 },
      `${guard}: usage estimated from what was read`,
    );
    t.equal(event?.details.usage_estimated, true, `${guard}: marked as an estimate`);
    t.equal(event?.cost, priced('gpt-4o-mini', PROMPT_TOKENS, 2), `${guard}: costed`);
    t.strictSame(event?.details.delivered, { chars: delivered, complete: false }, `${guard}: delivered`);

    // An Anthropic upstream's message_start says `output_tokens: 1` before anything is written:
    // a placeholder, not the answer's count.
    const anthropicSession = `stall-anthropic-${guard}`;
    const events = await anthropic.messages.create(
      {
        model: 'claude-haiku-test',
        max_tokens: 50,
        stream: true,
        messages: [{ role: 'user', content: PROMPT }],
      },
      { headers: { 'x-session-id': anthropicSession } },
    );
    for await (const e of events) if (e.type === 'message_start') break;
    const forwarded = await callEvent(svc, anthropicSession);
    t.equal(forwarded?.reason, 'client disconnected', `${guard} anthropic: the client left`);
    t.strictSame(
      forwarded?.usage,
      { prompt_tokens: 13, completion_tokens: 2, total_tokens: 15 },
      `${guard} anthropic: the provider's input count, the output estimated from what was read`,
    );
    t.equal(forwarded?.details.usage_estimated, true, `${guard} anthropic: marked as an estimate`);
    t.equal(forwarded?.cost, priced('claude-haiku-test', 13, 2), `${guard} anthropic: costed`);
    t.equal(forwarded?.details.delivered?.complete, false, `${guard} anthropic: not complete`);
  }
});

t.test('a stream the output guard blocks', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  await publishOrgPolicy(svc, 'block-secrets', {
    mode: 'enforce',
    default: 'allow',
    detectors: { secrets: { action: 'block' } },
    rules: [],
  });
  const before = 'Lorem ipsum dolor sit amet. '.repeat(10);
  upstream.reply = `${before} the key is AKIAZ3MPLQ7RTXW4NV2K ${'more text. '.repeat(20)}`;
  const res = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-session-id': 'blocked' },
    body: { model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: PROMPT }] },
  });
  const contents: string[] = [];
  for (const line of String(res.body).split('\n'))
    if (line.startsWith('data: {'))
      for (const c of JSON.parse(line.slice(6)).choices ?? [])
        if (c.delta?.content) contents.push(c.delta.content);
  const notice = contents.pop() ?? ''; // the last text is govgate's block notice
  t.match(notice, /blocked/i, 'the stream ends with the block notice');
  const released = contents.join('');
  t.ok(released.length > 0 && before.startsWith(released.trimEnd().slice(0, 20)), 'some text went out first');

  const event = await callEvent(svc, 'blocked');
  t.equal(event?.outcome, 'block');
  t.equal(event?.details.usage_estimated, true, 'the usage is an estimate');
  const completion = event?.usage?.completion_tokens ?? 0;
  t.ok(completion >= Math.ceil(released.length / 4), 'at least what was released');
  t.ok(completion <= Math.ceil(upstream.reply.length / 4), 'at most the whole answer');
  t.equal(event?.usage?.prompt_tokens, PROMPT_TOKENS);
  t.equal(event?.cost, priced('gpt-4o-mini', PROMPT_TOKENS, completion), 'costed');
  t.strictSame(event?.details.delivered, { chars: released.length, complete: false }, 'delivered');
});

t.test('a stream whose upstream fails mid-answer', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  await observeOnly(svc);
  const base = { id: 'chatcmpl-f', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini' };
  const chunk = (delta: unknown) =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
  // No finish, no [DONE]: the body ends half-way.
  upstream.behaviour = {
    kind: 'raw',
    contentType: 'text/event-stream',
    body:
      chunk({ role: 'assistant', content: '' }) +
      chunk({ content: 'Hello there, ' }) +
      chunk({ content: 'general' }),
  };
  const res = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-session-id': 'cut-off' },
    body: { model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: PROMPT }] },
  });
  t.equal(res.status, 200);
  const event = await callEvent(svc, 'cut-off');
  t.equal(event?.outcome, 'error', 'an upstream failure');
  t.not(event?.reason, 'client disconnected');
  t.strictSame(
    event?.usage,
    { prompt_tokens: PROMPT_TOKENS, completion_tokens: 5, total_tokens: PROMPT_TOKENS + 5 },
    'estimated from the 20 characters read',
  );
  t.equal(event?.details.usage_estimated, true);
  t.strictSame(event?.details.delivered, { chars: 20, complete: false });
});

t.test('a stream that fails before its first chunk', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  upstream.behaviour = { kind: 'status', status: 500 };
  const res = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-session-id': 'no-stream' },
    body: { model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: PROMPT }] },
  });
  t.equal(res.status, 502, 'a plain error answer');
  const event = await callEvent(svc, 'no-stream');
  t.equal(event?.outcome, 'error');
  t.equal(event?.usage, null, 'no usage: the provider answered nothing');
  t.strictSame(event?.details.delivered, { chars: 0, complete: false }, 'nothing delivered');
});

t.test("a stream with the provider's usage keeps it", async (t) => {
  const { svc } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  for (const guard of ['guarded', 'unguarded'] as const) {
    if (guard === 'unguarded') await observeOnly(svc);
    const cases: [
      caller: 'openai' | 'anthropic',
      model: string,
      usage: Record<string, number>,
      text: string,
    ][] = [
      [
        'openai',
        'gpt-4o-mini',
        { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
        'upstream-openai: ',
      ],
      [
        'anthropic',
        'gpt-4o-mini',
        { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
        'upstream-openai: ',
      ],
      [
        'anthropic',
        'claude-haiku-test',
        { prompt_tokens: 13, completion_tokens: 9, total_tokens: 22 },
        'upstream-anthropic: ',
      ],
    ];
    for (const [caller, model, usage, prefix] of cases) {
      const what = `${caller} client, ${model} (${guard})`;
      const session = `whole-${caller}-${model}-${guard}`;
      const headers = { 'x-session-id': session };
      let text = '';
      if (caller === 'openai') {
        const stream = await openai.chat.completions.create(
          { model, stream: true, messages: [{ role: 'user', content: PROMPT }] },
          { headers },
        );
        for await (const c of stream) text += c.choices[0]?.delta.content ?? '';
      } else {
        const stream = await anthropic.messages.create(
          { model, max_tokens: 50, stream: true, messages: [{ role: 'user', content: PROMPT }] },
          { headers },
        );
        for await (const e of stream)
          if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
      }
      t.equal(text, `${prefix}${PROMPT}`, `${what}: the answer`);
      const event = await callEvent(svc, session);
      t.equal(event?.outcome, 'allow', `${what}: allowed`);
      t.strictSame(event?.usage, usage, `${what}: the provider's usage`);
      t.notOk('usage_estimated' in (event?.details ?? {}), `${what}: not an estimate`);
      t.strictSame(event?.details.delivered, { chars: text.length, complete: true }, `${what}: delivered`);
    }
  }
});
