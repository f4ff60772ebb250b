import { connect } from 'node:net';
import t from 'tap';
import { listenNode } from '../../src/http/node-adapter.js';

/** Sends `raw` on a fresh connection, then nothing more; reads until the server closes it. */
function sendAndWait(port: number, raw: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(raw));
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      got += d;
    });
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    socket.setTimeout(10_000, () => {
      socket.destroy();
      reject(new Error(`still open after 10 s: ${got}`));
    });
  });
}

// A client that never finishes its request must not hold a connection, and the body read so
// far, for good (node:http turns its own timeouts off when requestTimeout is 0).
t.test('node:http closes a request that does not arrive in time, with a 408', async (t) => {
  let handled = 0;
  const server = await listenNode(
    { host: '127.0.0.1', port: 0, headersTimeoutMs: 400, requestTimeoutMs: 800 },
    (_req, res) => {
      handled++;
      res.send(200, { 'content-type': 'text/plain' }, 'ok');
    },
  );
  t.teardown(() => server.close(100));
  const partialHeaders = sendAndWait(server.port, 'POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
  const partialBody = sendAndWait(
    server.port,
    'POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":',
  );
  for (const [what, pending] of [
    ['headers', partialHeaders],
    ['body', partialBody],
  ] as const) {
    const answer = await pending;
    const [head = '', body = ''] = answer.split('\r\n\r\n');
    t.match(head, /^HTTP\/1\.1 408 /, `unfinished ${what}: 408`);
    t.match(JSON.parse(body), { type: 'error', error: { code: 'request_timeout' } }, 'in the error shape');
  }
  t.equal(handled, 0, 'neither reached the handler');
  const ok = await fetch(`http://127.0.0.1:${server.port}/x`);
  t.equal(await ok.text(), 'ok', 'a complete request is served');
});

t.test('node:http: a request that times out after its answer began gets no second status line', async (t) => {
  const server = await listenNode(
    { host: '127.0.0.1', port: 0, headersTimeoutMs: 400, requestTimeoutMs: 800 },
    (req, res) => {
      if (req.bodyError === 'too_large') res.send(413, { 'content-type': 'text/plain' }, 'too large');
      else res.send(200, { 'content-type': 'text/plain' }, 'ok');
    },
  );
  t.teardown(() => server.close(100));
  // A 413 is sent as soon as the declared length is over the limit; the client keeps uploading
  // slowly past the request timeout.
  const got = await new Promise<string>((resolve, reject) => {
    const socket = connect(server.port, '127.0.0.1', () => {
      socket.write(
        `POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${6 * 1024 * 1024}\r\n\r\n`,
      );
    });
    let text = '';
    let sent = 0;
    const trickle = setInterval(() => {
      if (sent++ < 15 && socket.writable) socket.write('x'.repeat(1000));
    }, 150);
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      text += d;
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearInterval(trickle);
      resolve(text);
    });
    setTimeout(() => {
      clearInterval(trickle);
      socket.destroy();
      reject(new Error(`still open after 10 s: ${text}`));
    }, 10_000).unref();
  });
  t.same(got.match(/HTTP\/1\.1 \d+/g), ['HTTP/1.1 413'], 'one answer, the 413');
});
