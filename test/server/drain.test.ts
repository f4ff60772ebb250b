import { rmSync } from 'node:fs';
import t, { type Test } from 'tap';
import { createLogger } from '../../src/util/log.js';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { RawConnection, type RawRequest, type RawResponse } from '../helpers/raw-http.js';
import { ENGINES, startService, type TestService, useMockUpstream } from '../helpers/service.js';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves once `done()` is true (polled every 10 ms); rejects after 5 s. */
async function until(done: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (done()) return;
    await sleep(10);
  }
  throw new Error(`still waiting after 5 s: ${what}`);
}

/** True when the server closes `conn` within `ms`. */
function closedWithin(conn: RawConnection, ms: number): Promise<boolean> {
  return Promise.race([conn.closed.then(() => true), sleep(ms).then(() => false)]);
}

function parse(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return body;
  }
}

function errorCode(res: RawResponse): string | undefined {
  return (parse(res.body) as { error?: { code?: string } } | undefined)?.error?.code;
}

/** A request that failed at the socket (closed, no answer) as an answer with status 0, so the test goes on. */
function settle(pending: Promise<RawResponse>): Promise<RawResponse> {
  return pending.catch((err: Error) => ({ status: 0, headers: {}, headerCounts: {}, body: err.message }));
}

const chat = (stream: boolean): string =>
  JSON.stringify({ model: 'gpt-test', stream, messages: [{ role: 'user', content: 'finish me' }] });

