import type { LookupAddress } from 'node:dns';
import { createServer } from 'node:http';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import t from 'tap';
import { type ConfigError, loadConfig } from '../../src/config/index.js';
import { EgressPolicy, isForbiddenAddress } from '../../src/export/ssrf.js';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { startService, type TestService } from '../helpers/service.js';

// What org admins configure (tool URLs, provider base URLs) reaches public addresses only, and
// the address checked is the address connected: a name that answers a public address to the
// check and a private one to the connection (DNS rebinding), or whose record changes after it was
// configured, reaches nothing (egress review #1, #2, #5, #6, #10).

t.test(
  'the IPv6 forms that embed an IPv4 address, and the other special ranges, are forbidden',
  async (t) => {
    for (const a of [
      '::7f00:1', // IPv4-compatible 127.0.0.1
      '::a9fe:a9fe', // IPv4-compatible 169.254.169.254
      '::127.0.0.1',
      '::ffff:0:7f00:1', // IPv4-translated (SIIT)
      '64:ff9b:1::7f00:1', // local-use NAT64
      '64:ff9b::a9fe:a9fe', // NAT64
      '2002:7f00:1::', // 6to4
      '2001:0:4136:e378:8000:63bf:80ff:fffe', // Teredo
      'fec0::1', // site-local
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '0:0:0:0:0:ffff:a9fe:a9fe',
      '::1',
      'fd00:ec2::254',
      '10.1.2.3',
      '169.254.169.254',
      'not-an-address',
    ])
      t.ok(isForbiddenAddress(a), `${a} is forbidden`);
    for (const a of ['93.184.216.34', '::ffff:93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946'])
      t.notOk(isForbiddenAddress(a), `${a} is public`);
  },
);

t.test('SERVICE_EGRESS_DENY adds ranges; a value that is not one is refused at start-up', async (t) => {
  const policy = new EgressPolicy([], ['2600:1f18::/32', '93.184.216.0/24', '8.8.8.8']);
  t.ok(policy.forbidden('2600:1f18::1'), 'an IPv6 cluster range');
  t.ok(policy.forbidden('93.184.216.34'));
  t.ok(policy.forbidden('::ffff:93.184.216.34'), 'also as an IPv4-mapped address');
  t.ok(policy.forbidden('8.8.8.8'), 'a single address');
  t.notOk(policy.forbidden('8.8.4.4'));
  t.notOk(new EgressPolicy().forbidden('2600:1f18::1'), 'not without the list');
  t.match(await policy.check('http://[2600:1f18::1]/v1'), /forbidden address/);

  const c = loadConfig({ SERVICE_EGRESS_DENY: '10.100.0.0/16, 2600:1f18::/32' });
  t.same(c.egressDeny, ['10.100.0.0/16', '2600:1f18::/32']);
  for (const bad of ['10.0.0.0/33', 'example.com', '10.0.0.0/8/1', '2600::/129', '10.0.0.0/x']) {
    const err = t.throws(() => loadConfig({ SERVICE_EGRESS_DENY: bad }), bad) as ConfigError;
    t.same(
      err.problems?.map((p) => p.path),
      ['SERVICE_EGRESS_DENY'],
    );
  }
});

t.test('a refusal does not say which address the name resolved to', async (t) => {
  const policy = new EgressPolicy([], [], async () => ['10.20.30.40']);
  const problem = await policy.check('http://billing.internal:5432/v1');
  t.match(problem, /forbidden address/);
  t.notMatch(problem, /10\.20\.30\.40/, 'no internal address in what the caller reads');
  t.match(problem, /SERVICE_EGRESS_ALLOW=billing\.internal:5432/);
  const missing = await new EgressPolicy([], [], async () => {
    throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
  }).check('http://billing.internal:5432/v1');
  t.equal(
    missing,
    problem,
    'a name that does not resolve gets the same answer: no oracle for which names exist',
  );
  t.equal(
    await new EgressPolicy(['billing.internal:5432'], [], async () => ['10.20.30.40']).check(
      'http://billing.internal:5432/v1',
    ),
    undefined,
  );
});

/**
 * DNS as an attacker's name server answers it (TTL 0): `*.rebind.test` is public to the lookup a
 * check makes (dns.promises) and 127.0.0.1 to the one a connection makes (dns.lookup). Patched
 * on the modules' objects, so node:net and undici see it too.
 */
function rebindingDns(t: { teardown(fn: () => void): void }): void {
  const require = createRequire(import.meta.url);
  const dns = require('node:dns') as typeof import('node:dns');
  const { lookup } = dns;
  const promisesLookup = dns.promises.lookup;
  const ours = (host: string): boolean => host.endsWith('.rebind.test');
  dns.promises.lookup = (async (host: string, opts?: unknown) => {
    if (!ours(host)) return (promisesLookup as (h: string, o?: unknown) => Promise<unknown>)(host, opts);
    const public_: LookupAddress = { address: '93.184.216.34', family: 4 };
    return (opts as { all?: boolean } | undefined)?.all ? [public_] : public_;
  }) as typeof dns.promises.lookup;
  dns.lookup = ((host: string, opts: unknown, cb?: unknown) => {
    const callback = (typeof opts === 'function' ? opts : cb) as (...a: unknown[]) => void;
    if (!ours(host)) return (lookup as (...a: unknown[]) => void)(host, opts, cb);
    const all = typeof opts === 'object' && opts !== null && (opts as { all?: boolean }).all;
    process.nextTick(() =>
      all ? callback(null, [{ address: '127.0.0.1', family: 4 }]) : callback(null, '127.0.0.1', 4),
    );
  }) as typeof dns.lookup;
  syncBuiltinESMExports();
  t.teardown(() => {
    dns.lookup = lookup;
    dns.promises.lookup = promisesLookup;
    syncBuiltinESMExports();
  });
}

