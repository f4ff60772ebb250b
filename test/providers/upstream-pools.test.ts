import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { openaiProvider } from '../../src/providers/openai.js';
import { UpstreamPools } from '../../src/providers/upstream.js';

// Every origin an org admin ever pointed a provider at used to keep its undici Pool (~21 KB) for
// the life of the process, and an origin is a host and a port: an org admin could grow the heap
// without bound. Idle pools are now closed; a provider takes its pool at each call, so one built
// before a sweep keeps working after it.

const COMPLETION = JSON.stringify({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1,
  model: 'gpt-4o-mini',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});

/** An upstream on 127.0.0.1 that closes each connection after its answer (`hold`: answers later). */
async function upstream(
  t: Test,
  opts: { keepAlive?: boolean } = {},
): Promise<{ origin: string; release: () => void }> {
  let waiting: Array<() => void> = [];
  let holding = false;
  const server: Server = createServer((req, res) => {
    req.resume();
    const answer = (): void => {
      res.writeHead(200, {
        'content-type': 'application/json',
        ...(opts.keepAlive ? {} : { connection: 'close' }),
      });
      res.end(COMPLETION);
    };
    if (holding) waiting.push(answer);
    else req.on('end', answer);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    release: () => {
      holding = !holding;
      const w = waiting;
      waiting = [];
      for (const f of w) f();
    },
  };
}

async function callOnce(pools: UpstreamPools, origin: string): Promise<void> {
  const res = await pools.get(origin).request({ path: '/v1/chat/completions', method: 'POST', body: '{}' });
  await res.body.text();
}

/** Waits (bounded) until the origin's pool holds no connection: the upstream closed it. */
async function disconnected(pools: UpstreamPools, origin: string): Promise<void> {
  for (let i = 0; i < 200 && pools.get(origin).stats.connected > 0; i++)
    await new Promise((r) => setTimeout(r, 10));
}

t.test('an idle pool is closed after two sweeps unused, and opened again on its next call', async (t) => {
  const pools = new UpstreamPools({ timeoutMs: 5_000, connections: 4, sweepMs: 0 });
  t.teardown(() => pools.close());
  const a = await upstream(t);
  await callOnce(pools, a.origin);
  await disconnected(pools, a.origin);
  const first = pools.get(a.origin);
  t.equal(pools.sweep(), 0, 'used since the last sweep: kept');
  t.equal(pools.size, 1);
  t.equal(pools.sweep(), 1, 'unused for two sweeps and idle: closed');
  t.equal(pools.size, 0);
  t.ok(first.closed, 'the pool itself is closed');
  await callOnce(pools, a.origin);
  t.not(pools.get(a.origin), first, 'a new pool serves the origin');
  t.equal(pools.size, 1);
});

t.test('a pool with a request in it, or a connection open, is never closed', async (t) => {
  const pools = new UpstreamPools({ timeoutMs: 5_000, connections: 4, sweepMs: 0 });
  t.teardown(() => pools.close());
  const busy = await upstream(t);
  busy.release(); // hold answers from now on
  const inFlight = callOnce(pools, busy.origin);
  for (let i = 0; i < 200 && pools.get(busy.origin).stats.running === 0; i++)
    await new Promise((r) => setTimeout(r, 5));
  const kept = await upstream(t, { keepAlive: true });
  await callOnce(pools, kept.origin);
  t.equal(pools.get(kept.origin).stats.connected, 1, 'a keep-alive connection is open');
  for (let i = 0; i < 5; i++) t.equal(pools.sweep(), 0, `sweep ${i + 1}: both kept`);
  t.equal(pools.size, 2);
  busy.release();
  await inFlight;
  await disconnected(pools, busy.origin);
  pools.sweep();
  t.equal(pools.sweep(), 1, 'once answered and disconnected, the busy one goes');
  t.equal(pools.size, 1, 'the kept-alive one stays');
});

t.test('past maxPools, idle pools are closed when a new one opens', async (t) => {
  const pools = new UpstreamPools({ timeoutMs: 5_000, connections: 1, sweepMs: 0, maxPools: 3 });
  t.teardown(() => pools.close());
  // Nothing listens on these ports: a pool that never connected is idle.
  for (const port of [1, 2, 3]) pools.get(`http://127.0.0.1:${port}`);
  t.equal(pools.size, 3);
  const a = await upstream(t);
  await callOnce(pools, a.origin);
  t.equal(pools.size, 1, 'the three idle pools were closed to open the fourth');
});

t.test('a provider built before a sweep still calls its upstream after it', async (t) => {
  const pools = new UpstreamPools({ timeoutMs: 5_000, connections: 4, sweepMs: 0 });
  t.teardown(() => pools.close());
  const a = await upstream(t);
  const provider = openaiProvider(pools, `${a.origin}/v1`, 'sk-test');
  const chat = () =>
    provider.chat({
      request: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
      cancel: { aborted: false, onAbort: () => {} },
    });
  t.equal((await chat()).choices[0]?.message.content, 'hi');
  await disconnected(pools, a.origin);
  pools.sweep();
  t.equal(pools.sweep(), 1, 'its pool was closed');
  t.equal((await chat()).choices[0]?.message.content, 'hi', 'the provider opened a new one');
  t.equal(pools.size, 1);
});

t.test('the sweep runs by itself, and close stops it', async (t) => {
  const pools = new UpstreamPools({ timeoutMs: 5_000, connections: 1, sweepMs: 20 });
  pools.get('http://127.0.0.1:1');
  for (let i = 0; i < 100 && pools.size > 0; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(pools.size, 0, 'closed by the timer');
  await pools.close();
});
