import t from 'tap';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { RawConnection, type RawRequest } from '../helpers/raw-http.js';
import { ENGINES, startService, type TestService, useMockUpstream } from '../helpers/service.js';

/**
 * Requests pipelined on one connection, without a drain (the drain's case is in drain.test.ts):
 * two calls in one write, the first held at the provider while the second arrives. node:http
 * answers both, in order. The uWS build closes the connection instead: the call in flight is
 * given up as if its client had left and the second never runs (docs/ops.md, "Pipelined requests").
 * If a uWS upgrade changes that, this test fails and the doc must change with it.
 */
const post = (svc: TestService, id: string, content: string): RawRequest => ({
  method: 'POST',
  path: '/v1/chat/completions',
  headers: {
    authorization: `Bearer ${svc.agentKey}`,
    'content-type': 'application/json',
    'x-request-id': id,
  },
  body: JSON.stringify({ model: 'gpt-test', messages: [{ role: 'user', content }] }),
});

for (const engine of ENGINES) {
  t.test(`two calls pipelined in one write (${engine})`, async (t) => {
    const upstream = await startMockUpstream();
    const svc = await startService({ engine, env: { SERVICE_EGRESS_ALLOW: upstream.hostPort } });
    let open = (): void => {};
    let conn: RawConnection | undefined;
    t.teardown(async () => {
      conn?.destroy();
      open();
      await svc.close();
      await upstream.close();
    });
    await useMockUpstream(svc, svc.pat, upstream.url);
    upstream.behaviour = { kind: 'gate', open: new Promise<void>((r) => (open = r)) };
    conn = await RawConnection.open(svc.url);
    const calls = (): string[] =>
      upstream.requests
        .filter((r) => r.path === '/v1/chat/completions')
        .map((r) => (r.body as { messages: { content: string }[] }).messages[0]?.content ?? '');

    conn.send(post(svc, 'req-first', 'FIRST'), post(svc, 'req-second', 'SECOND'));
    if (engine === 'node') {
      for (let i = 0; i < 500 && calls().length < 2; i++) await new Promise((r) => setTimeout(r, 10));
      t.same(calls().sort(), ['FIRST', 'SECOND'], 'both calls reach the provider');
      open();
      const a = await conn.answer({ ms: 10_000, what: 'FIRST' });
      const b = await conn.answer({ ms: 10_000, what: 'SECOND' });
      t.equal(a.status, 200);
      t.equal(a.headers['x-request-id'], 'req-first', 'answered in the order of the requests');
      t.equal(b.status, 200);
      t.equal(b.headers['x-request-id'], 'req-second');
      t.not(b.headers.connection, 'close', 'the connection stays open');
      t.notOk(conn.isClosed);
    } else {
      const closed = await Promise.race([
        conn.closed.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), 5000)),
      ]);
      t.ok(closed, 'uWS closes the connection');
      t.equal(conn.received, '', 'with no answer to either call');
      open();
      t.notOk(calls().includes('SECOND'), 'the second call never runs');
    }
  });
}
