import { connect as connectSocket } from 'node:net';
import t from 'tap';
import { ServiceError } from '../../src/core/errors.js';
import { createLogger } from '../../src/util/log.js';
import { bareProxy, basic, KEY, parsed, proxyHead, untilClosed } from '../helpers/proxy.js';

const AUTH = `Proxy-Authorization: ${basic(KEY)}\r\n`;

/** A plain-HTTP call through the proxy to `target` (absolute form); its answer. */
async function plain(port: number, target: string): Promise<{ status: number; body: any }> {
  const host = new URL(target.replace(/^\w+:/, 'http:')).host;
  const socket = connectSocket(port, '127.0.0.1', () =>
    socket.write(`GET ${target} HTTP/1.1\r\nHost: ${host}\r\n${AUTH}Connection: close\r\n\r\n`),
  );
  return parsed(await untilClosed(socket));
}

t.test('plain HTTP through the proxy: the http scheme and its default port only', async (t) => {
  const { proxy, handled } = await bareProxy(t, { hosts: ['api.openai.com', '::1'] });
  for (const target of [
    'http://api.openai.com:22/v1/models',
    'http://api.openai.com:8080/v1/models',
    'http://api.openai.com:443/v1/models',
    'ftp://api.openai.com/v1/models',
    'https://api.openai.com/v1/models',
  ]) {
    const res = await plain(proxy.port, target);
    t.equal(res.status, 403, target);
    t.match(res.body, { error: { code: 'forbidden' } }, target);
  }
  t.equal(handled(), 0, 'none was served');
  for (const target of [
    'http://api.openai.com/v1/models',
    'http://api.openai.com:80/v1/models',
    'http://[::1]/v1/models',
  ]) {
    const res = await plain(proxy.port, target);
    t.equal(res.status, 200, target);
    t.same(res.body, { path: '/v1/models' }, target);
  }
});

t.test('a refusal is logged as the gateway logs its own: 4xx at debug, 5xx at warn', async (t) => {
  const lines: any[] = [];
  const logger = createLogger('debug', (line) => lines.push(JSON.parse(line)));
  const { proxy } = await bareProxy(t, { logger });
  await plain(proxy.port, 'http://example.com/');
  const { socket } = await proxyHead(
    proxy.port,
    'CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n',
  );
  socket.destroy();
  const { proxy: down } = await bareProxy(t, {
    logger,
    authenticate: () => {
      throw new ServiceError('unavailable', 'no policy snapshot yet', { headers: { 'retry-after': '1' } });
    },
  });
  await plain(down.port, 'http://api.openai.com/v1/models');
  const refusals = lines.filter((l) => l.route === 'proxy');
  t.match(refusals, [
    { level: 'debug', msg: 'request', method: 'GET', status: 403, reason: 'forbidden', request_id: String },
    { level: 'debug', msg: 'request', method: 'CONNECT', status: 407, reason: 'proxy_auth_required' },
    { level: 'warn', msg: 'request failed', method: 'GET', status: 503, reason: 'unavailable' },
  ]);
  t.equal(refusals.length, 3);
});

t.test('a host with one trailing dot (the fully qualified name) is the same host', async (t) => {
  const { proxy, handled } = await bareProxy(t);
  const res = await plain(proxy.port, 'http://api.openai.com./v1/models');
  t.equal(res.status, 200, 'plain HTTP');
  t.same(res.body, { path: '/v1/models' });
  const { socket, head } = await proxyHead(
    proxy.port,
    `CONNECT api.openai.com.:443 HTTP/1.1\r\nHost: api.openai.com.:443\r\n${AUTH}\r\n`,
  );
  socket.destroy();
  t.match(head, /^HTTP\/1\.1 200 /, 'a tunnel');
  for (const target of ['http://api.openai.com../v1/models', 'http://.api.openai.com/v1/models']) {
    t.equal((await plain(proxy.port, target)).status, 403, `${target}: not the same host`);
  }
  const twoDots = await proxyHead(
    proxy.port,
    `CONNECT api.openai.com..:443 HTTP/1.1\r\nHost: api.openai.com..:443\r\n${AUTH}\r\n`,
  );
  twoDots.socket.destroy();
  t.match(twoDots.head, /^HTTP\/1\.1 403 /, 'two trailing dots: another name');
  t.equal(handled(), 1);
});
