import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import { loadConfig } from '../../src/config/index.js';
import { type RunningService, startAllInOne } from '../../src/server.js';
import { randomBase62 } from '../../src/util/ids.js';
import { createLogger, type Logger } from '../../src/util/log.js';
import { testServiceEnv } from './env.js';
import { callHttp } from './http.js';
import { type MockUpstream, startMockUpstream } from './mock-upstream.js';
import { tempDir } from './tmp.js';

export type Engine = 'uws' | 'node';
export const ENGINES: readonly Engine[] = ['uws', 'node'];

export interface TestService {
  readonly service: RunningService;
  readonly url: string;
  /** The bootstrap super_admin PAT of org `default`. */
  readonly pat: string;
  /** The first-start agent key of org `default`. */
  readonly agentKey: string;
  readonly dataDir: string;
  call(
    path: string,
    init?: { method?: string; token?: string; body?: unknown; headers?: Record<string, string> },
  ): Promise<{ status: number; headers: Headers; body: any }>;
  close(keepData?: boolean): Promise<void>;
}

/** Starts the all-in-one service on 127.0.0.1:0 with a fresh data dir (or a given one). */
export async function startService(
  opts: {
    engine?: Engine;
    env?: Record<string, string>;
    dataDir?: string;
    logger?: Logger;
    /** The audit trail's clock (see `StartSeams`). */
    clock?: () => number;
    /** The content scan worker's entry (see `StartSeams`). */
    scanWorker?: URL;
    /** How often certificate files are looked at (see `StartSeams`). */
    tlsReloadIntervalMs?: number;
  } = {},
): Promise<TestService> {
  const dataDir = opts.dataDir ?? tempDir('govgate-test-');
  const pat = `gk_pat_${randomBase62(40)}`;
  const config = loadConfig({
    ...testServiceEnv(dataDir, pat),
    SERVICE_HTTP_SERVER: opts.engine ?? 'uws',
    ...opts.env,
  });
  const service = await startAllInOne(config, opts.logger ?? createLogger('error'), {
    clock: opts.clock,
    scanWorker: opts.scanWorker,
    tlsReloadIntervalMs: opts.tlsReloadIntervalMs,
  });
  // Where it listens: SERVICE_PUBLIC_URL, when a test sets one, names no address of this machine.
  const url = service.listenUrl;
  const created = service.bootstrap.created;
  const call: TestService['call'] = async (path, init = {}) => {
    const body =
      init.body === undefined || typeof init.body === 'string' ? init.body : JSON.stringify(init.body);
    const res = await callHttp(`${url}${path}`, { ...init, body });
    return { status: res.status, headers: res.headers, body: res.body as any };
  };
  return {
    service,
    url,
    pat: created?.token ?? opts.env?.SERVICE_BOOTSTRAP_TOKEN ?? pat,
    agentKey: created?.agentKey ?? '',
    dataDir,
    call,
    async close(keepData = false) {
      await service.close(2000);
      if (!keepData) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Creates an org with its own super-scoped admin PAT and one agent; returns their secrets. */
export async function createOrg(
  svc: TestService,
  name: string,
  opts: { mock?: boolean } = {},
): Promise<{ orgId: string; adminPat: string; agentKey: string; agentUuid: string }> {
  const org = await svc.call('/api/orgs', { token: svc.pat, body: { name } });
  const orgId = org.body.org_id as string;
  const user = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: `admin@${name}.test`, role: 'admin', org_id: orgId },
  });
  const tok = await svc.call('/api/tokens', {
    token: svc.pat,
    body: { name: 'admin', user_id: user.body.user_id },
  });
  const agent = await svc.call('/api/agents/onboard', {
    token: tok.body.token,
    body: { agent_id: `${name}-agent` },
  });
  // With `mock`, the org is given the built-in mock provider, so its agent can call models.
  if (opts.mock === true) {
    const set = await svc.call('/api/settings/providers', {
      method: 'PUT',
      token: tok.body.token,
      body: { providers: [{ name: 'mock' }] },
    });
    if (set.status !== 200) throw new Error(`mock provider for ${name}: ${JSON.stringify(set.body)}`);
  }
  return {
    orgId,
    adminPat: tok.body.token,
    agentKey: agent.body.api_key.api_key,
    agentUuid: agent.body.agent_uuid,
  };
}

