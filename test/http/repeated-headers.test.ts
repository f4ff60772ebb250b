import { connect } from 'node:net';
import t from 'tap';
import { ENGINES, startService, type TestService } from '../helpers/service.js';

// Egress review #7: uWS framed a request with two Content-Length headers by the first while
// JavaScript read the last, so the rest of the body ran as a second request. A header that must
// come once (framing, host, credentials, acting agent) that comes twice is refused by both
// engines with a 400 in the error shape, and the connection is closed: nothing after it runs.

/**
 * Sends `raw` on a fresh connection (and `later` 100 ms after it, if the connection is still
 * open) and reads until the server closes it (at most 5 s).
 */
function exchange(url: string, raw: string, later?: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      socket.write(raw);
      if (later !== undefined)
        setTimeout(() => {
          if (!socket.destroyed) socket.write(later);
        }, 100);
    });
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      got += d;
    });
    socket.on('close', () => resolve(got));
    socket.on('error', () => {}); // a reset after the answer: 'close' follows
    socket.setTimeout(5_000, () => {
      socket.destroy();
      reject(new Error(`the connection was not closed within 5 s: ${got}`));
    });
  });
}

/** The status lines in `answer`, and the head and JSON body of the first answer. */
function answers(answer: string): { statuses: number[]; head: string; body: any } {
  const statuses = [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
  const [head = '', rest = ''] = answer.split('\r\n\r\n');
  let body: unknown;
  try {
    body = JSON.parse(rest);
  } catch {
    body = rest;
  }
  return { statuses, head, body };
}

/** A chat call's request, with `head` (framing) lines; it would write an llm_call event. */
function chatRequest(svc: TestService, head: string, body: string): string {
  return (
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${svc.agentKey}\r\n` +
    `Content-Type: application/json\r\n${head}\r\n${body}`
  );
}

const CHAT = JSON.stringify({ model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] });

async function llmCalls(svc: TestService): Promise<number> {
  const res = await svc.call('/api/audit?category=llm_call', { token: svc.pat });
  return res.body.data.length;
}

for (const engine of ENGINES) {
  t.test(
    `a header that must come once, repeated, is a 400 and a closed connection (${engine})`,
    async (t) => {
      const svc = await startService({ engine });
      t.teardown(() => svc.close());
      const smuggled = chatRequest(svc, `Content-Length: ${CHAT.length}\r\n`, CHAT);
      const me = (head: string): string => `GET /api/me HTTP/1.1\r\n${head}\r\n`;
      const calls = await llmCalls(svc);

      const cases: { name: string; raw: string; later?: string; param: string }[] = [
        {
          name: 'two different Content-Length, a chat call smuggled in the longer body',
          raw: chatRequest(
            svc,
            `Content-Length: ${CHAT.length}\r\nContent-Length: ${CHAT.length + smuggled.length}\r\n`,
            CHAT,
          ),
          later: smuggled,
          param: 'content-length',
        },
        {
          name: 'two equal Content-Length',
          raw: chatRequest(svc, `Content-Length: ${CHAT.length}\r\nContent-Length: ${CHAT.length}\r\n`, CHAT),
          param: 'content-length',
        },
        {
          name: 'two Transfer-Encoding',
          raw: chatRequest(
            svc,
            'Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n',
            `${CHAT.length.toString(16)}\r\n${CHAT}\r\n0\r\n\r\n`,
          ),
          later: smuggled,
          param: 'transfer-encoding',
        },
        {
          name: 'two Authorization, the valid one last',
          raw: me(`Host: x\r\nAuthorization: Bearer gk_pat_nope\r\nAuthorization: Bearer ${svc.pat}\r\n`),
          param: 'authorization',
        },
        {
          name: 'two Authorization, the valid one first',
          raw: me(`Host: x\r\nAuthorization: Bearer ${svc.pat}\r\nAuthorization: Bearer gk_pat_nope\r\n`),
          param: 'authorization',
        },
        {
          name: 'two X-API-Key',
          raw: me(`Host: x\r\nX-API-Key: gk_pat_nope\r\nx-api-key: ${svc.pat}\r\n`),
          param: 'x-api-key',
        },
        {
          name: 'two Host',
          raw: me(`Host: x\r\nHost: y\r\nAuthorization: Bearer ${svc.pat}\r\n`),
          param: 'host',
        },
        {
          name: 'two X-Agent-Id',
          raw: me(`Host: x\r\nAuthorization: Bearer ${svc.pat}\r\nX-Agent-Id: a\r\nX-Agent-Id: b\r\n`),
          param: 'x-agent-id',
        },
        // The engines read these differently (node kept the first, uWS the last): refused by both.
        {
          name: 'two Content-Type',
          raw: chatRequest(svc, `Content-Type: application/xml\r\nContent-Length: ${CHAT.length}\r\n`, CHAT),
          param: 'content-type',
        },
        {
          name: 'two Content-Encoding',
          raw: chatRequest(
            svc,
            `Content-Encoding: gzip\r\nContent-Encoding: identity\r\nContent-Length: ${CHAT.length}\r\n`,
            CHAT,
          ),
          param: 'content-encoding',
        },
      ];
      for (const { name, raw, later, param } of cases) {
        const { statuses, head, body } = answers(await exchange(svc.url, raw, later));
        t.same(statuses, [400], `${name}: one answer, a 400`);
        t.match(head, /\r\nConnection: close/i, `${name}: the connection is closed`);
        t.match(body, { type: 'error', error: { code: 'invalid_request' } }, `${name}: the error shape`);
        // node:http's parser refuses two Transfer-Encoding lines itself, as malformed.
        if (engine === 'node' && param === 'transfer-encoding') continue;
        t.equal(body?.error?.param, param, `${name}: names ${param}`);
      }

      // The attack proper: the smuggled call in the same write as the request that hides it.
      for (const [name, head] of [
        [
          'Content-Length',
          `Content-Length: ${CHAT.length}\r\nContent-Length: ${CHAT.length + smuggled.length}\r\n`,
        ],
        ['Transfer-Encoding', 'Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n'],
      ] as const) {
        const body = name === 'Content-Length' ? CHAT : `${CHAT.length.toString(16)}\r\n${CHAT}\r\n0\r\n\r\n`;
        const { statuses } = answers(await exchange(svc.url, chatRequest(svc, head, body) + smuggled));
        // uWS closes a connection on which a request follows one still unanswered (docs/ops.md,
        // "Repeated headers"), before the 400 is written; node:http answers it.
        t.same(statuses, engine === 'uws' ? [] : [400], `two ${name}, one write: no second answer`);
      }
      t.equal(await llmCalls(svc), calls, 'no call ran, neither refused nor smuggled');

      // The same requests with each header once are served.
      const once = answers(
        await exchange(
          svc.url,
          chatRequest(svc, `Content-Length: ${CHAT.length}\r\nConnection: close\r\n`, CHAT),
        ),
      );
      t.same(once.statuses, [200], 'one Content-Length: served');
      const single = answers(
        await exchange(
          svc.url,
          me(`Host: x\r\nAuthorization: Bearer ${svc.pat}\r\nX-Agent-Id: a\r\nConnection: close\r\n`),
        ),
      );
      t.same(single.statuses, [200], 'one of each: served');

      // A list header sent twice is read as one list, as HTTP says, by both engines: a flag that
      // tightens the policy is never dropped (uWS kept only the last line).
      const flagged = answers(
        await exchange(
          svc.url,
          chatRequest(
            svc,
            `X-Service-Flags: pii=block\r\nX-Service-Flags: mode=enforce\r\nContent-Length: ${
              CHAT.replace('hello', 'mail me at jane.doe@example.com').length
            }\r\nConnection: close\r\n`,
            CHAT.replace('hello', 'mail me at jane.doe@example.com'),
          ),
        ),
      );
      t.same(flagged.statuses, [200], 'two X-Service-Flags: served');
      t.equal(flagged.body?.service?.blocked, true, 'the pii=block of the first line holds');
    },
  );
}
