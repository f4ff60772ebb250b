import t from 'tap';
import { HOP_HEADER, HOP_ID } from '../../src/http/hop.js';
import { ENGINES, serviceOnMockUpstream } from '../helpers/service.js';

// Egress review #3: every request govgate sends to a provider carries x-govgate-hop, and every
// request that arrives with it is refused before any route runs (docs/ops.md, "Provider loops").

const CHAT = { model: 'gpt-test', messages: [{ role: 'user', content: 'hello' }] };
const MESSAGES = { model: 'claude-test', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] };

/** Every /v1 route (and one /api route), with a body that would be served without the header. */
const ROUTES: readonly { method: string; path: string; body?: unknown }[] = [
  { method: 'POST', path: '/v1/chat/completions', body: CHAT },
  { method: 'POST', path: '/v1/messages', body: MESSAGES },
  { method: 'POST', path: '/v1/embeddings', body: { model: 'text-embedding-test', input: 'hello' } },
  { method: 'GET', path: '/v1/models' },
  { method: 'POST', path: '/v1/govern', body: { type: 'llm_call' } },
  { method: 'POST', path: '/v1/tools/govern', body: { tool: 'crm', arguments: {} } },
  { method: 'POST', path: '/v1/govern/approve', body: {} },
  { method: 'POST', path: '/v1/govern/execution', body: {} },
  { method: 'POST', path: '/v1/tools/execute', body: {} },
  { method: 'POST', path: '/v1/tokens/verify', body: {} },
  { method: 'GET', path: '/v1/mandates/revoked' },
  { method: 'GET', path: '/v1/me/approvals' },
  { method: 'GET', path: '/v1/me/approvals/apr_x' },
  { method: 'POST', path: '/v1/me/approvals/apr_x/decide', body: {} },
  { method: 'POST', path: '/v1/me/approvals/apr_x/cancel', body: {} },
  { method: 'POST', path: '/v1/me/approvals/apr_x/revoke', body: {} },
  { method: 'GET', path: '/api/me' },
];

for (const engine of ENGINES) {
  t.test(`a request carrying ${HOP_HEADER} is refused on every route (${engine})`, async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t, { engine });
    const before = await svc.call('/api/audit?limit=1000', { token: svc.pat });
    upstream.requests.length = 0;
    for (const { method, path, body } of ROUTES) {
      for (const [value, whose] of [
        [HOP_ID, 'by this govgate process'],
        ['another-deployment', 'by a govgate '],
      ] as const) {
        const res = await svc.call(path, {
          method,
          token: svc.agentKey,
          body,
          headers: { [HOP_HEADER]: value },
        });
        t.equal(res.status, 508, `${method} ${path} (${value})`);
        t.match(
          res.body,
          { error: { code: 'loop_detected', type: 'api_error', param: HOP_HEADER } },
          `${method} ${path}: the contract's error`,
        );
        t.ok(String(res.body.error?.message).includes(whose), `${method} ${path}: says whose hop it was`);
      }
    }
    t.equal(upstream.requests.length, 0, 'no provider was called');
    const after = await svc.call('/api/audit?limit=1000', { token: svc.pat });
    t.equal(after.body.data.length, before.body.data.length, 'no audit event was written');
    const served = await svc.call('/v1/chat/completions', { token: svc.agentKey, body: CHAT });
    t.equal(served.status, 200, 'the same call without the header is served');
  });
}

t.test(`every request govgate sends to a provider carries ${HOP_HEADER}`, async (t) => {
  const { svc, upstream } = await serviceOnMockUpstream(t);
  const calls: { path: string; body?: unknown; headers?: Record<string, string> }[] = [
    { path: '/v1/chat/completions', body: CHAT },
    { path: '/v1/chat/completions', body: Object.assign({ stream: true }, CHAT) },
    { path: '/v1/chat/completions', body: Object.assign({}, CHAT, { model: 'claude-test' }) },
    { path: '/v1/chat/completions', body: Object.assign({}, CHAT, { model: 'claude-test', stream: true }) },
    { path: '/v1/messages', body: MESSAGES },
    { path: '/v1/messages', body: Object.assign({ stream: true }, MESSAGES) },
    { path: '/v1/messages', body: MESSAGES, headers: { 'anthropic-beta': 'tools-2024-04-04' } },
    { path: '/v1/messages', body: Object.assign({}, MESSAGES, { model: 'gpt-test' }) },
    { path: '/v1/embeddings', body: { model: 'text-embedding-test', input: 'hello' } },
    { path: '/v1/models' },
  ];
  for (const { path, body, headers } of calls) {
    const res = await svc.call(path, { token: svc.agentKey, body, headers });
    t.equal(res.status, 200, `${path} ${JSON.stringify(body ?? {}).slice(0, 60)}`);
  }
  const seen = new Set(upstream.requests.map((r) => `${r.method} ${r.path}`));
  t.same(
    [...seen].sort(),
    ['GET /v1/models', 'POST /v1/chat/completions', 'POST /v1/embeddings', 'POST /v1/messages'],
    'chat, messages, embeddings and both providers` model lists reached the upstream',
  );
  t.ok(upstream.requests.filter((r) => r.path === '/v1/models').length >= 2, 'both model lists');
  for (const r of upstream.requests) t.equal(r.headers[HOP_HEADER], HOP_ID, `${r.method} ${r.path}`);
});
