import { connect } from 'node:net';
import t from 'tap';
import { startService } from '../helpers/service.js';

// What node:http's parser refuses never reaches a handler; the answer is still in the contract's
// shape (uWS closes such connections without a byte: docs/ops.md, "Methods uWS does not route").

/** Sends `raw` on a fresh connection and reads until the server closes it. */
function exchange(url: string, raw: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(raw));
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      got += d;
    });
    socket.on('end', () => resolve(got));
    socket.on('error', reject);
    socket.setTimeout(5_000, () => {
      socket.destroy();
      reject(new Error(`no close within 5 s: ${got}`));
    });
  });
}

t.test('node:http: an unknown method or a malformed request gets a 400 in the error shape', async (t) => {
  const svc = await startService({ engine: 'node' });
  t.teardown(() => svc.close());
  for (const line of ['XMETH1 /health HTTP/1.1', 'get /health HTTP/1.1', 'GET /health HTTP/9.x']) {
    const answer = await exchange(svc.url, `${line}\r\nHost: 127.0.0.1\r\n\r\n`);
    const [head = '', body = ''] = answer.split('\r\n\r\n');
    t.match(head, /^HTTP\/1\.1 400 /, line);
    t.match(head, /\r\nConnection: close/i);
    const id = /\r\nX-Request-Id: (\S+)/i.exec(head)?.[1];
    t.ok(id, `${line}: a request id`);
    const parsed = JSON.parse(body);
    t.match(parsed, { type: 'error', error: { code: 'invalid_request', request_id: id } }, line);
  }
  const known = await exchange(
    svc.url,
    'PROPFIND /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n',
  );
  t.match(known, /^HTTP\/1\.1 405 /, 'a method the parser knows is routed: 405 with Allow');
});
