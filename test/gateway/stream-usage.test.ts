import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { publishOrgPolicy, serviceOnMockUpstream, type TestService } from '../helpers/service.js';

// An OpenAI-format stream carries usage as OpenAI's does: only when the client asked for it
// (`stream_options.include_usage`), and then in one last chunk with `choices: []` (govgate's
// envelope chunk) before [DONE], whichever provider answered and however it reported usage. The
// audit event records the usage either way.

/** An OpenAI-compatible upstream that reports usage on its finish chunk, not in a chunk of its own. */
function usageOnFinishChunk(): string {
  const base = { id: 'chatcmpl-u', object: 'chat.completion.chunk', created: 1, model: 'gpt-test' };
  const chunk = (choices: unknown[], usage?: unknown) =>
    `data: ${JSON.stringify(usage ? { ...base, choices, usage } : { ...base, choices })}\n\n`;
  return (
    chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]) +
    chunk([{ index: 0, delta: { content: 'Hello there' }, finish_reason: null }]) +
    chunk([{ index: 0, delta: {}, finish_reason: 'stop' }], {
      prompt_tokens: 4,
      completion_tokens: 2,
      total_tokens: 6,
    }) +
    'data: [DONE]\n\n'
  );
}

/** Makes the org's policy observe-only: the output is no longer guarded. */
async function observeOnly(svc: TestService): Promise<void> {
  await publishOrgPolicy(svc, 'observe', { mode: 'observe', rules: [] });
}

t.test('usage in OpenAI-format streams', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'q' }];
  const upstreams: [name: string, model: string, raw: string | undefined, usage: Record<string, number>][] = [
    ['anthropic', 'claude-test', undefined, { prompt_tokens: 13, completion_tokens: 9, total_tokens: 22 }],
    ['openai', 'gpt-test', undefined, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 }],
    [
      'openai, usage on the finish chunk',
      'gpt-test',
      usageOnFinishChunk(),
      {
        prompt_tokens: 4,
        completion_tokens: 2,
        total_tokens: 6,
      },
    ],
  ];
  const asks: [string, { include_usage?: boolean } | undefined][] = [
    ['not asked', undefined],
    ['include_usage false', { include_usage: false }],
    ['include_usage true', { include_usage: true }],
  ];
  let n = 0;
  for (const guard of ['guarded', 'unguarded']) {
    if (guard === 'unguarded') await observeOnly(svc);
    for (const [name, model, raw, usage] of upstreams) {
      for (const [ask, streamOptions] of asks) {
        const what = `${name}, ${ask} (${guard})`;
        upstream.behaviour = raw
          ? { kind: 'raw', contentType: 'text/event-stream', body: raw }
          : { kind: 'normal' };
        const session = `usage-${n++}`;
        const res = await openai.chat.completions
          .create(
            {
              model,
              messages,
              stream: true,
              ...(streamOptions ? { stream_options: streamOptions } : {}),
            },
            { headers: { 'x-session-id': session } },
          )
          .asResponse();
        const text = await res.text();
        const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
        t.equal(events.at(-1), 'data: [DONE]', `${what}: ends with [DONE]`);
        const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
        const withUsage = chunks.filter((c) => c.usage);
        const last = chunks.at(-1);
        t.ok(last.service, `${what}: the envelope is on the last chunk`);
        t.strictSame(last.choices, [], `${what}: which has no choices`);
        if (streamOptions?.include_usage) {
          t.equal(withUsage.length, 1, `${what}: one chunk has usage`);
          t.equal(withUsage[0], last, `${what}: the last one`);
          t.strictSame(last.usage, usage, `${what}: the totals`);
        } else {
          t.equal(withUsage.length, 0, `${what}: no chunk has usage`);
        }
        const audit = await svc.call(`/api/audit/session/${session}`, { token: svc.pat });
        const call = (audit.body.data as any[]).find((e) => e.event_type === 'llm_call');
        t.strictSame(call?.usage, usage, `${what}: the audit event has the usage`);
      }
    }

    // An Anthropic client still gets the usage on message_delta.
    upstream.behaviour = { kind: 'normal' };
    for (const model of ['claude-test', 'gpt-test']) {
      let output: number | undefined;
      for await (const e of await anthropic.messages.create({
        model,
        max_tokens: 50,
        messages,
        stream: true,
      }))
        if (e.type === 'message_delta') output = e.usage.output_tokens;
      t.equal(output, model === 'claude-test' ? 9 : 7, `${model} (${guard}): /v1/messages stream usage`);
    }
  }
});
