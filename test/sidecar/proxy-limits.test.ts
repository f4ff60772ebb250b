import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { ServiceError } from '../../src/core/errors.js';
import { MAX_PROXY_CONNECTIONS, PROXY_HEADERS_TIMEOUT_MS } from '../../src/sidecar/proxy.js';
import { createLogger } from '../../src/util/log.js';
import {
  bareProxy,
  basic,
  CONNECT,
  KEY,
  openTunnel,
  parsed,
  proxyHead,
  untilClosed,
} from '../helpers/proxy.js';
import { waitFor } from '../helpers/wait.js';

t.test('a tunnel whose TLS handshake never comes is closed', async (t) => {
  const { proxy, caPem } = await bareProxy(t, { limits: { handshakeTimeoutMs: 200 } });
  const { socket, head } = await proxyHead(proxy.port, CONNECT);
  t.match(head, /^HTTP\/1\.1 200 /, 'the tunnel is opened');
  // CONNECT, then silence: the agent never starts TLS.
  const closed = untilClosed(socket);
  socket.resume();
  t.equal(await closed, '', 'closed without a byte');
  // A tunnel whose handshake ended is not cut by that timer: it still serves a call after it.
  const tls = await openTunnel(proxy.port, caPem);
  await sleep(400);
  const answer = untilClosed(tls);
  tls.write('GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nConnection: close\r\n\r\n');
  t.match(await answer, /^HTTP\/1\.1 200 /, 'a call after the handshake timeout is answered');
});

t.test('inside a tunnel, a request that does not arrive in time is answered 408 and closed', async (t) => {
  const { proxy, caPem, handled } = await bareProxy(t, {
    limits: { headersTimeoutMs: 300, requestTimeoutMs: 600 },
  });
  const cases = [
    ['nothing after the handshake', ''],
    ['partial headers', 'POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\nX-Slow: '],
    [
      'a partial body',
      'POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":',
    ],
  ] as const;
  for (const [what, sent] of cases) {
    const tls = await openTunnel(proxy.port, caPem);
    const closed = untilClosed(tls);
    if (sent !== '') tls.write(sent);
    const answer = parsed(await closed);
    t.equal(answer.status, 408, `${what}: 408, and the tunnel closed`);
    t.match(answer.body, { type: 'error', error: { code: 'request_timeout', request_id: String } }, what);
    t.match(answer.head, new RegExp(`\r\nx-request-id: ${answer.body?.error?.request_id}`, 'i'), what);
  }
  t.equal(handled(), 0, 'none reached the handler');
});

t.test('a tunnel left idle after an answer is closed', async (t) => {
  const { proxy, caPem, handled } = await bareProxy(t, { limits: { idleTimeoutMs: 300 } });
  const tls = await openTunnel(proxy.port, caPem);
  const closed = untilClosed(tls);
  tls.write('GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\n\r\n');
  const answer = await closed;
  t.match(answer, /^HTTP\/1\.1 200 /, 'the call is answered, then the idle tunnel closed');
  t.equal(handled(), 1);
});

t.test('past the cap on open tunnels a CONNECT is refused 503 with Retry-After', async (t) => {
  const { proxy, caPem } = await bareProxy(t, { limits: { maxTunnels: 2 } });
  const first = await openTunnel(proxy.port, caPem);
  const second = await openTunnel(proxy.port, caPem);
  const { socket, head, rest } = await proxyHead(proxy.port, CONNECT);
  socket.destroy();
  t.match(head, /^HTTP\/1\.1 503 /, 'a third is refused');
  t.match(head, /\r\nretry-after: 1/i, 'with Retry-After');
  const body = JSON.parse(rest);
  t.match(body, { type: 'error', error: { code: 'unavailable', request_id: String } });
  t.match(head, new RegExp(`\r\nx-request-id: ${body.error.request_id}`, 'i'));
  t.equal(proxy.openTunnels, 2, 'the refused one is not counted');
  // A tunnel that closes frees its place.
  first.destroy();
  await waitFor(() => proxy.openTunnels === 1, 'the closed tunnel let go');
  const third = await openTunnel(proxy.port, caPem);
  t.pass('a new tunnel opens once one has closed');
  third.destroy();
  second.destroy();
});

t.test('503 refusals keep the Retry-After of their cause (no snapshot yet)', async (t) => {
  const { proxy } = await bareProxy(t, {
    authenticate: () => {
      throw new ServiceError('unavailable', 'no policy snapshot yet', { headers: { 'retry-after': '1' } });
    },
  });
  for (const [what, request] of [
    ['a tunnel', CONNECT],
    [
      'plain HTTP',
      `GET http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.openai.com\r\nProxy-Authorization: ${basic(KEY)}\r\nConnection: close\r\n\r\n`,
    ],
  ] as const) {
    const { socket, head, rest } = await proxyHead(proxy.port, request);
    socket.destroy();
    t.match(head, /^HTTP\/1\.1 503 /, what);
    t.match(head, /\r\nretry-after: 1/i, `${what}: Retry-After`);
    t.match(JSON.parse(rest), { error: { code: 'unavailable' } });
  }
});

/** A plain connection to the proxy's port, open (nothing sent yet). */
function connection(port: number): Promise<import('node:net').Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

