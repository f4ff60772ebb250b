import OpenAI from 'openai';
import t from 'tap';
import { serviceOnMockUpstream } from '../helpers/service.js';

// An upstream's reads end anywhere, also inside a character: each read is decoded keeping the
// split character for the next one, and a leading BOM is skipped.
t.test('a stream read a few bytes at a time, characters split across reads, arrives intact', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  // 2-, 3- and 4-byte UTF-8 characters (the emoji stays whole in the mock's 5-unit chunks).
  const reply = 'Grüße 😀 aus Köln — naïve café, 東京 ✓ ende';
  upstream.reply = reply;
  for (const bytes of [64, 7]) {
    upstream.behaviour = { kind: 'byte-stream', bytes };
    const stream = await client.chat.completions.create({
      model: 'gpt-test',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'say it' }],
    });
    let text = '';
    let usage: unknown;
    let service: { blocked?: boolean } | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
      const s = (chunk as unknown as { service?: { blocked?: boolean } }).service;
      if (s) service = s;
    }
    t.equal(text, reply, `reads of at most ${bytes} bytes, every multi-byte character split`);
    t.same(usage, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
    t.equal(service?.blocked, false);
  }
  upstream.behaviour = { kind: 'normal' };
  upstream.reply = undefined;
});
