import { connect as connectSocket } from 'node:net';
import t from 'tap';
import { UpstreamPools } from '../../src/providers/upstream.js';
import type { ProviderHost } from '../../src/sidecar/proxy.js';
import { RemoteSnapshot } from '../../src/sidecar/snapshot.js';
import type { SnapshotProvider } from '../../src/snapshot/wire.js';
import { createLogger } from '../../src/util/log.js';
import { bareProxy, basic, KEY, openTunnel, parsed, untilClosed } from '../helpers/proxy.js';

/** The provider hosts a sidecar builds from a snapshot with `providers` (what its proxy is given). */
function hostsFrom(providers: SnapshotProvider[]): ReadonlyMap<string, ProviderHost> {
  const snapshot = new RemoteSnapshot(new UpstreamPools({ timeoutMs: 1_000, connections: 1, sweepMs: 0 }));
  snapshot.apply(
    {
      v: 1,
      org_id: 'org_prefixes',
      sidecar_id: 'sc_prefixes',
      issuer: 'http://control.invalid',
      generated_at: new Date(0).toISOString(),
      agents: [],
      credentials: [],
      providers,
      policies: [],
    },
    '"prefixes"',
  );
  return snapshot.providerHosts();
}

/** A plain-HTTP call through the proxy to `target` (absolute form); its answer. */
async function plain(port: number, target: string): Promise<{ status: number; head: string; body: any }> {
  const host = new URL(target).host;
  const socket = connectSocket(port, '127.0.0.1', () =>
    socket.write(
      `GET ${target} HTTP/1.1\r\nHost: ${host}\r\nProxy-Authorization: ${basic(KEY)}\r\nConnection: close\r\n\r\n`,
    ),
  );
  return parsed(await untilClosed(socket));
}

// Two providers behind one host (a company's LLM gateway), told apart by their path prefix.
const SHARED = hostsFrom([
  { name: 'openai', base_url: 'https://llm.example/openai/v1', models: ['gpt-*'], api_key: 'sk-o' },
  { name: 'anthropic', base_url: 'https://llm.example/anthropic', models: ['claude-*'], api_key: 'sk-a' },
]);

t.test('two providers on one host: each path has its own prefix cut', async (t) => {
  const lines: any[] = [];
  const logger = createLogger('debug', (line) => lines.push(JSON.parse(line)));
  const { proxy, caPem, handled } = await bareProxy(t, { providerHosts: () => SHARED, logger });
  for (const [path, served] of [
    ['/openai/v1/chat/completions', '/v1/chat/completions'],
    ['/anthropic/v1/messages', '/v1/messages'],
    ['/openai/v1/models?limit=2', '/v1/models'],
  ] as const) {
    const res = await plain(proxy.port, `http://llm.example${path}`);
    t.equal(res.status, 200, `plain HTTP ${path}`);
    t.same(res.body, { path: served }, `plain HTTP ${path}`);
    const tls = await openTunnel(proxy.port, caPem, 'llm.example');
    tls.write(`GET ${path} HTTP/1.1\r\nHost: llm.example\r\nConnection: close\r\n\r\n`);
    const inTunnel = parsed(await untilClosed(tls));
    t.equal(inTunnel.status, 200, `in a tunnel ${path}`);
    t.same(inTunnel.body, { path: served }, `in a tunnel ${path}`);
  }
  t.equal(handled(), 6);

  // A path under no provider's prefix reaches no provider: the gateway routes would have served
  // `/v1/messages` as it came, to whichever provider the route names, on a host that has none at
  // that path.
  for (const path of [
    '/v1/messages',
    '/openaix/v1/chat/completions',
    '/anthropic',
    '/other/anthropic/v1/messages',
  ]) {
    const res = await plain(proxy.port, `http://llm.example${path}`);
    t.equal(res.status, 404, `plain HTTP ${path}`);
    t.match(
      res.body,
      { type: 'error', error: { code: 'not_found', message: /prefix/, request_id: String } },
      `plain HTTP ${path}`,
    );
    t.match(res.head, new RegExp(`\r\nx-request-id: ${res.body?.error?.request_id}\r\n`, 'i'));
    const tls = await openTunnel(proxy.port, caPem, 'llm.example');
    tls.write(`GET ${path} HTTP/1.1\r\nHost: llm.example\r\nConnection: close\r\n\r\n`);
    const inTunnel = parsed(await untilClosed(tls));
    t.equal(inTunnel.status, 404, `in a tunnel ${path}`);
    t.match(inTunnel.body, { error: { code: 'not_found' } }, `in a tunnel ${path}`);
  }
  t.equal(handled(), 6, 'none of them was handed to the gateway');
  const refused = lines.filter((l) => l.route === 'proxy' && l.reason === 'not_found');
  t.equal(refused.length, 8, 'each refusal is logged as the proxy logs its others');
});

t.test('the longest prefix wins; a host served at its root takes every other path', async (t) => {
  // api.openai.com is the openai provider's public host (prefix ''), and here also the anthropic
  // provider's base_url, under /anthropic.
  const hosts = hostsFrom([
    { name: 'openai', base_url: null, models: ['gpt-*'], api_key: 'sk-o' },
    {
      name: 'anthropic',
      base_url: 'https://api.openai.com/anthropic',
      models: ['claude-*'],
      api_key: 'sk-a',
    },
  ]);
  const { proxy } = await bareProxy(t, { providerHosts: () => hosts });
  for (const [path, served] of [
    ['/anthropic/v1/messages', '/v1/messages'],
    ['/v1/chat/completions', '/v1/chat/completions'],
    ['/anthropicx/v1/messages', '/anthropicx/v1/messages'],
  ] as const) {
    const res = await plain(proxy.port, `http://api.openai.com${path}`);
    t.equal(res.status, 200, path);
    t.same(res.body, { path: served }, path);
  }
});