/** A service on a mock upstream, the agent's headers, and how many chat calls reached the upstream. */
async function drainable(t: Test, engine: (typeof ENGINES)[number]) {
  const upstream = await startMockUpstream();
  t.teardown(() => upstream.close());
  const svc = await startService({ engine, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
  t.teardown(() => rmSync(svc.dataDir, { recursive: true, force: true }));
  await useMockUpstream(svc, svc.pat, upstream.url);
  const auth = { authorization: `Bearer ${svc.agentKey}`, 'content-type': 'application/json' };
  const chatsUpstream = (): number =>
    upstream.requests.filter((r) => r.path === '/v1/chat/completions').length;
  return { upstream, svc, auth, chatsUpstream };
}

for (const engine of ENGINES) {
  t.test(`during the drain (${engine})`, async (t) => {
    const { upstream, svc, auth, chatsUpstream } = await drainable(t, engine);

    // Connections that served a request before the drain and stay open (keep-alive).
    const keptOpen = async (): Promise<RawConnection> => {
      const conn = await RawConnection.open(svc.url);
      t.teardown(() => conn.destroy());
      const res = await conn.request('GET', '/api/health/live');
      t.equal(res.status, 200);
      t.not(res.headers.connection, 'close', 'kept alive before the drain');
      return conn;
    };
    const forReady = await keptOpen();
    const forLive = await keptOpen();
    const forHead = await keptOpen();
    const forHealth = await keptOpen();
    const forChat = await keptOpen();

    // Two calls in flight, held at the provider until the test opens the gate. The stream then
    // pauses halfway, so its head goes out (chunked) during the drain, before its end.
    let openGate = (): void => {};
    let resume = (): void => {};
    const gate = new Promise<void>((r) => (openGate = r));
    t.teardown(() => openGate());
    t.teardown(() => resume());
    // Long enough that the gateway releases text (it holds the last 96 characters) before the pause.
    upstream.reply = 'a sentence of ordinary words, '.repeat(20);
    const wholeConn = await keptOpen();
    const shortConn = await keptOpen();
    const streamConn = await keptOpen();
    upstream.behaviour = { kind: 'gate', open: gate };
    const whole = settle(
      wholeConn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(false), ms: 30_000 }),
    );
    // A stream sent at once when the gate opens: its answer may go out whole (uWS then sends a
    // Content-Length and closes the connection itself).
    const short = settle(
      shortConn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(true), ms: 30_000 }),
    );
    for (let i = 0; i < 500 && chatsUpstream() < 2; i++) await sleep(10);
    upstream.behaviour = {
      kind: 'paused-stream',
      start: gate,
      resume: new Promise<void>((r) => (resume = r)),
    };
    const streamed = settle(
      streamConn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(true), ms: 30_000 }),
    );
    for (let i = 0; i < 500 && chatsUpstream() < 3; i++) await sleep(10);
    t.equal(chatsUpstream(), 3, 'the three calls reached the provider');

    // The drain starts synchronously: the listener is closed and new requests are refused from here.
    const drained = svc.service.close(10_000);

    const fresh = await RawConnection.open(svc.url).then(
      (c) => {
        c.destroy();
        return 'connected';
      },
      () => 'refused',
    );
    t.equal(fresh, 'refused', 'a new connection is refused');

    const ready = await settle(forReady.request('GET', '/api/health/ready'));
    t.equal(ready.status, 503, 'readiness says not ready');
    t.same(
      parse(ready.body),
      { status: 'unavailable', checks: { store: true, store_writable: true, accepting: false } },
      'the store is still open and takes writes, and says so; only accepting is false',
    );
    t.equal(ready.headers.connection, 'close');
    t.ok(await closedWithin(forReady, 2000), 'the connection is closed after the answer');

    const live = await settle(forLive.request('GET', '/api/health/live'));
    t.equal(live.status, 200, 'the process is alive while it drains');
    t.equal(live.headers.connection, 'close');
    t.ok(await closedWithin(forLive, 2000), 'the connection is closed after the answer');

    const head = await settle(forHead.request('HEAD', '/api/health/live'));
    t.equal(head.status, 200);
    t.equal(head.headers.connection, 'close', 'HEAD answers say close too');

    const health = await settle(forHealth.request('GET', '/health'));
    t.equal(health.status, 503);
    t.equal(errorCode(health), 'unavailable');

    const refused = await settle(
      forChat.request('POST', '/v1/chat/completions', {
        headers: auth,
        body: chat(false),
      }),
    );
    t.equal(refused.status, 503, 'a new call on a kept-alive connection is refused');
    t.equal(errorCode(refused), 'unavailable');
    t.match(parse(refused.body), {
      type: 'error',
      error: { type: 'api_error', code: 'unavailable', request_id: refused.headers['x-request-id'] },
    });
    t.ok(refused.headers['x-request-id'], 'X-Request-Id');
    t.equal(refused.headers['retry-after'], '1');
    t.equal(refused.headers.connection, 'close');
    t.equal(refused.headerCounts.connection, 1, 'one Connection header');
    t.ok(await closedWithin(forChat, 2000), 'the connection is closed after the refusal');
    t.equal(chatsUpstream(), 3, 'the refused call never reached the provider');

    openGate();
    const wholeRes = await whole;
    t.equal(wholeRes.status, 200, 'the call in flight finishes');
    t.equal(wholeRes.headers.connection, 'close', 'its answer tells the client not to reuse the connection');
    t.equal(wholeRes.headerCounts.connection, 1, 'one Connection header');
    t.ok(await closedWithin(wholeConn, 2000), 'and its connection is closed after it');
    const shortRes = await short;
    t.equal(shortRes.status, 200, 'a short stream in flight finishes');
    t.match(shortRes.body, /data: \[DONE\]/);
    t.equal(shortRes.headers.connection, 'close', 'it says close');
    t.equal(shortRes.headerCounts.connection, 1, 'one Connection header');
    for (let i = 0; i < 500 && !streamConn.received.includes('ordinary'); i++) await sleep(10);
    t.match(streamConn.received, /^HTTP\/1\.1 200 [\s\S]*ordinary/, 'the stream began during the drain');
    resume();
    const streamRes = await streamed;
    t.equal(streamRes.status, 200, 'the stream in flight finishes');
    t.match(streamRes.body, /data: \[DONE\]/);
    t.equal(streamRes.headers.connection, 'close', 'a stream answered during the drain says close');
    t.equal(streamRes.headerCounts.connection, 1, 'one Connection header');

    await drained;
    for (const conn of [forHead, forHealth, shortConn, streamConn])
      t.ok(await closedWithin(conn, 2000), 'every connection is closed once the drain ends');

    // The store closed cleanly and holds the two calls, not the refused one.
    const again = await startService({
      engine,
      dataDir: svc.dataDir,
      env: { SERVICE_BOOTSTRAP_TOKEN: svc.pat },
    });
    const audit = await again.call('/api/audit?event_type=llm_call&limit=1000', { token: svc.pat });
    await again.close();
    t.equal(audit.status, 200);
    t.equal(audit.body.data?.length, 3, 'only the calls that were in flight are audited');
  });
}

