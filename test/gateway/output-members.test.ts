import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

// A guarded answer carries only what the guard read, whole as streamed: logprobs would repeat the
// tokens of redacted text, and members govgate does not know were never scanned.

const KEY = 'AKIAIOSFODNN7EXAMPLQ';
const MAIL = 'bob@example.com';

function answer(message: Record<string, unknown>, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    id: 'chatcmpl-m',
    object: 'chat.completion',
    created: 1,
    model: 'gpt-test',
    choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: 'stop', ...extra }],
    usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 },
  });
}

/** The llm_call event of an answer. */
async function callEvent(svc: any, res: any): Promise<any> {
  const audit = await svc.call(new URL(res.service.audit_url).pathname, { token: svc.pat });
  return audit.body.data.find((e: any) => e.event_type === 'llm_call');
}

t.test('guarded whole answers carry only what the guard read', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'q' }];
  const raw = (body: string): void => {
    upstream.behaviour = { kind: 'raw', contentType: 'application/json', body };
  };

  t.test('logprobs and members govgate does not scan are not passed on', async (t) => {
    const tokens = ['mail', ' bob', '@', 'example', '.com'].map((token) => ({
      token,
      logprob: -0.1,
      top_logprobs: [],
    }));
    raw(
      answer(
        {
          content: `mail ${MAIL}`,
          annotations: [{ type: 'url_citation', url_citation: { url: `https://x.example/?to=${MAIL}` } }],
          audio: { id: 'a1', data: '', transcript: `mail ${MAIL}`, expires_at: 1 },
        },
        { logprobs: { content: tokens, refusal: null } },
      ),
    );
    const res = await openai.chat.completions.create({ model: 'gpt-test', logprobs: true, messages });
    t.equal(res.choices[0]?.message.content, 'mail [EMAIL]');
    t.equal(res.choices[0]?.logprobs, null, 'logprobs would spell the redacted address');
    t.notMatch(JSON.stringify(res), /bob|example\.com/);
    t.same(Object.keys(res.choices[0]?.message ?? {}).sort(), ['content', 'role']);
  });

  t.test(
    'a call is read by its type: another member beside it is dropped, not passed unscanned',
    async (t) => {
      raw(
        answer({
          content: null,
          tool_calls: [
            {
              id: 'c1',
              type: 'custom',
              custom: { name: 'shell', input: 'ls' },
              function: { name: 'harmless', arguments: JSON.stringify({ key: KEY }) },
            },
            {
              id: 'c2',
              type: 'function',
              function: { name: 'lookup', arguments: '{}' },
              custom: { name: 'x', input: `key ${KEY}` },
            },
          ],
        }),
      );
      const res = await openai.chat.completions.create({ model: 'gpt-test', messages });
      t.notMatch(JSON.stringify(res), new RegExp(KEY));
      t.same(res.choices[0]?.message.tool_calls, [
        { id: 'c1', type: 'custom', custom: { name: 'shell', input: 'ls' } },
        { id: 'c2', type: 'function', function: { name: 'lookup', arguments: '{}' } },
      ]);
      t.same((await callEvent(svc, res)).details.tool_calls, ['shell', 'lookup']);
    },
  );

  t.test('a legacy function_call is guarded as a tool call is', async (t) => {
    raw(answer({ content: null, function_call: { name: 'send', arguments: JSON.stringify({ to: MAIL }) } }));
    const res = (await openai.chat.completions.create({ model: 'gpt-test', messages })) as any;
    t.same(res.choices[0].message.function_call, { name: 'send', arguments: '{"to":"[EMAIL]"}' });
    raw(answer({ content: null, function_call: { name: 'send', arguments: JSON.stringify({ key: KEY }) } }));
    const blocked = (await openai.chat.completions.create(
      { model: 'gpt-test', messages },
      { headers: { 'x-service-flags': 'secrets=block' } },
    )) as any;
    t.notMatch(JSON.stringify(blocked), new RegExp(KEY));
    t.equal(blocked.service.blocked, true);
    raw(answer({ content: null, function_call: { name: 'send', arguments: 7 } }));
    const malformed = await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'gpt-test', messages },
    });
    t.equal(malformed.status, 502, 'a legacy call that is not name and arguments strings is refused');
  });

  t.test('streams: a legacy function_call is held, guarded and passed on', async (t) => {
    const base = { id: 'chatcmpl-l', object: 'chat.completion.chunk', created: 1, model: 'gpt-test' };
    const chunk = (delta: unknown, finish: string | null = null): string =>
      `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const stream = (args: string): string =>
      chunk({ role: 'assistant', content: null, function_call: { name: 'send', arguments: '' } }) +
      (args.match(/.{1,5}/g) ?? []).map((p) => chunk({ function_call: { arguments: p } })).join('') +
      chunk({}, 'function_call') +
      'data: [DONE]\n\n';
    const read = async (headers?: Record<string, string>) => {
      let name = '';
      let args = '';
      let last: any;
      for await (const c of await openai.chat.completions.create(
        { model: 'gpt-test', stream: true, messages },
        headers ? { headers } : undefined,
      )) {
        const fc = (c.choices[0]?.delta as any)?.function_call;
        if (fc?.name) name += fc.name;
        if (fc?.arguments) args += fc.arguments;
        if (c.choices[0]?.delta?.content) args += c.choices[0].delta.content;
        last = c;
      }
      return { name, args, last };
    };
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body: stream(JSON.stringify({ to: MAIL })),
    };
    const redacted = await read();
    t.equal(redacted.name, 'send');
    t.equal(redacted.args, '{"to":"[EMAIL]"}');
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body: stream(JSON.stringify({ key: KEY })),
    };
    const blocked = await read({ 'x-service-flags': 'secrets=block' });
    t.notMatch(blocked.args, new RegExp(KEY.slice(0, 8)));
    t.equal(blocked.last.service.blocked, true);
  });

  t.test('streams: one audited name per call, by its type', async (t) => {
    const base = { id: 'chatcmpl-s', object: 'chat.completion.chunk', created: 1, model: 'gpt-test' };
    const chunk = (delta: unknown, finish: string | null = null): string =>
      `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body:
        chunk({ role: 'assistant', content: null }) +
        chunk({
          tool_calls: [
            {
              index: 0,
              id: 'c1',
              type: 'custom',
              custom: { name: 'shell', input: '' },
              function: { name: 'harmless' },
            },
          ],
        }) +
        chunk({ tool_calls: [{ index: 0, custom: { input: 'ls' } }] }) +
        chunk({ tool_calls: [{ index: 0, custom: { name: 'shell', input: ' -la' } }] }) +
        chunk({}, 'tool_calls') +
        'data: [DONE]\n\n',
    };
    let last: any;
    for await (const c of await openai.chat.completions.create({ model: 'gpt-test', stream: true, messages }))
      last = c;
    t.same((await callEvent(svc, last)).details.tool_calls, ['shell']);
  });
});
