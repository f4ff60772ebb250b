import { createHash } from 'node:crypto';
import t from 'tap';
import { bigStreamText } from '../helpers/mock-upstream.js';
import {
  callEvent,
  ENGINES,
  publishOrgPolicy,
  serviceOnMockUpstream,
  type TestService,
} from '../helpers/service.js';

// A streamed answer follows its client: while the client does not read, govgate stops reading
// the provider (whose connection is then paused) instead of buffering the answer; a client that
// takes nothing for SERVICE_CLIENT_STALL_MS is let go, and its call audited as not complete.

// 48 MB of output, far more than the sockets between the mock and the client hold (each kernel
// buffer is at most a few MB): a gateway that buffers without limit reads all of it at once. (A
// stream over 64 MiB is cut: test/gateway/stream-bounds.test.ts.)
const CHUNKS = 3072;
const CHARS = 16 * 1024;
const TOTAL_CHARS = CHUNKS * CHARS;

/** Waits (bounded) until the mock's written byte count stops moving or its stream is done. */
async function settled(progress: { bytes: number; done: boolean }): Promise<void> {
  let last = -1;
  let still = 0;
  for (let i = 0; i < 600 && still < 10 && !progress.done; i++) {
    await new Promise((r) => setTimeout(r, 50));
    still = progress.bytes === last ? still + 1 : 0;
    last = progress.bytes;
  }
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The content deltas of an OpenAI event stream, joined. */
function content(sse: string): { text: string; done: boolean } {
  let text = '';
  let done = false;
  for (const line of sse.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    if (line === 'data: [DONE]') {
      done = true;
      continue;
    }
    const chunk = JSON.parse(line.slice(6));
    text += chunk.choices?.[0]?.delta?.content ?? '';
  }
  return { text, done };
}

let expected = '';
for (let i = 0; i < CHUNKS; i++) expected += bigStreamText(i, CHARS);
const EXPECTED_HASH = sha256(expected);
expected = '';

async function open(svc: TestService, session: string): Promise<Response> {
  const res = await fetch(`${svc.url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${svc.agentKey}`,
      'content-type': 'application/json',
      'x-session-id': session,
    },
    body: JSON.stringify({
      model: 'gpt-4o-mini',
      stream: true,
      messages: [{ role: 'user', content: 'a lot' }],
    }),
  });
  return res;
}

for (const engine of ENGINES) {
  t.test(
    `a client that stops reading pauses the provider, and gets all of it when it reads (${engine})`,
    async (t) => {
      const { svc, upstream } = await serviceOnMockUpstream(t, { engine });
      // Observe only: nothing is held for scanning, the answer goes out as it comes.
      await publishOrgPolicy(svc, 'observe', { mode: 'observe', rules: [] });
      const progress = { bytes: 0, done: false };
      upstream.behaviour = { kind: 'big-stream', chunks: CHUNKS, chars: CHARS, progress };
      const res = await open(svc, `bp-resume-${engine}`);
      t.equal(res.status, 200);
      // The client reads nothing until the provider's writes stop moving.
      await settled(progress);
      t.notOk(progress.done, 'the provider could not write its whole answer');
      t.ok(
        progress.bytes < TOTAL_CHARS / 2,
        `the provider wrote ${progress.bytes} bytes of ${TOTAL_CHARS}: govgate did not read on for the client`,
      );

      const body = await res.text();
      const got = content(body);
      t.equal(got.text.length, TOTAL_CHARS, 'the client, reading again, gets every character');
      t.equal(sha256(got.text), EXPECTED_HASH, 'in order');
      t.ok(got.done, 'and the end');
      t.ok(progress.done);

      const event = await callEvent(svc, `bp-resume-${engine}`);
      t.equal(event?.outcome, 'allow');
      t.equal(event?.details.status, 200);
      t.strictSame(event?.details.delivered, { chars: TOTAL_CHARS, complete: true });
    },
  );

  t.test(`a client that never reads again is let go, its call not complete (${engine})`, async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t, {
      engine,
      env: { SERVICE_CLIENT_STALL_MS: '300' },
    });
    await publishOrgPolicy(svc, 'observe', { mode: 'observe', rules: [] });
    const progress = { bytes: 0, done: false };
    upstream.behaviour = { kind: 'big-stream', chunks: CHUNKS, chars: CHARS, progress };
    const res = await open(svc, `bp-stall-${engine}`);
    t.equal(res.status, 200);
    t.teardown(() => res.body?.cancel().catch(() => {}));

    const event = await callEvent(svc, `bp-stall-${engine}`);
    t.equal(event?.outcome, 'error');
    t.equal(event?.reason, 'client stopped reading the answer');
    t.equal(event?.details.status, 408);
    t.equal(event?.details.client_stalled, true);
    t.equal(event?.details.client_disconnected, false);
    t.equal(event?.details.delivered.complete, false, 'not complete');
    t.ok(event?.details.delivered.chars < TOTAL_CHARS, 'and not all of it');
    t.equal(event?.details.usage_estimated, true, 'the provider never sent its usage');
    t.notOk(progress.done, 'the provider was stopped before the end');
    for (let i = 0; i < 200 && !upstream.aborted.includes('/v1/chat/completions'); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    t.ok(upstream.aborted.includes('/v1/chat/completions'), 'the provider call was cut off');
    // The connection was closed: reading it now ends in an error, never in a whole answer.
    const read = await res.text().then(
      (text) => content(text).done,
      () => false,
    );
    t.notOk(read, 'the client never gets the end');
  });
}