for (const engine of ENGINES) {
  t.test(`a stream whose head went out before the drain (${engine})`, async (t) => {
    const { upstream, svc, auth, chatsUpstream } = await drainable(t, engine);
    // Long enough that the gateway releases text (it holds the last 96 characters) before the pause.
    upstream.reply = 'a sentence of ordinary words, '.repeat(20);

    let resume = (): void => {};
    upstream.behaviour = { kind: 'paused-stream', resume: new Promise<void>((r) => (resume = r)) };
    t.teardown(() => resume());
    const streamConn = await RawConnection.open(svc.url);
    t.teardown(() => streamConn.destroy());
    const streamed = settle(
      streamConn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(true), ms: 30_000 }),
    );
    for (let i = 0; i < 500 && !streamConn.received.includes('ordinary'); i++) await sleep(10);
    t.match(streamConn.received, /^HTTP\/1\.1 200 [\s\S]*ordinary/, 'the head and some text are out');

    // A call held at the provider keeps the drain going after the stream ends.
    let openGate = (): void => {};
    upstream.behaviour = { kind: 'gate', open: new Promise<void>((r) => (openGate = r)) };
    t.teardown(() => openGate());
    const heldConn = await RawConnection.open(svc.url);
    t.teardown(() => heldConn.destroy());
    const held = settle(
      heldConn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(false), ms: 30_000 }),
    );
    for (let i = 0; i < 500 && chatsUpstream() < 2; i++) await sleep(10);
    t.equal(chatsUpstream(), 2, 'both calls reached the provider');

    const drained = svc.service.close(10_000);
    resume();
    const res = await streamed;
    t.equal(res.status, 200);
    t.match(res.body, /data: \[DONE\]/, 'the stream ends whole');
    t.not(res.headers.connection, 'close', 'its head had said keep-alive');
    if (engine === 'node') {
      t.ok(await closedWithin(streamConn, 2000), 'its connection is ended after the stream');
    } else {
      // uWS cannot close a connection after a chunked answer (its end() would write the
      // Connection header into the body: uws-adapter.ts); the next request on it is refused.
      const next = await settle(
        streamConn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(false) }),
      );
      t.equal(next.status, 503);
      t.equal(next.headers.connection, 'close');
      t.ok(await closedWithin(streamConn, 2000), 'and its connection is closed after the refusal');
    }
    t.equal(chatsUpstream(), 2);

    openGate();
    t.equal((await held).status, 200);
    await drained;
  });
}

/**
 * Two requests pipelined on one kept-alive connection before the drain (node:http: uWS closes
 * such a connection without an answer, test/server/pipelining.test.ts). node runs both at once and
 * writes their answers in order, the second queued behind the first: every answer must reach
 * the client, and only the last one on the connection may close it (an earlier one that said
 * close would cut off the answers queued behind it, calls already made and audited).
 */
