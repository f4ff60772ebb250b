import { connect } from 'node:net';
import t from 'tap';
import { ENGINES, startService } from '../helpers/service.js';

/**
 * An HTTP/1.0 request: node:http answers it (and closes, as HTTP/1.0 without keep-alive asks);
 * this uWS build closes the connection without an answer, before govgate sees the request
 * (docs/ops.md, "HTTP/1.0 is served by node:http only"). If a uWS upgrade answers it, this test
 * fails and the doc must change with it.
 */
async function http10(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let got = '';
  socket.on('data', (c: Buffer) => {
    got += c.toString('latin1');
  });
  socket.write(`GET /health HTTP/1.0\r\nHost: ${hostname}\r\n\r\n`);
  await new Promise<void>((resolve) => {
    socket.once('close', () => resolve());
    socket.on('error', () => resolve());
  });
  return got;
}

for (const engine of ENGINES) {
  t.test(`GET /health over HTTP/1.0 (${engine})`, async (t) => {
    const svc = await startService({ engine });
    t.teardown(() => svc.close());
    const answer = await http10(svc.url);
    if (engine === 'node') {
      t.match(answer, /^HTTP\/1\.[01] 200 /, 'answered');
      t.match(answer, /x-request-id: /i);
    } else t.equal(answer, '', 'closed without an answer');
  });
}
