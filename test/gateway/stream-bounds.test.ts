import t from 'tap';
import { callEvent, serviceOnMockUpstream } from '../helpers/service.js';

/**
 * An upstream stream is bounded whatever the provider sends: a line or event that never ends is
 * cut at 8 MiB, a stream at 64 MiB. Either way the client gets an error event instead of the
 * gateway's memory growing, the call is audited as the provider's failure, and other calls go on.
 */
for (const [what, behaviour, reason] of [
  ['a line that never ends', { kind: 'flood-stream', bytes: 9 * 1024 * 1024 }, /longer than 8 MiB/],
  ['a stream over 64 MiB', { kind: 'flood-stream', bytes: 65 * 1024 * 1024, comments: true }, /over 64 MiB/],
] as const) {
  t.test(`${what} is cut with an error, audited`, async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t);
    upstream.behaviour = behaviour;
    const res = await fetch(`${svc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${svc.agentKey}`,
        'content-type': 'application/json',
        'x-session-id': 'flood',
      },
      body: JSON.stringify({ model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'go' }] }),
    });
    t.equal(res.status, 200, 'the stream started');
    const text = await res.text();
    t.match(text, /^data: \{/, 'the stream is answered as SSE');
    t.match(text, /"upstream_error"/, 'the client is told the provider failed');
    t.notMatch(text, /a{1000}/, 'none of the flood reached the client');
    upstream.behaviour = { kind: 'normal' };
    const call = await callEvent(svc, 'flood');
    t.equal(call?.outcome, 'error');
    t.match(call?.reason, reason);
    const after = await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'gpt-test', messages: [{ role: 'user', content: 'still serving' }] },
    });
    t.equal(after.status, 200, 'the gateway keeps serving');
  });
}

t.test('a stream cut at its bound after its terminal event is a whole answer', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  // The answer and [DONE], then more than the bound of comment lines (read to the end, not parsed).
  upstream.behaviour = { kind: 'flood-stream', bytes: 65 * 1024 * 1024, comments: true, afterDone: true };
  const res = await fetch(`${svc.url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${svc.agentKey}`,
      'content-type': 'application/json',
      'x-session-id': 'after-done',
    },
    body: JSON.stringify({ model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'go' }] }),
  });
  const text = await res.text();
  t.match(text, /"service":\{/, 'the envelope came');
  t.match(text, /data: \[DONE\]\n\n$/, 'and [DONE]');
  t.notMatch(text, /upstream_error/);
  upstream.behaviour = { kind: 'normal' };
  const call = await callEvent(svc, 'after-done');
  t.equal(call?.outcome, 'allow', 'audited as the whole answer it was');
});