t.test('requests pipelined before the drain are all answered (node)', async (t) => {
  /** A service whose provider holds each call until the test opens its gate. */
  const start = async (t: Test) => {
    const upstream = await startMockUpstream();
    t.teardown(() => upstream.close());
    const lines: { msg?: string; request_id?: string }[] = [];
    const logger = createLogger('debug', (line) => lines.push(JSON.parse(line)));
    const svc = await startService({
      engine: 'node',
      env: { SERVICE_EGRESS_ALLOW: upstream.hostPort },
      logger,
    });
    t.teardown(() => rmSync(svc.dataDir, { recursive: true, force: true }));
    await useMockUpstream(svc, svc.pat, upstream.url);
    const conn = await RawConnection.open(svc.url);
    t.teardown(() => conn.destroy());
    const gates: (() => void)[] = [];
    t.teardown(() => {
      for (const open of gates) open();
    });
    return {
      svc,
      conn,
      /** The next provider calls wait for the returned function. */
      gate(): () => void {
        let open = (): void => {};
        upstream.behaviour = { kind: 'gate', open: new Promise<void>((r) => (open = r)) };
        gates.push(open);
        return open;
      },
      /** Resolves once `n` chat calls have reached the provider. */
      atProvider: (n: number) =>
        until(
          () => upstream.requests.filter((r) => r.path === '/v1/chat/completions').length >= n,
          `${n} calls at the provider`,
        ),
      /** Resolves once the gateway has handed the answer to request `id` to the adapter. */
      answered: (id: string) =>
        until(() => lines.some((l) => l.msg === 'request' && l.request_id === id), `the answer to ${id}`),
    };
  };
  const post = (svc: TestService, id: string, content: string, stream = false): RawRequest => ({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: {
      authorization: `Bearer ${svc.agentKey}`,
      'content-type': 'application/json',
      'x-request-id': id,
    },
    body: JSON.stringify({ model: 'gpt-test', stream, messages: [{ role: 'user', content }] }),
  });

  for (const stream of [false, true]) {
    t.test(`two calls in one write, the first ${stream ? 'streamed' : 'whole'}`, async (t) => {
      const { svc, conn, gate, atProvider } = await start(t);
      const open = gate();
      conn.send(post(svc, 'req-first', 'FIRST', stream), post(svc, 'req-second', 'SECOND'));
      await atProvider(2);

      const drained = svc.service.close(10_000);
      open();
      const a = await settle(conn.answer({ ms: 10_000, what: 'FIRST' }));
      const b = await settle(conn.answer({ ms: 10_000, what: 'SECOND' }));
      t.equal(a.status, 200, 'the first call is answered');
      t.equal(a.headers['x-request-id'], 'req-first');
      t.match(a.body, stream ? /upstream-openai: FIRST[\s\S]*data: \[DONE\]/ : /upstream-openai: FIRST/);
      t.not(a.headers.connection, 'close', 'the first answer leaves the connection open for the second');
      t.equal(b.status, 200, 'the second call, made and audited, is answered too');
      t.equal(b.headers['x-request-id'], 'req-second');
      t.match(b.body, /upstream-openai: SECOND/);
      t.equal(b.headers.connection, 'close', 'the last answer on the connection closes it');
      t.equal(b.headerCounts.connection, 1, 'one Connection header');
      t.ok(await closedWithin(conn, 2000), 'the connection is closed after the last answer');
      await drained;
    });
  }

  t.test('the second answered first, during the drain', async (t) => {
    const { svc, conn, gate, atProvider, answered } = await start(t);
    const openFirst = gate();
    conn.send(post(svc, 'req-first', 'FIRST'));
    await atProvider(1);
    const openSecond = gate();
    conn.send(post(svc, 'req-second', 'SECOND')); // pipelined: the first is not answered yet
    await atProvider(2);

    const drained = svc.service.close(10_000);
    openSecond();
    await answered('req-second'); // queued behind the first, which is still at the provider
    openFirst();
    const a = await settle(conn.answer({ ms: 10_000, what: 'FIRST' }));
    const b = await settle(conn.answer({ ms: 10_000, what: 'SECOND' }));
    t.equal(a.status, 200);
    t.equal(a.headers['x-request-id'], 'req-first', 'the answers come in the order of the requests');
    t.not(a.headers.connection, 'close');
    t.equal(b.status, 200, 'the answer queued during the drain is written');
    t.equal(b.headers['x-request-id'], 'req-second');
    t.equal(b.headers.connection, 'close', 'and it closes the connection');
    t.ok(await closedWithin(conn, 2000));
    await drained;
  });

  t.test('the second answered before the drain', async (t) => {
    const { svc, conn, gate, atProvider, answered } = await start(t);
    const open = gate();
    conn.send(post(svc, 'req-first', 'FIRST'), {
      method: 'GET',
      path: '/api/health/live',
      headers: { 'x-request-id': 'req-live' },
    });
    await atProvider(1);
    await answered('req-live'); // queued behind the first, saying keep-alive

    const drained = svc.service.close(10_000);
    open();
    const a = await settle(conn.answer({ ms: 10_000, what: 'FIRST' }));
    const b = await settle(conn.answer({ ms: 10_000, what: 'the probe' }));
    t.equal(a.status, 200);
    t.equal(a.headers['x-request-id'], 'req-first');
    t.not(a.headers.connection, 'close', 'not the last answer on its connection');
    t.equal(b.status, 200, 'the end of the drain does not cut off an answer still queued');
    t.equal(b.headers['x-request-id'], 'req-live');
    await drained;
    t.ok(await closedWithin(conn, 2000), 'the end of the drain closes the connection');
  });

  t.test('a client that leaves with answers queued does not hold the drain up', async (t) => {
    const { svc, conn, gate, atProvider, answered } = await start(t);
    const warnings: string[] = [];
    const warned = (w: Error): void => void warnings.push(w.name);
    process.on('warning', warned);
    t.teardown(() => process.off('warning', warned));
    gate();
    const probes = Array.from({ length: 12 }, (_, i) => ({
      method: 'GET',
      path: '/api/health/live',
      headers: { 'x-request-id': `req-live-${i}` },
    }));
    conn.send(post(svc, 'req-first', 'FIRST'), ...probes); // more than ten: one listener per connection
    await atProvider(1);
    await answered('req-live-11');
    conn.destroy();

    // The call held at the provider is given up with its client; the probes' answers will never
    // be written. Nothing is left in flight, so the drain ends long before its 10 s.
    const began = Date.now();
    await svc.service.close(10_000);
    t.ok(Date.now() - began < 5000, `the drain ended after ${Date.now() - began} ms`);
    t.same(warnings, [], 'no MaxListenersExceededWarning for the queued answers');
  });
});

