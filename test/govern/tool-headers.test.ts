import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { startService } from '../helpers/service.js';

// A tool's headers are checked when an org admin configures them (egress review #9): undici
// refuses most bad ones only when a call sends them, after the mandate is used up, as "tool X is
// unreachable", and it sends a configured Host as given (another virtual host behind the url's
// address). Each is a 400 at PUT naming the header, and nothing is stored.

t.test('tool headers are checked at PUT; a valid set is stored and sent', async (t) => {
  const received: IncomingHttpHeaders[] = [];
  const tool = createServer((req, res) => {
    received.push(req.headers);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  await new Promise<void>((r) => tool.listen(0, '127.0.0.1', r));
  const hostPort = `127.0.0.1:${(tool.address() as AddressInfo).port}`;
  const svc = await startService({ env: { SERVICE_EGRESS_ALLOW: hostPort } });
  t.teardown(async () => {
    await svc.close();
    await new Promise<void>((r) => tool.close(() => r()));
  });
  const put = (headers: Record<string, string>) =>
    svc.call('/api/settings/tools', {
      method: 'PUT',
      token: svc.pat,
      body: {
        tools: [
          { name: 'first', url: `http://${hostPort}/first` },
          { name: 'crm.lookup', url: `http://${hostPort}/lookup`, headers },
        ],
      },
    });

  const refused: [string, Record<string, string>, string][] = [
    ['a space in a name', { 'Bad Name': 'v' }, 'Bad Name'],
    ['CR LF in a name', { 'X-A\r\nX-Injected': 'v' }, 'X-A\r\nX-Injected'],
    ['a colon in a name', { 'X-A:': 'v' }, 'X-A:'],
    ['an empty name', { '': 'v' }, ''],
    ['CR LF in a value', { 'X-A': 'v\r\nX-Injected: 1' }, 'X-A'],
    ['LF in a value', { 'X-A': 'v\nx' }, 'X-A'],
    ['CR in a value', { 'X-A': 'v\rx' }, 'X-A'],
    ['NUL in a value', { 'X-A': 'v\u0000x' }, 'X-A'],
    ['another control character', { 'X-A': 'v\u0007x' }, 'X-A'],
    ['a character above U+00FF', { 'X-A': 'v\u20acx' }, 'X-A'],
    ['Host', { Host: 'metadata.google.internal' }, 'Host'],
    ['connection', { Connection: 'close' }, 'Connection'],
    ['keep-alive', { 'Keep-Alive': 'timeout=5' }, 'Keep-Alive'],
    ['transfer-encoding', { 'Transfer-Encoding': 'chunked' }, 'Transfer-Encoding'],
    ['te', { TE: 'trailers' }, 'TE'],
    ['trailer', { trailer: 'x-a' }, 'trailer'],
    ['upgrade', { Upgrade: 'websocket' }, 'Upgrade'],
    ['expect', { EXPECT: '100-continue' }, 'EXPECT'],
    ['content-length', { 'Content-Length': '5' }, 'Content-Length'],
    ['proxy-authorization', { 'Proxy-Authorization': 'Basic eDp5' }, 'Proxy-Authorization'],
    ['proxy-anything', { 'proxy-x': '1' }, 'proxy-x'],
    ['a name twice', { 'X-Token': 'abc', 'x-token': 'def' }, 'x-token'],
  ];
  for (const [what, headers, name] of refused) {
    const res = await put({ Authorization: 'Bearer tok-0123456789', ...headers });
    t.equal(res.status, 400, `${what}: refused`);
    t.equal(res.body.error?.code, 'invalid_request', what);
    t.equal(res.body.error?.param, `tools[1].headers.${name}`, `${what}: the header is named`);
  }
  t.same((await svc.call('/api/settings/tools', { token: svc.pat })).body.tools, [], 'nothing was stored');

  const valid = {
    Authorization: 'Bearer tok-0123456789',
    'X-Api-Key': "k\tv !#$%&'*+-.^_`|~ end",
    "X-Odd!#$%&'*+.^_`|~Name": 'caf\u00e9',
    'Content-Type': 'application/json; charset=utf-8',
  };
  const ok = await put(valid);
  t.equal(ok.status, 200, JSON.stringify(ok.body));
  const g = await svc.call('/v1/tools/govern', {
    token: svc.agentKey,
    body: { name: 'crm.lookup', arguments: { customer: 'c-42' } },
  });
  t.equal(g.body.outcome, 'allow');
  const run = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate: g.body.mandate, name: 'crm.lookup', arguments: { customer: 'c-42' } },
  });
  t.equal(run.status, 200, JSON.stringify(run.body));
  const sent = received.at(-1) ?? {};
  for (const [name, value] of Object.entries(valid))
    t.equal(sent[name.toLowerCase()], value, `${name} was sent as configured`);
  t.equal(sent.host, hostPort, 'Host is the url’s');
});
