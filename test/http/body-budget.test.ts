import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { createHttpHandler, type RouteHandler } from '../../src/http/app.js';
import { listen } from '../../src/http/listen.js';
import { Router } from '../../src/http/router.js';
import type { HttpServer } from '../../src/http/types.js';
import { createLogger } from '../../src/util/log.js';

// A body is read whole before its request is handled (and its credential checked). The bytes
// held while bodies are read are bounded across requests (BodyBudget): past the bound a body is
// refused with 503 and Retry-After instead of read. And a body is held as it arrives, never
// allocated from its declared length: a client that declares 5 MiB and sends one byte holds one.

/** Opens a connection and sends `raw`, keeping it open; resolves with what the server answers. */
function partial(port: number, raw: string): { socket: Socket; answer: Promise<string> } {
  const socket = connect(port, '127.0.0.1', () => socket.write(raw));
  let got = '';
  socket.setEncoding('utf8');
  const answer = new Promise<string>((resolve) => {
    socket.on('data', (d: string) => {
      got += d;
      if (got.includes('\r\n\r\n') && /"request_id"/.test(got)) resolve(got);
    });
    socket.on('close', () => resolve(got));
    socket.on('error', () => resolve(got));
  });
  return { socket, answer };
}

const head = (length: number) =>
  `POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

async function until(cond: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

for (const engine of ['uws', 'node'] as const) {
  t.test(`${engine}: the body bytes held across requests are bounded, and held as they arrive`, async (t) => {
    const bodies: number[] = [];
    const router = new Router<RouteHandler>().add('POST', '/x', (ctx) => {
      bodies.push(ctx.req.body.length);
      ctx.json(200, { request_id: 'ok' });
    });
    const server: HttpServer = await listen(
      engine,
      { host: '127.0.0.1', port: 0, bodyBudgetBytes: 64 * 1024 },
      createHttpHandler(router, { logger: createLogger('error'), onFinish: () => {} }),
    );
    t.teardown(() => server.close(100));
    t.equal(server.bufferedBodyBytes, 0);

    // Declared 5 MB, one byte sent: one byte held.
    const declared = partial(server.port, `${head(5_000_000)}{`);
    await until(() => server.bufferedBodyBytes === 1, 'the first byte');
    t.equal(server.bufferedBodyBytes, 1, 'what arrived, not what was declared');

    // 40 KiB of a body held; another of 40 KiB passes the 64 KiB bound and is refused.
    const first = partial(server.port, `${head(50_000)}${'a'.repeat(40 * 1024)}`);
    await until(() => server.bufferedBodyBytes === 1 + 40 * 1024, 'the first body');
    const second = partial(server.port, `${head(50_000)}${'b'.repeat(40 * 1024)}`);
    const refused = await second.answer;
    t.match(refused, /^HTTP\/1\.1 503 /, 'past the bound: 503');
    t.match(refused, /"code":"unavailable"/, 'in the error shape');
    t.match(refused.toLowerCase(), /retry-after: 1/);
    second.socket.destroy();
    t.equal(server.bufferedBodyBytes, 1 + 40 * 1024, 'the refused body holds nothing');

    // The first finishes: handed on, its bytes given back.
    first.socket.write('c'.repeat(50_000 - 40 * 1024));
    t.match(await first.answer, /^HTTP\/1\.1 200 /);
    t.same(bodies, [50_000]);
    await until(() => server.bufferedBodyBytes === 1, 'the first body handed on');
    // A client that leaves mid-body gives its bytes back.
    declared.socket.destroy();
    await until(() => server.bufferedBodyBytes === 0, 'the client that left');
    t.equal(server.bufferedBodyBytes, 0);
    first.socket.destroy();
  });
}
