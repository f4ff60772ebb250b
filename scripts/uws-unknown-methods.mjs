// What the native uWS build does with a request whose method is not one of the nine it routes
// (GET POST HEAD PUT DELETE CONNECT OPTIONS TRACE PATCH): a handler is registered for every
// method uWS.js offers, on every path, and such requests are sent on raw sockets. If one reaches
// a handler, govgate can answer it (404/405 in the error shape, as on node:http) and docs/ops.md
// ("Methods uWS does not route") must change. Run after upgrading uWS:
//   node scripts/uws-unknown-methods.mjs   (exit 0: no such method reaches JavaScript)
import { createRequire } from 'node:module';
import { connect } from 'node:net';

const require = createRequire(import.meta.url);
const uws = require('@trufflesuite/uws-js-unofficial');
if (typeof uws.us_socket_local_port !== 'function') {
  console.error('the native uWS binding did not load (the JS fallback answers instead)');
  process.exit(2);
}

const reached = [];
const app = uws.App();
for (const name of ['get', 'post', 'put', 'patch', 'del', 'options', 'head', 'connect', 'trace', 'any']) {
  app[name]('/*', (res, req) => {
    reached.push(req.getCaseSensitiveMethod());
    res.end(`reached ${name}`);
  });
}

/** Sends `method /x`; resolves with what came back before the server closed (or 1 s passed). */
function send(port, method) {
  return new Promise((resolve) => {
    let received = '';
    const socket = connect(port, '127.0.0.1', () =>
      socket.write(`${method} /x HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n`),
    );
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ received, closed: false });
    }, 1000);
    socket.on('data', (d) => {
      received += d;
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ received, closed: true });
    });
    socket.on('error', () => {});
  });
}

app.listen('127.0.0.1', 0, async (listenSocket) => {
  const port = uws.us_socket_local_port(listenSocket);
  let reachable = 0;
  for (const method of ['GET', 'PATCH', 'PROPFIND', 'MKCOL', 'XMETH1', 'get']) {
    const before = reached.length;
    const { received, closed } = await send(port, method);
    const handled = reached.length > before;
    const known = method === 'GET' || method === 'PATCH';
    if (handled && !known) reachable++;
    const answer = received === '' ? 'no bytes' : JSON.stringify(received.split('\r\n', 1)[0]);
    console.log(
      `${method.padEnd(8)} handler ${handled ? 'called' : 'never called'}; ${answer}; ${closed ? 'connection closed by uWS' : 'connection left open'}`,
    );
  }
  // The package's JS port of the uWS router (its fallback) names what `any` stands for.
  const { HttpRouter } = require('@trufflesuite/uws-js-unofficial/dist/http-router.js');
  console.log(`any() registers: ${new HttpRouter().methods.join(' ')} (dist/http-router.js)`);
  uws.us_listen_socket_close(listenSocket);
  app.close();
  process.exit(reachable === 0 ? 0 : 1);
});
