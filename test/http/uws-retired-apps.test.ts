import { X509Certificate } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { listen, localUrl } from '../../src/http/listen.js';
import { loadTlsFiles } from '../../src/http/tls.js';
import type { HttpHandler } from '../../src/http/types.js';
import { RETIRED_APPS_KEPT } from '../../src/http/uws-adapter.js';
import { RawConnection } from '../helpers/raw-http.js';
import { heldHandler, type IssuedCert, testCa } from '../helpers/tls.js';
import { tempDir } from '../helpers/tmp.js';

// uWS cannot replace an SSLApp's certificate: a renewal listens a new app and retires the old one
// (docs/ops.md, "TLS"). uWS cannot tell when an app has no connection left, so the apps retired
// beyond the newest few are closed, each once no request of it is in flight (and has not been
// for a while): a request in flight on one is answered whole, never cut.

const ca = testCa(tempDir('govgate-uws-retired-'));
const fingerprint = (issued: IssuedCert): string => new X509Certificate(issued.cert).fingerprint256;

/** Waits for `done`, at most `ms`; whether it came. */
async function within(done: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!done() && Date.now() < end) await sleep(20);
  return done();
}

t.test(
  'the apps retired beyond the newest few are closed once no request of theirs is in flight',
  async (t) => {
    t.equal(RETIRED_APPS_KEPT, 4, 'by default the 4 newest retired apps are kept');
    const { handler, release, arrived } = heldHandler();
    const certs = [0, 1, 2, 3].map((i) => ca.issue(`retired-${i}`));
    const files = (i: number) => {
      const c = certs[i] as IssuedCert;
      return loadTlsFiles(c.certFile, c.keyFile);
    };
    const server = await listen(
      'uws',
      { host: '127.0.0.1', port: 0, tls: files(0), retiredApps: { kept: 2, quietMs: 100 } },
      handler,
    );
    if (server.engine !== 'uws') {
      t.comment('uWS could not load: nothing to test');
      await server.close(0);
      return;
    }
    const url = localUrl('127.0.0.1', server.port, true);
    const conns: RawConnection[] = [];
    const open = async (): Promise<RawConnection> => {
      const c = await RawConnection.openTls(url, ca.caPem);
      conns.push(c);
      return c;
    };
    t.teardown(async () => {
      release();
      for (const c of conns) c.destroy();
      await server.close(500);
    });

    // On the first app: a connection kept alive, and one with a request in flight.
    const idle = await open();
    t.equal((await idle.request('GET', '/a')).body, 'ok /a');
    const inFlight = await open();
    inFlight.send({ method: 'GET', path: '/held' });
    t.ok(await within(arrived, 5_000), 'a request is in flight');
    // Three renewals: the first app is retired beyond the 2 kept, the second app within them.
    await server.replaceTls(files(1));
    const second = await open();
    t.equal(second.peerFingerprint, fingerprint(certs[1] as IssuedCert));
    t.equal((await second.request('GET', '/b')).body, 'ok /b');
    await server.replaceTls(files(2));
    await server.replaceTls(files(3));

    await sleep(400);
    t.notOk(idle.isClosed, 'an app with a request in flight is not closed');
    t.notOk(inFlight.isClosed);
    release();
    const answer = await inFlight.answer({ what: 'the request in flight' });
    t.equal(answer.status, 200);
    t.equal(answer.body, 'held answer', 'answered whole');
    t.ok(
      await within(() => idle.isClosed && inFlight.isClosed, 5_000),
      "then the app's connections are closed",
    );

    t.notOk(second.isClosed, 'an app among the newest retired is kept');
    t.equal((await second.request('GET', '/b2')).body, 'ok /b2', 'and its connection still serves');
    const fresh = await open();
    t.equal(fresh.peerFingerprint, fingerprint(certs[3] as IssuedCert), 'new connections get the newest');
    t.equal((await fresh.request('GET', '/c')).body, 'ok /c');
  },
);

t.test('an answer written after its client left a retired app that was closed does not crash', async (t) => {
  let release = (): void => {};
  const held = new Promise<void>((r) => {
    release = r;
  });
  let arrived = false;
  let written = false;
  const handler: HttpHandler = (req, res) => {
    if (req.path === '/held') {
      arrived = true;
      void held.then(() => {
        res.send(200, { 'content-type': 'text/plain' }, 'late answer');
        written = true;
      });
    } else res.send(200, { 'content-type': 'text/plain' }, `ok ${req.path}`);
  };
  const certs = [0, 1].map((i) => ca.issue(`abandoned-${i}`));
  const files = (i: number) => {
    const c = certs[i] as IssuedCert;
    return loadTlsFiles(c.certFile, c.keyFile);
  };
  const server = await listen(
    'uws',
    { host: '127.0.0.1', port: 0, tls: files(0), retiredApps: { kept: 0, quietMs: 50 } },
    handler,
  );
  t.teardown(async () => {
    release();
    await server.close(500);
  });
  if (server.engine !== 'uws') return;
  const url = localUrl('127.0.0.1', server.port, true);
  const idle = await RawConnection.openTls(url, ca.caPem);
  t.teardown(() => idle.destroy());
  t.equal((await idle.request('GET', '/a')).body, 'ok /a');
  const left = await RawConnection.openTls(url, ca.caPem);
  left.send({ method: 'GET', path: '/held' });
  t.ok(await within(() => arrived, 5_000), 'a request is in flight');
  // Renewed with no retired app kept: the first is closed once idle. Its client leaves.
  await server.replaceTls(files(1));
  left.destroy();
  t.ok(await within(() => idle.isClosed, 5_000), 'the retired app is closed once its client left');
  release();
  t.ok(await within(() => written, 5_000), 'the handler answered after its connection closed');
  const fresh = await RawConnection.openTls(url, ca.caPem);
  t.teardown(() => fresh.destroy());
  t.equal((await fresh.request('GET', '/b')).body, 'ok /b', 'the process serves on');
});
