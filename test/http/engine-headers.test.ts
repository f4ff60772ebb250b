import t from 'tap';
import { RawConnection } from '../helpers/raw-http.js';
import { ENGINES, startService } from '../helpers/service.js';

// Headers that name the HTTP engine tell a scanner what to try and a client nothing it needs.
const ENGINE_HEADERS = ['uwebsockets', 'server', 'x-powered-by'];

for (const engine of ENGINES) {
  t.test(`no answer names the HTTP engine (${engine})`, async (t) => {
    const svc = await startService({ engine });
    t.teardown(() => svc.close());
    const conn = await RawConnection.open(svc.url);
    t.teardown(() => conn.destroy());
    const auth = { authorization: `Bearer ${svc.agentKey}`, 'content-type': 'application/json' };
    const chat = (stream: boolean): string =>
      JSON.stringify({ model: 'mock-echo', stream, messages: [{ role: 'user', content: 'hi' }] });
    const answers = [
      await conn.request('GET', '/health'),
      await conn.request('HEAD', '/health'),
      await conn.request('GET', '/nowhere'),
      await conn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(false) }),
      await conn.request('POST', '/v1/chat/completions', { headers: auth, body: chat(true) }),
    ];
    t.same(
      answers.map((a) => a.status),
      [200, 200, 404, 200, 200],
    );
    for (const a of answers) {
      for (const name of ENGINE_HEADERS) t.notOk(name in a.headers, `no ${name} header (${a.status})`);
    }
  });
}
