import { mkdtempSync, rmSync } from 'node:fs';
import { connect as connectSocket, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect as connectTls, type TLSSocket } from 'node:tls';
import t from 'tap';
import { ServiceError } from '../../src/core/errors.js';
import { type ForwardProxy, type ForwardProxyLimits, startForwardProxy } from '../../src/sidecar/proxy.js';
import { ProxyCa } from '../../src/sidecar/proxy-ca.js';
import { createLogger } from '../../src/util/log.js';
import { waitFor } from '../helpers/wait.js';

const KEY = `gk_agent_${'A'.repeat(40)}`;
const basic = (key: string): string => `Basic ${Buffer.from(`agent:${key}`).toString('base64')}`;
const CONNECT = `CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\nProxy-Authorization: ${basic(KEY)}\r\n\r\n`;

/**
 * The forward proxy on its own, on 127.0.0.1:0, with the proxy CA of a fresh keys dir, one
 * provider host (api.openai.com) and a handler that answers every call 200 with its path:
 * what the proxy itself does is under test, not the gateway behind it.
 */
async function bareProxy(
  t: { teardown(fn: () => Promise<void>): void },
  opts: { limits?: ForwardProxyLimits; authenticate?: (secret: string) => boolean } = {},
): Promise<{ proxy: ForwardProxy; caPem: string; handled: () => number }> {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-proxy-'));
  const ca = ProxyCa.load(dir);
  let handled = 0;
  const proxy = await startForwardProxy({
    host: '127.0.0.1',
    port: 0,
    ca,
    providerHosts: () => new Map([['api.openai.com', { host: 'api.openai.com', prefix: '' }]]),
    authenticate: opts.authenticate ?? ((secret) => secret === KEY),
    handler: (req, res) => {
      handled++;
      res.send(200, { 'content-type': 'application/json' }, JSON.stringify({ path: req.path }));
    },
    logger: createLogger('error'),
    ...(opts.limits === undefined ? {} : { limits: opts.limits }),
  });
  t.teardown(async () => {
    await proxy.close(100);
    rmSync(dir, { recursive: true, force: true });
  });
  return { proxy, caPem: ca.certPem, handled: () => handled };
}

/** What a socket receives until it closes (`limitMs` only keeps a broken test from hanging). */
function untilClosed(socket: Socket | TLSSocket, limitMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      got += d;
    });
    socket.on('error', () => undefined);
    const guard = setTimeout(() => {
      socket.destroy();
      reject(new Error(`still open after ${limitMs} ms: ${JSON.stringify(got)}`));
    }, limitMs);
    socket.once('close', () => {
      clearTimeout(guard);
      resolve(got);
    });
  });
}

/** Sends `request` to the proxy on a fresh connection; resolves with the proxy's head (up to its blank line). */
function proxyHead(port: number, request: string): Promise<{ socket: Socket; head: string; rest: string }> {
  return new Promise((resolve, reject) => {
    const socket = connectSocket(port, '127.0.0.1', () => socket.write(request));
    let got = '';
    const onData = (d: Buffer): void => {
      got += d.toString('latin1');
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.pause();
      resolve({ socket, head: got.slice(0, end), rest: got.slice(end + 4) });
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error(`closed before an answer: ${JSON.stringify(got)}`)));
  });
}

/** A tunnel to api.openai.com through the proxy, its TLS handshake done (trusting the proxy CA). */
async function openTunnel(port: number, caPem: string): Promise<TLSSocket> {
  const { socket, head } = await proxyHead(port, CONNECT);
  if (!head.startsWith('HTTP/1.1 200 ')) throw new Error(`tunnel refused: ${head}`);
  socket.removeAllListeners('close');
  return new Promise((resolve, reject) => {
    const tls = connectTls({ socket, servername: 'api.openai.com', ca: caPem }, () => resolve(tls));
    tls.once('error', reject);
  });
}

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

t.test('inside a tunnel, a request that does not arrive in time is closed', async (t) => {
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
    await closed;
    t.pass(`${what}: the tunnel is closed`);
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
