import { connect } from 'node:net';
import t from 'tap';
import type { ChainLog } from '../../src/audit/chain-log.js';
import { registerAuditRoutes } from '../../src/audit/routes.js';
import { startCoreHarness } from '../helpers/core-harness.js';

/**
 * An export of a long chain follows its client's pace: it reads on only while a bounded amount
 * waits unsent, and a client that takes nothing for the stall limit is let go. It used to write
 * the whole chain into the connection's buffers at once (a slow download of a big org held all
 * of it in memory).
 */
for (const engine of ['uws', 'node'] as const) {
  t.test(`a stalled export download is let go (${engine})`, async (t) => {
    const h = await startCoreHarness<ChainLog>({
      prefix: 'export-bp',
      engine,
      register: ({ snapshot, orgExists, router }, log) => {
        registerAuditRoutes(router, { snapshot, log, orgExists, clientStallMs: 400 });
      },
    });
    t.teardown(() => h.close());
    // ~24 MB of chain: far more than the sockets between the server and the client hold.
    const filler = 'x'.repeat(2000);
    const org = (await h.call('/api/me', { token: h.pat })).body.org_id as string;
    for (let i = 0; i < 12_000; i += 500) {
      await Promise.all(
        Array.from({ length: 500 }, (_, k) =>
          h.audit.append({ org_id: org, event_type: 'llm_call', reason: `${i + k} ${filler}` }),
        ),
      );
    }
    const { port } = new URL(h.url);
    const got = await new Promise<{ bytes: number; ended: boolean }>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write(
          `GET /api/audit/export HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${h.pat}\r\n\r\n`,
        );
        socket.pause(); // the client reads nothing for 2 s, then all there is
        setTimeout(() => socket.resume(), 2_000);
      });
      let bytes = 0;
      let tail = '';
      socket.on('data', (d: Buffer) => {
        bytes += d.length;
        tail = (tail + d.toString('latin1')).slice(-16);
      });
      socket.on('error', () => undefined);
      socket.on('close', () => resolve({ bytes, ended: tail.endsWith('0\r\n\r\n') }));
      setTimeout(() => {
        socket.destroy();
        reject(new Error(`still open after 20 s (${bytes} bytes)`));
      }, 20_000).unref();
    });
    t.notOk(got.ended, `the download was cut, not completed (${got.bytes} bytes)`);
    t.ok(got.bytes < 20_000_000, 'and most of the chain was never read for it');
    const whole = await h.call('/api/audit/export', { token: h.pat });
    t.equal(whole.text.split('\n').filter(Boolean).length >= 12_000, true, 'a client that reads gets it all');
  });
}