t.test(
  "on the proxy's port, a connection that sends nothing or dribbles its request is answered 408, closed and counted",
  async (t) => {
    t.equal(PROXY_HEADERS_TIMEOUT_MS, 10_000, 'by default 10 s, shorter than a call inside a tunnel');
    const refused: [string, number][] = [];
    const { proxy, handled } = await bareProxy(t, {
      // The proxy port's own timeout: the calls inside tunnels keep the general one (30 s).
      limits: { proxyHeadersTimeoutMs: 300 },
      onRefused: (method, status) => refused.push([method, status]),
    });
    const cases = [
      ['nothing at all', ''],
      ['a CONNECT dribbled', 'CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\nX-Slow: '],
      ['a plain-HTTP request dribbled', 'GET http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.'],
    ] as const;
    for (const [what, sent] of cases) {
      const socket = await connection(proxy.port);
      const closed = untilClosed(socket);
      if (sent !== '') socket.write(sent);
      const answer = parsed(await closed);
      t.equal(answer.status, 408, `${what}: 408, and the connection closed`);
      t.match(answer.body, { type: 'error', error: { code: 'request_timeout', request_id: String } }, what);
      t.match(answer.head, new RegExp(`\r\nx-request-id: ${answer.body?.error?.request_id}`, 'i'), what);
    }
    t.same(
      refused,
      [
        ['-', 408],
        ['-', 408],
        ['-', 408],
      ],
      'each is counted as a refusal of the proxy (no request was read: method "-")',
    );
    t.equal(handled(), 0);
  },
);

t.test(
  "past the cap on connections waiting for their request, the proxy's port answers 503 and closes",
  async (t) => {
    t.equal(MAX_PROXY_CONNECTIONS, 512);
    const refused: [string, number][] = [];
    const { proxy, caPem } = await bareProxy(t, {
      limits: { maxProxyConnections: 2 },
      onRefused: (method, status) => refused.push([method, status]),
    });
    // A tunnel is no longer waiting: it does not count towards the cap (MAX_TUNNELS bounds it).
    const tunnel = await openTunnel(proxy.port, caPem);
    const first = await connection(proxy.port);
    const second = await connection(proxy.port);
    await waitFor(() => proxy.waitingConnections === 2, 'both connections are waiting');
    const third = await connection(proxy.port);
    const answer = parsed(await untilClosed(third));
    t.equal(answer.status, 503, 'a third is refused at once');
    t.match(answer.head, /\r\nretry-after: 1/i, 'with Retry-After');
    t.match(answer.body, { type: 'error', error: { code: 'unavailable', request_id: String } });
    t.match(answer.body.error.message, /2 connections waiting for their request/);
    t.match(answer.head, new RegExp(`\r\nx-request-id: ${answer.body.error.request_id}`, 'i'));
    t.same(refused, [['-', 503]], 'counted');
    t.equal(proxy.waitingConnections, 2, 'the refused one is not counted');
    // A CONNECT sent on a refused connection is never served.
    const fourth = await connection(proxy.port);
    const late = untilClosed(fourth);
    fourth.write(CONNECT);
    t.match(await late, /^HTTP\/1\.1 503 /, 'only the refusal, no tunnel');
    t.equal(proxy.openTunnels, 1);
    // A connection that goes away frees its place, and one that becomes a tunnel too.
    first.destroy();
    await waitFor(() => proxy.waitingConnections === 1, 'the closed connection let go');
    const { socket, head } = await proxyHead(proxy.port, CONNECT);
    t.match(head, /^HTTP\/1\.1 200 /, 'a new connection is taken, and its CONNECT opens a tunnel');
    await waitFor(() => proxy.waitingConnections === 1, 'the tunnel no longer waits');
    socket.destroy();
    second.destroy();
    tunnel.destroy();
  },
);

t.test('a flood of connections refused at the caps logs one warning per cap, and counts each', async (t) => {
  const lines: Record<string, unknown>[] = [];
  const refused: [string, number][] = [];
  const { proxy, caPem } = await bareProxy(t, {
    limits: { maxProxyConnections: 1, maxTunnels: 1 },
    logger: createLogger('warn', (line) => lines.push(JSON.parse(line))),
    onRefused: (method, status) => refused.push([method, status]),
  });
  const tunnel = await openTunnel(proxy.port, caPem);
  const waiting = await connection(proxy.port);
  await waitFor(() => proxy.waitingConnections === 1, 'the one connection allowed is waiting');
  // Connections past the waiting cap, refused on arrival.
  for (let i = 0; i < 6; i++) {
    const answer = parsed(await untilClosed(await connection(proxy.port)));
    t.equal(answer.status, 503);
  }
  // CONNECTs past the tunnel cap (the waiting connection closed, to let them in).
  waiting.destroy();
  await waitFor(() => proxy.waitingConnections === 0, 'the waiting connection let go');
  for (let i = 0; i < 4; i++) {
    const { socket, head } = await proxyHead(proxy.port, CONNECT);
    socket.destroy();
    t.match(head, /^HTTP\/1\.1 503 /);
    await waitFor(() => proxy.waitingConnections === 0, 'the refused CONNECT closed');
  }
  t.equal(refused.length, 10, 'every refusal is counted');
  t.ok(
    refused.every(([, status]) => status === 503),
    'as 503s',
  );
  const warned = lines.filter((l) => l.level === 'warn');
  t.equal(warned.length, 2, `one warning per cap (${JSON.stringify(warned)})`);
  t.match(warned, [
    { msg: 'request failed', status: 503, limit: 'proxy_connections', suppressed: 0 },
    { msg: 'request failed', status: 503, limit: 'proxy_tunnels', suppressed: 0 },
  ]);
  tunnel.destroy();
});
