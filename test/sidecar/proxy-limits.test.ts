import { mkdtempSync, rmSync } from 'node:fs';
import { connect as connectSocket, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { ServiceError } from '../../src/core/errors.js';
import { type ForwardProxy, startForwardProxy } from '../../src/sidecar/proxy.js';
import { ProxyCa } from '../../src/sidecar/proxy-ca.js';
import { createLogger } from '../../src/util/log.js';

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
  opts: { authenticate?: (secret: string) => boolean } = {},
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
  });
  t.teardown(async () => {
    await proxy.close(100);
    rmSync(dir, { recursive: true, force: true });
  });
  return { proxy, caPem: ca.certPem, handled: () => handled };
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
