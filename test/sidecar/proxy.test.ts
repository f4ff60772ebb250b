import { request as httpRequest } from 'node:http';
import { connect as connectSocket } from 'node:net';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { ProxyAgent, fetch as undiciFetch } from 'undici';
import { serviceOnMockUpstream } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

const basic = (key: string): string => `Basic ${Buffer.from(`agent:${key}`).toString('base64')}`;

t.test('agents that send their traffic through HTTPS_PROXY: the sidecar governs it', async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const { sidecarId, token } = await createSidecarToken(svc, svc.pat);
  const sc = await startTestSidecar({
    controlUrl: svc.url,
    token,
    env: { SERVICE_EGRESS_ALLOW: upstream.hostPort },
  });
  t.teardown(() => sc.close());
  const proxyUrl = `http://127.0.0.1:${sc.sidecar.proxyPort}`;
  /** A fetch that goes through the sidecar's proxy as `key`, trusting the proxy CA. */
  const proxied = (key: string | undefined) => {
    const agent = new ProxyAgent({
      uri: proxyUrl,
      ...(key === undefined ? {} : { token: basic(key) }),
      requestTls: { ca: sc.sidecar.proxyCaPem },
    });
    t.teardown(() => agent.close());
    return ((url: string, init: object) =>
      undiciFetch(url, { ...init, dispatcher: agent })) as unknown as typeof fetch;
  };

  t.test(
    'the openai client, unchanged but for its proxy: governed, recorded, the org key upstream',
    async (t) => {
      // The agent's SDK talks to api.openai.com with its own key; neither leaves the sidecar.
      const client = new OpenAI({ apiKey: 'sk-the-agents-own', maxRetries: 0, fetch: proxied(svc.agentKey) });
      upstream.requests.length = 0;
      const res = await client.chat.completions.create({
        model: 'gpt-test',
        messages: [{ role: 'user', content: 'through the proxy' }],
      });
      t.equal(res.choices[0]?.message.content, 'upstream-openai: through the proxy');
      const seen = upstream.requests.at(-1);
      t.equal(
        seen?.headers.authorization,
        'Bearer sk-test-openai-0001',
        "the org's provider key, not the agent's",
      );
      const service = (res as unknown as { service: { audit_url: string; blocked: boolean } }).service;
      t.equal(service.blocked, false);
      const pipeline = service.audit_url.split('/').at(-1) as string;
      await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'shipped');
      const events = await svc.call(`/api/audit/pipeline/${pipeline}`, { token: svc.pat });
      t.equal(events.body.data[0]?.event_type, 'llm_call');
      t.equal(events.body.data[0]?.agent_id, 'default-agent');
      t.equal(events.body.data[0]?.origin.sidecar_id, sidecarId);

      const stream = await client.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'stream it' }],
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      t.equal(text, 'upstream-openai: stream it');
    },
  );

  t.test('the anthropic client the same way', async (t) => {
    const client = new Anthropic({
      apiKey: 'sk-ant-the-agents-own',
      maxRetries: 0,
      fetch: proxied(svc.agentKey),
    });
    const msg = await client.messages.create({
      model: 'claude-test-1',
      max_tokens: 20,
      messages: [{ role: 'user', content: 'hi' }],
    });
    t.equal(msg.content[0]?.type === 'text' ? msg.content[0].text : '', 'upstream-anthropic: hi');
    t.equal(upstream.requests.at(-1)?.headers['x-api-key'], 'sk-ant-test-0002');
  });

  t.test('refused: no credential, an unknown one, another host', async (t) => {
    const none = new OpenAI({ apiKey: 'x', maxRetries: 0, fetch: proxied(undefined) });
    await t.rejects(none.models.list(), 'no proxy credential: the tunnel is refused (407)');
    const wrong = new OpenAI({ apiKey: 'x', maxRetries: 0, fetch: proxied(`gk_agent_${'Z'.repeat(40)}`) });
    await t.rejects(wrong.models.list());
    const elsewhere = proxied(svc.agentKey);
    await t.rejects(
      elsewhere('https://example.com/', {}),
      'a tunnel to a host that is no provider of the org',
    );
    // A refusal has the error body every other answer has (docs/errors.md), X-Request-Id included.
    const raw = (request: string): Promise<{ status: number; head: string; body: any }> =>
      new Promise((resolve, reject) => {
        const socket = connectSocket(sc.sidecar.proxyPort, '127.0.0.1', () => socket.write(request));
        let got = '';
        socket.setEncoding('utf8');
        socket.on('data', (d: string) => {
          got += d;
        });
        socket.on('close', () => {
          const [head = '', body = ''] = got.split('\r\n\r\n');
          resolve({
            status: Number(head.split(' ')[1]),
            head,
            body: body === '' ? undefined : JSON.parse(body),
          });
        });
        socket.on('error', reject);
      });
    const refusals = [
      {
        what: 'a tunnel to another host',
        request: `CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: ${basic(svc.agentKey)}\r\n\r\n`,
        status: 403,
        code: 'forbidden',
      },
      {
        what: 'a tunnel without a credential',
        request: 'CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n',
        status: 407,
        code: 'proxy_auth_required',
      },
      {
        what: 'plain HTTP to another host',
        request: `GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: ${basic(svc.agentKey)}\r\nConnection: close\r\n\r\n`,
        status: 403,
        code: 'forbidden',
      },
      {
        what: 'plain HTTP without a credential',
        request:
          'GET http://api.openai.com/v1/models HTTP/1.1\r\nHost: api.openai.com\r\nConnection: close\r\n\r\n',
        status: 407,
        code: 'proxy_auth_required',
      },
      {
        what: 'not a proxy request',
        request: 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
        status: 400,
        code: 'invalid_request',
      },
    ];
    for (const { what, request, status, code } of refusals) {
      const res = await raw(request);
      t.equal(res.status, status, what);
      t.match(
        res.body,
        { type: 'error', error: { code, type: String, message: String, request_id: String } },
        what,
      );
      t.match(
        res.head,
        new RegExp(`\r\nx-request-id: ${res.body?.error?.request_id}`, 'i'),
        `${what}: X-Request-Id`,
      );
      if (status === 407) t.match(res.head, /\r\nproxy-authenticate: Basic realm="govgate"/i, what);
    }
    // Counted as the gateway's refusals are (route `proxy`), so a scrape shows an agent refused.
    const metrics = String((await sc.call('/api/metrics')).body);
    const count = (method: string, status: number): number =>
      Number(
        new RegExp(
          `\ngovgate_http_requests_total\\{route="proxy",method="${method}",status="${status}"\\} (\\d+)\n`,
        ).exec(metrics)?.[1] ?? 0,
      );
    t.ok(count('CONNECT', 403) >= 2, 'tunnels to another host are counted');
    t.ok(count('CONNECT', 407) >= 3, 'tunnels without a valid credential are counted');
    t.equal(count('GET', 403), 1, 'plain HTTP to another host');
    t.equal(count('GET', 407), 1, 'plain HTTP without a credential');
    t.equal(count('GET', 400), 1, 'not a proxy request');
  });

  t.test('plain HTTP through the proxy (absolute form) is governed too', async (t) => {
    const body = JSON.stringify({ model: 'gpt-test', messages: [{ role: 'user', content: 'plain' }] });
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({
        host: '127.0.0.1',
        port: sc.sidecar.proxyPort,
        method: 'POST',
        path: 'http://api.openai.com/v1/chat/completions',
        headers: {
          'content-type': 'application/json',
          'proxy-authorization': basic(svc.agentKey),
          authorization: 'Bearer sk-the-agents-own',
        },
      });
      req.on('response', (r) => {
        let text = '';
        r.on('data', (c) => {
          text += c;
        });
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body: text }));
      });
      req.on('error', reject);
      req.end(body);
    });
    t.equal(res.status, 200, res.body);
    t.equal(JSON.parse(res.body).choices[0].message.content, 'upstream-openai: plain');
  });
});