/** Points an org at the mock upstream for both openai (gpt-*, text-embedding-*) and anthropic (claude-*). */
export async function useMockUpstream(svc: TestService, token: string, upstreamUrl: string): Promise<void> {
  const res = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token,
    body: {
      providers: [
        {
          name: 'openai',
          api_key: 'sk-test-openai-0001',
          base_url: `${upstreamUrl}/v1`,
          models: ['gpt-*', 'o9-*', 'text-embedding-*'],
        },
        { name: 'anthropic', api_key: 'sk-ant-test-0002', base_url: upstreamUrl, models: ['claude-*'] },
        { name: 'mock' },
      ],
    },
  });
  if (res.status !== 200) throw new Error(`provider setup failed: ${JSON.stringify(res.body)}`);
}

/**
 * A service whose org routes every provider to a fresh mock upstream (egress allowed to it), both
 * closed when `t` ends.
 */
export async function serviceOnMockUpstream(
  t: { teardown(fn: () => Promise<void>): void },
  opts: { engine?: Engine; env?: Record<string, string>; scanWorker?: URL } = {},
): Promise<{ svc: TestService; upstream: MockUpstream }> {
  const upstream = await startMockUpstream();
  const svc = await startService({
    engine: opts.engine,
    env: { ...opts.env, SERVICE_EGRESS_ALLOW: upstream.hostPort },
    scanWorker: opts.scanWorker,
  });
  t.teardown(async () => {
    await svc.close();
    await upstream.close();
  });
  await useMockUpstream(svc, svc.pat, upstream.url);
  return { svc, upstream };
}

/** Creates, publishes and assigns to org `default` a policy with `rules` (a rule set object). */
export async function publishOrgPolicy(svc: TestService, name: string, rules: unknown): Promise<string> {
  const created = await svc.call('/api/v2/policies', { token: svc.pat, body: { name } });
  const draft = await svc.call(`/api/v2/policies/${created.body.id}/versions`, {
    token: svc.pat,
    body: { rules },
  });
  if (draft.status !== 201) throw new Error(JSON.stringify(draft.body));
  const published = await svc.call(
    `/api/v2/policies/${created.body.id}/versions/${draft.body.version_no}/publish`,
    {
      token: svc.pat,
      method: 'POST',
    },
  );
  if (published.status !== 200) throw new Error(JSON.stringify(published.body));
  const assigned = await svc.call(`/api/v2/policies/${created.body.id}/assignments`, {
    token: svc.pat,
    body: { scope_type: 'org', scope_id: 'default' },
  });
  if (assigned.status >= 300) throw new Error(JSON.stringify(assigned.body));
  return created.body.id as string;
}

/** The `llm_call` event of `session`, once it is committed (polled for up to 10 s). */
export async function callEvent(svc: TestService, session: string): Promise<any> {
  for (let i = 0; i < 500; i++) {
    const res = await svc.call(`/api/audit/session/${session}`, { token: svc.pat });
    const event = (res.body.data ?? []).find((e: any) => e.event_type === 'llm_call');
    if (event) return event;
    await new Promise((r) => setTimeout(r, 20));
  }
  return undefined;
}

/** The JSONL files of an org chain in a service's data dir, rotated ones oldest first, then the live one. */
export function orgLogFiles(svc: Pick<TestService, 'dataDir'>, org: string): string[] {
  const dir = join(svc.dataDir, 'data', 'audit');
  const rotated = readdirSync(dir)
    .map((f) => new RegExp(`^${org}\\.([0-9]+)\\.jsonl$`).exec(f))
    .filter((m) => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b)
    .map((n) => join(dir, `${org}.${n}.jsonl`));
  return [...rotated, join(dir, `${org}.jsonl`)];
}

/**
 * Publishes policy `refunds` (every `payments.refund` tool call needs an approval) for org
 * `default`; returns `ask(amount)`, which asks for one as the default agent and gives its id.
 */
export async function refundsNeedApproval(
  t: Pick<Test, 'equal'>,
  svc: TestService,
): Promise<(amount: number) => Promise<string>> {
  await publishOrgPolicy(svc, 'refunds', {
    rules: [
      { id: 'refunds', when: { type: 'TOOL_CALL', tool: 'payments.refund' }, then: 'require_approval' },
    ],
  });
  return async (amount) => {
    const asked = await svc.call('/v1/govern', {
      token: svc.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool: 'payments.refund', args: { amount } } },
    });
    t.equal(asked.body.outcome, 'needs_approval');
    return asked.body.approval.request_id as string;
  };
}