/**
 * A stream still running when the drain's time is up is cut by the service, not by its client:
 * its event says so (503, the service shut down), not `client disconnected` (499).
 */
for (const engine of ENGINES) {
  t.test(`a stream cut at the end of the drain is audited as the service's (${engine})`, async (t) => {
    const { upstream, svc, auth } = await drainable(t, engine);
    upstream.reply = 'a sentence of ordinary words, '.repeat(20);
    let resume = (): void => {};
    upstream.behaviour = { kind: 'paused-stream', resume: new Promise<void>((r) => (resume = r)) };
    t.teardown(() => resume());
    const conn = await RawConnection.open(svc.url);
    t.teardown(() => conn.destroy());
    const streamed = settle(
      conn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(true), ms: 30_000 }),
    );
    for (let i = 0; i < 500 && !conn.received.includes('ordinary'); i++) await sleep(10);
    await svc.service.close(300);
    await streamed;
    resume();
    const again = await startService({
      engine,
      dataDir: svc.dataDir,
      env: { SERVICE_BOOTSTRAP_TOKEN: svc.pat },
    });
    t.teardown(() => again.close(true));
    const events = (await again.call('/api/audit?event_type=llm_call', { token: svc.pat })).body.data;
    t.equal(events.length, 1);
    const [e] = events;
    t.equal(e.outcome, 'error');
    t.equal(e.details.status, 503, JSON.stringify(e.details));
    t.equal(e.details.client_disconnected, false);
    t.equal(e.details.error_code, 'unavailable');
    t.match(e.reason, /shut down/);
  });
}
