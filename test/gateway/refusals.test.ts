import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import type { MockUpstream } from '../helpers/mock-upstream.js';
import { serviceOnMockUpstream, type TestService } from '../helpers/service.js';

// A model's refusal (`message.refusal`, `delta.refusal` in streams) is model output like its
// content: the output guard redacts it or blocks the answer the same way, and a guarded stream
// relays it (scanned) instead of dropping it. /v1/messages turns it into answer text.

const KEY = 'AKIAIOSFODNN7EXAMPLQ';
const MAIL = 'bob@example.com';

function refusal(text: unknown): MockUpstream['behaviour'] {
  return {
    kind: 'raw',
    contentType: 'application/json',
    body: JSON.stringify({
      id: 'chatcmpl-refusal',
      object: 'chat.completion',
      created: 1,
      model: 'gpt-test',
      choices: [
        { index: 0, message: { role: 'assistant', content: null, refusal: text }, finish_reason: 'stop' },
      ],
      usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 },
    }),
  };
}

/** A streamed refusal, in small pieces, as OpenAI sends one. */
function refusalStream(text: string): MockUpstream['behaviour'] {
  const base = { id: 'chatcmpl-refusal', object: 'chat.completion.chunk', created: 1, model: 'gpt-test' };
  const chunk = (delta: unknown, finish: string | null = null) =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  let body = chunk({ role: 'assistant', content: null, refusal: '' });
  for (const piece of text.match(/.{1,5}/gs) ?? []) body += chunk({ refusal: piece });
  body += chunk({}, 'stop');
  body += `data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 } })}\n\n`;
  return { kind: 'raw', contentType: 'text/event-stream', body: `${body}data: [DONE]\n\n` };
}

async function callEvent(svc: TestService, auditUrl: string): Promise<any> {
  const res = await svc.call(new URL(auditUrl).pathname, { token: svc.pat });
  return (res.body.data as any[]).find((e) => e.event_type === 'llm_call');
}

t.test('refusals go through the output guard', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'q' }];
  const blockSecrets = { headers: { 'x-service-flags': 'secrets=block' } };
  const said = `I will not write to ${MAIL}.`;
  const redacted = 'I will not write to [EMAIL].';

  t.test('whole answers', async (t) => {
    upstream.behaviour = refusal(said);
    const res = await openai.chat.completions.create({ model: 'gpt-test', messages });
    t.equal(res.choices[0]?.message.refusal, redacted, 'OpenAI client: the refusal is redacted');
    t.notMatch(JSON.stringify(res), /bob@/);
    const event = await callEvent(svc, (res as any).service.audit_url);
    t.same(event.details.output_detections, ['email'], 'the finding is audited');

    const msg = await anthropic.messages.create({ model: 'gpt-test', max_tokens: 50, messages });
    t.strictSame(msg.content, [{ type: 'text', text: redacted }], 'Anthropic client: its text is redacted');

    upstream.behaviour = refusal(`Not sharing ${KEY}.`);
    const blocked = await openai.chat.completions.create({ model: 'gpt-test', messages }, blockSecrets);
    t.equal((blocked as any).service.blocked, true, 'a secret in a refusal blocks the answer');
    t.equal((blocked as any).service.stage, 'output');
    t.notMatch(JSON.stringify(blocked), new RegExp(KEY));
    const blockedMsg = await anthropic.messages.create(
      { model: 'gpt-test', max_tokens: 50, messages },
      blockSecrets,
    );
    t.equal((blockedMsg as any).service.blocked, true);
    t.notMatch(JSON.stringify(blockedMsg), new RegExp(KEY));

    // A refusal that is not text cannot be scanned: the answer is refused as malformed.
    upstream.behaviour = refusal({ text: said });
    const bad = await fetch(`${svc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${svc.agentKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-test', messages }),
    });
    t.equal(bad.status, 502);
    t.notMatch(await bad.text(), /bob@/);
  });

  t.test('streams', async (t) => {
    // Long enough that part of it is released before the finish, part at it.
    const long = `${'I am sorry, but no. '.repeat(8)}${said}`;
    const longRedacted = `${'I am sorry, but no. '.repeat(8)}${redacted}`;
    upstream.behaviour = refusalStream(long);
    let text = '';
    let sse = '';
    const res = await openai.chat.completions
      .create({ model: 'gpt-test', messages, stream: true })
      .asResponse();
    sse = await res.text();
    for (const line of sse.split('\n\n')) {
      if (!line.startsWith('data: {')) continue;
      for (const c of JSON.parse(line.slice(6)).choices) text += c.delta.refusal ?? '';
    }
    t.equal(text, longRedacted, 'OpenAI client: the refusal is relayed, redacted');
    t.notMatch(sse, /bob@/);

    upstream.behaviour = refusalStream(long);
    let answer = '';
    for await (const e of await anthropic.messages.create({
      model: 'gpt-test',
      max_tokens: 50,
      messages,
      stream: true,
    }))
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') answer += e.delta.text;
    t.equal(answer, longRedacted, 'Anthropic client: its text is relayed, redacted');

    upstream.behaviour = refusalStream(`Not sharing ${KEY}, sorry.`);
    const blocked = await openai.chat.completions
      .create({ model: 'gpt-test', messages, stream: true }, blockSecrets)
      .asResponse();
    const blockedSse = await blocked.text();
    t.notMatch(blockedSse, new RegExp(KEY), 'the secret is not streamed');
    t.match(blockedSse, /"blocked":true/, 'a secret in a streamed refusal blocks the answer');
    const envelope = JSON.parse(
      blockedSse
        .split('\n\n')
        .filter((l) => l.startsWith('data: {'))
        .at(-1)
        ?.slice(6) ?? '{}',
    );
    const event = await callEvent(svc, envelope.service.audit_url);
    t.equal(event.outcome, 'block');
    t.equal(event.details.blocked_stage, 'output_refusal', 'audited as blocked in the refusal');
  });
});
