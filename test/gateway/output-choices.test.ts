import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

// Every choice of an answer (`n` > 1) goes through the output guard, whole or streamed, and a
// streamed choice stays under its own index.

const KEY = 'AKIAIOSFODNN7EXAMPLQ';
const MAIL = 'bob@example.com';

function completion(contents: (string | null)[], toolArgs?: string): string {
  return JSON.stringify({
    id: 'chatcmpl-n',
    object: 'chat.completion',
    created: 1,
    model: 'gpt-test',
    choices: contents.map((content, index) => ({
      index,
      message:
        index === 1 && toolArgs !== undefined
          ? {
              role: 'assistant',
              content,
              tool_calls: [
                { id: 'call_1', type: 'function', function: { name: 'send', arguments: toolArgs } },
              ],
            }
          : { role: 'assistant', content },
      finish_reason: 'stop',
    })),
    usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 },
  });
}

/** Two choices interleaved as OpenAI sends them; choice 1 also calls a tool. */
function stream(first: string, second: string, toolArgs: string): string {
  const base = { id: 'chatcmpl-n', object: 'chat.completion.chunk', created: 1, model: 'gpt-test' };
  const chunk = (index: number, delta: unknown, finish: string | null = null): string =>
    `data: ${JSON.stringify({ ...base, choices: [{ index, delta, finish_reason: finish }] })}\n\n`;
  const pieces = (s: string): string[] => s.match(/.{1,4}/gs) ?? [];
  let out = chunk(0, { role: 'assistant', content: '' }) + chunk(1, { role: 'assistant', content: '' });
  const a = pieces(first);
  const b = pieces(second);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (a[i]) out += chunk(0, { content: a[i] });
    if (b[i]) out += chunk(1, { content: b[i] });
  }
  out += chunk(1, {
    tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'send', arguments: '' } }],
  });
  for (const p of pieces(toolArgs))
    out += chunk(1, { tool_calls: [{ index: 0, function: { arguments: p } }] });
  out += chunk(0, {}, 'stop') + chunk(1, {}, 'tool_calls');
  out += `data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 } })}\n\n`;
  return `${out}data: [DONE]\n\n`;
}

t.test('the output guard covers every choice', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'q' }];
  const blockSecrets = { headers: { 'x-service-flags': 'secrets=block' } };

  t.test('whole answers: each choice is redacted', async (t) => {
    const text = `key ${KEY} mail ${MAIL}`;
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'application/json',
      body: completion([text, text, text], JSON.stringify({ to: MAIL })),
    };
    const res = await openai.chat.completions.create({ model: 'gpt-test', n: 3, messages });
    t.equal(res.choices.length, 3);
    for (const c of res.choices) t.equal(c.message.content, 'key [SECRET] mail [EMAIL]', `choice ${c.index}`);
    t.equal((res.choices[1]?.message.tool_calls?.[0] as any)?.function.arguments, '{"to":"[EMAIL]"}');
    t.notMatch(JSON.stringify(res), new RegExp(`${KEY}|bob@`));
    const audit = await svc.call(new URL((res as any).service.audit_url).pathname, { token: svc.pat });
    const call = audit.body.data.find((e: any) => e.event_type === 'llm_call');
    t.same(call.details.output_detections, ['email']);
  });

  t.test('whole answers: a secret in a later choice blocks the answer', async (t) => {
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'application/json',
      body: completion(['fine', `key ${KEY}`]),
    };
    const res = await openai.chat.completions.create({ model: 'gpt-test', n: 2, messages }, blockSecrets);
    t.notMatch(JSON.stringify(res), new RegExp(KEY));
    t.match(res.choices[0]?.message.content, /blocked by governance policy/);
    t.equal((res as any).service.blocked, true);
    t.equal((res as any).service.stage, 'output');
  });

  t.test('streams: each choice is guarded under its own index', async (t) => {
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body: stream(
        `AAAA first answer to ${MAIL}`,
        `BBBB second answer to ${MAIL}`,
        JSON.stringify({ to: MAIL }),
      ),
    };
    const texts = ['', ''];
    const args = ['', ''];
    const finishes: [number, string][] = [];
    let last: any;
    for await (const c of await openai.chat.completions.create({
      model: 'gpt-test',
      n: 2,
      stream: true,
      messages,
    })) {
      last = c;
      for (const ch of c.choices) {
        texts[ch.index] += ch.delta.content ?? '';
        for (const tc of ch.delta.tool_calls ?? []) args[ch.index] += tc.function?.arguments ?? '';
        if (ch.finish_reason) finishes.push([ch.index, ch.finish_reason]);
      }
    }
    t.same(texts, ['AAAA first answer to [EMAIL]', 'BBBB second answer to [EMAIL]']);
    t.same(args, ['', '{"to":"[EMAIL]"}']);
    t.same(finishes, [
      [0, 'stop'],
      [1, 'tool_calls'],
    ]);
    t.equal(last.service.blocked, false);
  });

  t.test('streams: a secret in a later choice ends the stream blocked', async (t) => {
    upstream.behaviour = {
      kind: 'raw',
      contentType: 'text/event-stream',
      body: stream(`first ${'fine text '.repeat(20)}`, `second ${KEY} ${'more '.repeat(30)}`, '{}'),
    };
    let all = '';
    let last: any;
    for await (const c of await openai.chat.completions.create(
      { model: 'gpt-test', n: 2, stream: true, messages },
      blockSecrets,
    )) {
      last = c;
      all += JSON.stringify(c);
    }
    t.notMatch(all, new RegExp(KEY), 'the secret never reached the agent');
    t.match(all, /blocked by governance policy/);
    t.equal(last.service.blocked, true);
    t.equal(last.service.stage, 'output');
  });
});
