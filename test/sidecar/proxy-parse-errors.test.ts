import { connect as connectSocket } from 'node:net';
import t, { type Test } from 'tap';
import { bareProxy, basic, KEY, openTunnel, parsed, untilClosed } from '../helpers/proxy.js';

/** Sends `raw` to the proxy's port on a fresh connection; the answer, read until the proxy closes it. */
function onProxyPort(port: number, raw: string): Promise<string> {
  const socket = connectSocket(port, '127.0.0.1', () => socket.write(raw));
  return untilClosed(socket);
}

const AUTH = `Proxy-Authorization: ${basic(KEY)}\r\n`;
const BIG = `X-Big: ${'a'.repeat(20 * 1024)}\r\n`;
const TE_CL = 'Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n';

/** A request the proxy's parser refuses: answered in the error shape, with X-Request-Id. */
function refusedInShape(t: Test, answer: string, status: number, code: string, what: string): void {
  const got = parsed(answer);
  t.equal(got.status, status, what);
  t.match(
    got.body,
    { type: 'error', error: { code, type: String, message: String, request_id: String } },
    what,
  );
  t.match(
    got.head,
    new RegExp(`\r\nx-request-id: ${got.body?.error?.request_id}`, 'i'),
    `${what}: X-Request-Id`,
  );
}

t.test("the proxy's port answers what it cannot parse as the gateway does", async (t) => {
  const { proxy, handled } = await bareProxy(t, { limits: { headersTimeoutMs: 300, requestTimeoutMs: 600 } });
  const big = await onProxyPort(
    proxy.port,
    `GET http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.openai.com\r\n${AUTH}${BIG}\r\n`,
  );
  t.match(big, /^HTTP\/1\.1 431 /, 'headers over the limit: 431');
  refusedInShape(
    t,
    await onProxyPort(
      proxy.port,
      `XMETH1 http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.openai.com\r\n${AUTH}\r\n`,
    ),
    400,
    'invalid_request',
    'an unknown method',
  );
  refusedInShape(
    t,
    await onProxyPort(
      proxy.port,
      `POST http://api.openai.com/v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n${AUTH}${TE_CL}`,
    ),
    400,
    'invalid_request',
    'Transfer-Encoding with Content-Length',
  );
  refusedInShape(
    t,
    await onProxyPort(
      proxy.port,
      `GET http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.openai.com\r\nX-Slow: `,
    ),
    408,
    'request_timeout',
    'headers that do not arrive in time',
  );
  t.equal(handled(), 0, 'none reached the handler');
});

t.test('inside a tunnel, what the parser refuses is answered too', async (t) => {
  const { proxy, caPem, handled } = await bareProxy(t);
  const inTunnel = async (raw: string): Promise<string> => {
    const tls = await openTunnel(proxy.port, caPem);
    const answer = untilClosed(tls);
    tls.write(raw);
    return answer;
  };
  const big = await inTunnel(`GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\n${BIG}\r\n`);
  t.match(big, /^HTTP\/1\.1 431 /, 'headers over the limit: 431');
  refusedInShape(
    t,
    await inTunnel(`POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n${TE_CL}`),
    400,
    'invalid_request',
    'Transfer-Encoding with Content-Length',
  );
  refusedInShape(
    t,
    await inTunnel('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n'),
    400,
    'invalid_request',
    'a CONNECT inside a tunnel',
  );
  t.equal(handled(), 0, 'none reached the handler');
});
