import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

// Spec 2.2: a chat completion answers with usage {prompt_tokens, completion_tokens, total_tokens}.
// An OpenAI-compatible upstream (a local model server) may send none: the answer then carries an
// estimate at four characters a token, as a stream's audit event already does, and the event says
// the usage is estimated, so cost roll-ups do not silently count the call as free.
t.test('an answer without usage from the upstream gets an estimated one, marked as such', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const answer = 'x'.repeat(40);
  upstream.behaviour = {
    kind: 'raw',
    contentType: 'application/json',
    body: JSON.stringify({
      id: 'chatcmpl-nousage',
      object: 'chat.completion',
      created: 1,
      model: 'gpt-nousage',
      choices: [{ index: 0, message: { role: 'assistant', content: answer }, finish_reason: 'stop' }],
    }),
  };
  const prompt = 'y'.repeat(80);
  const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const res = await openai.chat.completions.create({
    model: 'gpt-nousage',
    messages: [{ role: 'user', content: prompt }],
  });
  t.equal(res.choices[0]?.message.content, answer);
  t.same(
    res.usage,
    { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30 },
    'four characters a token',
  );

  const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: svc.url, maxRetries: 0 });
  const msg = await anthropic.messages.create({
    model: 'gpt-nousage',
    max_tokens: 16,
    messages: [{ role: 'user', content: prompt }],
  });
  t.match(msg.usage, { input_tokens: 20, output_tokens: 10 }, 'in the Anthropic format too');
  upstream.behaviour = { kind: 'normal' };

  const events = await svc.call('/api/audit?event_type=llm_call', { token: svc.pat });
  t.equal(events.status, 200);
  t.equal(events.body.data.length, 2);
  for (const e of events.body.data) {
    t.match(e.usage, { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30 });
    t.equal(e.details.usage_estimated, true, 'the event says the usage is estimated');
  }
  // An answer with the provider's usage is not marked.
  await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
  const stated = await svc.call('/api/audit?event_type=llm_call&limit=1', { token: svc.pat });
  t.notOk('usage_estimated' in stated.body.data[0].details, "the provider's usage is not marked");
});