/** An internal service on 127.0.0.1 that hands out credentials; counts the requests it got. */
async function internalService(t: { teardown(fn: () => Promise<void>): void }) {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(req.url ?? '');
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ AccessKeyId: 'ASIA-INTERNAL', object: 'list', data: [], model: 'x', usage: {} }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { hits, port: (server.address() as AddressInfo).port };
}

async function service(t: { teardown(fn: () => Promise<void>): void }, env: Record<string, string> = {}) {
  const svc = await startService({ env });
  t.teardown(() => svc.close());
  return svc;
}

async function executeTool(svc: TestService, name: string): Promise<{ status: number; body: any }> {
  const g = await svc.call('/v1/tools/govern', {
    token: svc.agentKey,
    body: { name, arguments: { q: 'x' } },
  });
  if (g.body.outcome !== 'allow') throw new Error(JSON.stringify(g.body));
  return svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate: g.body.mandate, name, arguments: { q: 'x' } },
  });
}

t.test('a tool whose name rebinds to an internal address is refused as it connects', async (t) => {
  rebindingDns(t);
  const internal = await internalService(t);
  const svc = await service(t);
  const url = `http://meta.rebind.test:${internal.port}/latest/meta-data/iam/security-credentials/node`;
  const put = await svc.call('/api/settings/tools', {
    method: 'PUT',
    token: svc.pat,
    body: { tools: [{ name: 'lookup', url, method: 'GET' }] },
  });
  t.equal(put.status, 200, 'the name is public when it is configured');
  for (let i = 0; i < 3; i++) {
    const res = await executeTool(svc, 'lookup');
    t.equal(res.status, 502, `call ${i + 1} is refused`);
    t.equal(res.body.error?.code, 'upstream_error');
    t.match(res.body.error?.message, /forbidden address/);
    t.notMatch(JSON.stringify(res.body), /ASIA-INTERNAL|127\.0\.0\.1/);
  }
  t.same(internal.hits, [], 'the internal service got no request');
});

t.test("a provider whose base_url's record changed to an internal address reaches nothing", async (t) => {
  rebindingDns(t);
  const internal = await internalService(t);
  const svc = await service(t);
  const put = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token: svc.pat,
    body: {
      providers: [
        {
          name: 'openai',
          api_key: 'sk-test-0000000000000001',
          base_url: `http://llm.rebind.test:${internal.port}/v1`,
        },
      ],
    },
  });
  t.equal(put.status, 200, 'the name is public when it is configured');
  const client = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  await t.rejects(
    client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    { status: 502, message: /forbidden address/ },
    'chat is refused',
  );
  await t.rejects(
    client.embeddings.create({ model: 'text-embedding-3-small', input: 'hi' }),
    { status: 502, message: /forbidden address/ },
    'embeddings too',
  );
  t.same(internal.hits, [], 'the internal service got no request');
});

t.test('an allowed host:port connects as it is; another org keeps its own connections', async (t) => {
  const upstream = await startMockUpstream();
  t.teardown(() => upstream.close());
  const svc = await service(t, {
    SERVICE_EGRESS_ALLOW: upstream.hostPort,
    SERVICE_UPSTREAM_CONNECTIONS: '1',
  });
  const slow = await svc.call('/api/orgs', { token: svc.pat, body: { name: 'slow-org' } });
  t.equal(slow.status, 201);
  const providers = {
    providers: [{ name: 'openai', api_key: 'sk-test-0000000000000001', base_url: `${upstream.url}/v1` }],
  };
  t.equal(
    (await svc.call('/api/settings/providers', { method: 'PUT', token: svc.pat, body: providers })).status,
    200,
  );
  t.equal(
    (
      await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: svc.pat,
        body: { ...providers, org_id: slow.body.org_id },
      })
    ).status,
    200,
  );
  const agent = await svc.call('/api/agents/onboard', {
    token: svc.pat,
    body: { agent_id: 'slow-agent', org_id: slow.body.org_id },
  });
  t.equal(agent.status, 201, JSON.stringify(agent.body));
  const body = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] };
  // The slow org's call holds its only connection (one per pool) until the gate opens.
  let open = (): void => {};
  upstream.behaviour = { kind: 'gate', open: new Promise<void>((r) => (open = r)) };
  const held = svc.call('/v1/chat/completions', { token: agent.body.api_key.api_key, body });
  while (upstream.requests.length === 0) await new Promise((r) => setTimeout(r, 10));
  upstream.behaviour = { kind: 'normal' };
  let opened = false;
  const timer = setTimeout(() => {
    opened = true;
    open();
  }, 10_000);
  const other = await svc.call('/v1/chat/completions', { token: svc.agentKey, body });
  t.equal(other.status, 200, 'the allowed loopback upstream is reached');
  t.notOk(opened, "the other org's call did not wait for the slow org's connection");
  clearTimeout(timer);
  open();
  t.equal((await held).status, 200);
});
