import { createServer } from 'node:net';
import OpenAI from 'openai';
import t from 'tap';
import { callHttp } from '../helpers/http.js';
import { ENGINES, startService, type TestService } from '../helpers/service.js';

// Egress review #3: an org admin pointed the openai provider at govgate itself, with one of the
// org's agent keys as api_key; one chat call then recursed until every upstream connection was
// held, and went on after its client left (~1,300 audit events/s).

/** A port free now on 127.0.0.1: the service must be allowed egress to itself before it starts. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

async function putOpenai(
  url: string,
  token: string,
  baseUrl: string,
  apiKey = 'placeholder-key-0001',
): Promise<{ status: number; body: any }> {
  const res = await callHttp(`${url}/api/settings/providers`, {
    method: 'PUT',
    token,
    body: JSON.stringify({
      providers: [{ name: 'openai', api_key: apiKey, base_url: baseUrl, models: ['gpt-*'] }],
    }),
  });
  return { status: res.status, body: res.body as any };
}

/** The org's llm_call events. */
async function llmCalls(url: string, pat: string): Promise<number> {
  const res = await callHttp(`${url}/api/audit?category=llm_call&limit=1000`, { token: pat });
  return ((res.body as { data: unknown[] }).data ?? []).length;
}

t.test("PUT /api/settings/providers refuses the service's own base URL as a base_url", async (t) => {
  const port = await freePort();
  const svc: TestService = await startService({
    env: { SERVICE_PORT: String(port), SERVICE_EGRESS_ALLOW: `127.0.0.1:${port}` },
  });
  t.teardown(() => svc.close());
  for (const base of [`${svc.url}/v1`, `${svc.url}/`, `${svc.url.toUpperCase()}/proxy/v1`]) {
    const res = await putOpenai(svc.url, svc.pat, base);
    t.equal(res.status, 400, base);
    t.match(res.body.error, { code: 'invalid_request', param: 'providers[0].base_url' }, base);
    t.match(res.body.error.message, /govgate's own address/, base);
  }
  const providers = await callHttp(`${svc.url}/api/settings/providers`, { token: svc.pat });
  t.notOk(
    (providers.body as { providers: { name: string }[] }).providers.some((p) => p.name === 'openai'),
    'nothing was stored',
  );
});

for (const engine of ENGINES) {
  t.test(`a provider that leads back to govgate ends at its first hop (${engine})`, async (t) => {
    const port = await freePort();
    // Its public address is a name the PUT check knows; the admin reaches it by another one (as
    // through a load balancer), which only the hop header can tell.
    const svc = await startService({
      engine,
      env: {
        SERVICE_PORT: String(port),
        SERVICE_EGRESS_ALLOW: `127.0.0.1:${port}`,
        SERVICE_PUBLIC_URL: 'http://gateway.test',
        SERVICE_UPSTREAM_CONNECTIONS: '8',
      },
    });
    t.teardown(() => svc.close());
    const url = svc.service.listenUrl;
    const own = await putOpenai(url, svc.pat, 'http://gateway.test/v1');
    t.equal(own.status, 400, 'the public address itself is refused');
    t.match(own.body.error, { param: 'providers[0].base_url' });
    // The agent's own key as the provider key: each hop is a governed call of the same org.
    const set = await putOpenai(url, svc.pat, `${url}/v1`, svc.agentKey);
    t.equal(set.status, 200, 'the listen address is allowed (SERVICE_EGRESS_ALLOW)');

    const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${url}/v1`, maxRetries: 0, timeout: 10_000 });
    const started = performance.now();
    const err = await client.chat.completions
      .create({ model: 'gpt-loop', messages: [{ role: 'user', content: 'hello' }] })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    const ms = performance.now() - started;
    t.ok(err instanceof OpenAI.APIError, 'the call fails');
    const apiErr = err as InstanceType<typeof OpenAI.APIError>;
    t.equal(apiErr.status, 502, 'with the provider failure');
    t.equal(apiErr.code, 'upstream_error');
    t.match(apiErr.message, /failed \(508\).*x-govgate-hop.*loop/, 'which says why');
    t.ok(ms < 3_000, `promptly (${Math.round(ms)} ms)`);

    const stream = await client.chat.completions
      .create({ model: 'gpt-loop', stream: true, messages: [{ role: 'user', content: 'hello' }] })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    t.equal((stream as { status?: number } | undefined)?.status, 502, 'a stream fails the same way');

    // One llm_call event per call made, none for the refused hops, and nothing more comes.
    t.equal(await llmCalls(url, svc.pat), 2, 'two calls, two llm_call events');
    await new Promise((r) => setTimeout(r, 500));
    t.equal(await llmCalls(url, svc.pat), 2, 'and no more half a second later');
    const metrics = await callHttp(`${url}/api/metrics`, {});
    t.match(
      metrics.text,
      /govgate_http_requests_total\{route="\/v1\/chat\/completions",method="POST",status="508"\} 2\n/,
      'each call made one hop, refused',
    );
  });
}
