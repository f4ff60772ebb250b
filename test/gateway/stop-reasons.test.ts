import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { publishOrgPolicy, serviceOnMockUpstream, type TestService } from '../helpers/service.js';
import { STOP_REASONS } from '../helpers/stop-reasons.js';

// An Anthropic answer goes Anthropic → OpenAI shape → Anthropic on /v1/messages: a stop reason
// that OpenAI's finish_reason cannot say (stop_sequence and the sequence matched, pause_turn, a
// context window exceeded) reaches an Anthropic client as the upstream sent it, whole or
// streamed, guarded or not, while an OpenAI client gets only the standard finish_reason.

const CASES = STOP_REASONS;

function message(reason: string, sequence: string | null): string {
  return JSON.stringify({
    id: 'msg_stop',
    type: 'message',
    role: 'assistant',
    model: 'claude-test',
    content: [{ type: 'text', text: 'The answer is 42.' }],
    stop_reason: reason,
    stop_sequence: sequence,
    usage: { input_tokens: 5, output_tokens: 6 },
  });
}

function stream(reason: string, sequence: string | null): string {
  const ev = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  return (
    ev('message_start', {
      message: {
        id: 'msg_stop',
        type: 'message',
        role: 'assistant',
        model: 'claude-test',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 5, output_tokens: 1 },
      },
    }) +
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
    ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'The answer ' } }) +
    ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'is 42.' } }) +
    ev('content_block_stop', { index: 0 }) +
    ev('message_delta', {
      delta: { stop_reason: reason, stop_sequence: sequence },
      usage: { output_tokens: 6 },
    }) +
    ev('message_stop', {})
  );
}

/** Makes the org's policy observe-only: the output is no longer guarded. */
async function observeOnly(svc: TestService): Promise<void> {
  await publishOrgPolicy(svc, 'observe', { mode: 'observe', rules: [] });
}

t.test('stop reasons from an Anthropic upstream', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'q' }];
  // The default policy guards the output (streams go through the output governor); an
  // observe-only policy does not.
  for (const guard of ['guarded', 'unguarded']) {
    if (guard === 'unguarded') await observeOnly(svc);
    upstream.behaviour = { kind: 'normal' };
    upstream.reply = 'mail bob@example.com';
    const probe = await anthropic.messages.create({ model: 'claude-test', max_tokens: 50, messages });
    t.equal(
      (probe.content[0] as { text?: string }).text,
      guard === 'guarded' ? 'mail [EMAIL]' : 'mail bob@example.com',
      `the output is ${guard}`,
    );
    upstream.reply = undefined;
    for (const [reason, sequence, finish] of CASES) {
      const what = `${reason} (${guard})`;

      upstream.behaviour = { kind: 'raw', contentType: 'application/json', body: message(reason, sequence) };
      const whole = await anthropic.messages.create({
        model: 'claude-test',
        max_tokens: 50,
        stop_sequences: ['END'],
        messages,
      });
      t.equal(whole.stop_reason, reason, `${what}: whole answer, stop_reason`);
      t.equal(whole.stop_sequence, sequence, `${what}: whole answer, stop_sequence`);
      t.equal((whole.content[0] as { text?: string }).text, 'The answer is 42.');

      upstream.behaviour = { kind: 'raw', contentType: 'text/event-stream', body: stream(reason, sequence) };
      const events = await anthropic.messages.create({
        model: 'claude-test',
        max_tokens: 50,
        stop_sequences: ['END'],
        messages,
        stream: true,
      });
      let text = '';
      let delta: { stop_reason: string | null; stop_sequence: string | null } | undefined;
      for await (const e of events) {
        if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
        if (e.type === 'message_delta') delta = e.delta;
      }
      t.equal(text, 'The answer is 42.');
      t.equal(delta?.stop_reason, reason, `${what}: stream, stop_reason`);
      t.equal(delta?.stop_sequence, sequence, `${what}: stream, stop_sequence`);

      // An OpenAI client of the same model sees the standard finish_reason and nothing else.
      upstream.behaviour = { kind: 'raw', contentType: 'application/json', body: message(reason, sequence) };
      const raw = await openai.chat.completions
        .create({ model: 'claude-test', stop: ['END'], messages })
        .asResponse();
      const body = await raw.text();
      const completion = JSON.parse(body);
      t.equal(completion.choices[0].finish_reason, finish, `${what}: OpenAI client, finish_reason`);
      t.strictSame(Object.keys(completion.choices[0]), ['index', 'message', 'finish_reason', 'logprobs']);
      t.notMatch(body, /stop_sequence|pause_turn|context_window|"END"/, `${what}: no Anthropic field`);

      upstream.behaviour = { kind: 'raw', contentType: 'text/event-stream', body: stream(reason, sequence) };
      const sse = await openai.chat.completions
        .create({ model: 'claude-test', stop: ['END'], messages, stream: true })
        .asResponse();
      const sseText = await sse.text();
      t.match(sseText, `"finish_reason":"${finish}"`, `${what}: OpenAI stream, finish_reason`);
      t.notMatch(sseText, /stop_sequence|pause_turn|context_window|"END"/, `${what}: no Anthropic field`);
    }
  }
});
