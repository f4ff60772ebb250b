import OpenAI from 'openai';
import t from 'tap';
import { callHttp } from '../helpers/http.js';
import { ENGINES, startService } from '../helpers/service.js';

/** The value of one sample line (`name{labels} value`) in a Prometheus text exposition. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    const m = /^(?:\{([^}]*)\})? (\S+)$/.exec(rest);
    if (!m) continue;
    const got = new Map<string, string>();
    for (const pair of (m[1] ?? '').split(',').filter(Boolean)) {
      const [k, v] = pair.split('=') as [string, string];
      got.set(k, v.replace(/^"|"$/g, ''));
    }
    if (Object.entries(labels).every(([k, v]) => got.get(k) === v)) return Number(m[2]);
  }
  return undefined;
}

for (const engine of ENGINES) {
  t.test(`/api/metrics (${engine})`, async (t) => {
    const metricsToken = 'metrics-scrape-token-5150';
    const svc = await startService({ engine, env: { SERVICE_METRICS_TOKEN: metricsToken } });
    t.teardown(() => svc.close());
    const scrape = (token?: string) =>
      callHttp(`${svc.url}/api/metrics`, token === undefined ? {} : { token });

    t.test('needs the metrics token when one is configured', async (t) => {
      for (const token of [undefined, 'metrics-scrape-token-5151', `${metricsToken}x`, svc.pat]) {
        const res = await scrape(token);
        t.equal(res.status, 401, `token ${token ?? '(none)'}`);
        t.notOk(res.text.includes(metricsToken), 'the token is never echoed');
      }
      t.equal((await scrape(metricsToken)).status, 200);
    });

    t.test('counts requests, phases, upstream calls and streams', async (t) => {
      const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
      const messages = [{ role: 'user' as const, content: 'count me' }];
      await client.chat.completions.create({ model: 'mock-echo', messages });
      await client.chat.completions.create({ model: 'mock-echo', messages });
      const stream = await client.chat.completions.create({ model: 'mock-echo', messages, stream: true });
      for await (const _ of stream);
      await callHttp(`${svc.url}/v1/nowhere`, { token: svc.agentKey });

      const res = await scrape(metricsToken);
      t.equal(res.status, 200);
      t.match(res.headers.get('content-type'), /^text\/plain/);
      const text = res.text;
      const route = '/v1/chat/completions';
      t.equal(sample(text, 'govgate_http_requests_total', { route, method: 'POST', status: '200' }), 3);
      t.equal(sample(text, 'govgate_http_request_duration_seconds_count', { route }), 3);
      t.ok((sample(text, 'govgate_http_requests_total', { status: '404' }) ?? 0) >= 1, 'a 404 is counted');
      t.equal(sample(text, 'govgate_phase_duration_seconds_count', { phase: 'govern' }), 3);
      t.equal(sample(text, 'govgate_phase_duration_seconds_count', { phase: 'audit' }), 3, 'streams too');
      t.equal(
        sample(text, 'govgate_upstream_duration_seconds_count', { provider: 'mock', outcome: 'ok' }),
        3,
      );
      const le = sample(text, 'govgate_upstream_duration_seconds_bucket', {
        provider: 'mock',
        outcome: 'ok',
        le: '+Inf',
      });
      t.equal(le, 3, 'histogram buckets end at +Inf with every call');
      t.equal(sample(text, 'govgate_open_streams'), 0, 'the stream is closed');
      t.ok((sample(text, 'govgate_process_cpu_user_seconds_total') ?? 0) > 0, 'process metrics');
      t.notOk(text.includes(svc.agentKey), 'no credential in the metrics');
    });
  });
}
