import { rmSync } from 'node:fs';
import { ChainLog } from '../../src/audit/chain-log.js';
import type { AuditSink } from '../../src/audit/types.js';
import { type Config, loadConfig } from '../../src/config/index.js';
import { bootstrap } from '../../src/control/bootstrap.js';
import { registerProvisioning } from '../../src/control/provisioning.js';
import { createVault, loadVaultKey } from '../../src/crypto/vault.js';
import { EgressPolicy } from '../../src/export/ssrf.js';
import { createHttpHandler, type RouteHandler } from '../../src/http/app.js';
import { listen } from '../../src/http/listen.js';
import { Router } from '../../src/http/router.js';
import { IdentityRepo } from '../../src/identity/repo.js';
import { UpstreamPools } from '../../src/providers/upstream.js';
import { LocalSnapshot } from '../../src/snapshot/local.js';
import type { PolicySource } from '../../src/snapshot/types.js';
import { openStore, type Store } from '../../src/store/db.js';
import { SettingsRepo } from '../../src/store/settings.js';
import { randomBase62 } from '../../src/util/ids.js';
import { createLogger } from '../../src/util/log.js';
import { testSigner } from '../audit/helpers.js';
import { testServiceEnv } from './env.js';
import { callHttp } from './http.js';
import { tempDir } from './tmp.js';

/** What a module's routes are built from: the same pieces src/server.ts wires. */
export interface CoreParts {
  readonly config: Config;
  readonly store: Store;
  readonly identity: IdentityRepo;
  readonly settings: SettingsRepo;
  readonly snapshot: LocalSnapshot;
  readonly router: Router<RouteHandler>;
  readonly orgExists: (id: string) => boolean;
}

export interface HarnessResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

export interface CoreHarness<S extends AuditSink> {
  readonly parts: CoreParts;
  readonly audit: S;
  readonly url: string;
  /** The bootstrap super_admin PAT of org `default`. */
  readonly pat: string;
  /** The first-start agent key of org `default`. */
  readonly agentKey: string;
  call(
    path: string,
    init?: {
      method?: string;
      token?: string;
      body?: unknown;
      raw?: string;
      headers?: Record<string, string>;
    },
  ): Promise<HarnessResponse>;
  close(): Promise<void>;
}

/** The default audit sink: a ChainLog over the harness store, sealed by the test signer. */
function testChainLog(store: Store, config: Config): ChainLog {
  return new ChainLog(store, testSigner(), {
    dataDir: config.dataDir,
    rotationMaxMb: config.audit.rotationMaxMb,
  });
}

/**
 * A fresh store, bootstrap, the provisioning routes plus whatever `register` adds, on a real
 * listener at 127.0.0.1:0 — for tests of one module's routes without the whole service. The
 * audit sink is `sink`'s (closed by `closeSink`), else a ChainLog over the store sealed by the
 * test signer, closed by the harness before the store.
 */
export async function startCoreHarness<S extends AuditSink = ChainLog>(opts: {
  readonly prefix: string;
  readonly register: (parts: CoreParts, audit: S) => void;
  readonly sink?: (store: Store, config: Config) => S;
  readonly closeSink?: (audit: S) => Promise<void>;
  readonly policies?: (store: Store) => PolicySource;
  readonly engine?: 'uws' | 'node';
}): Promise<CoreHarness<S>> {
  const dir = tempDir(`govgate-${opts.prefix}-`);
  const pat = `gk_pat_${randomBase62(40)}`;
  const config = loadConfig(testServiceEnv(dir, pat));
  const store = openStore(config.dataDir);
  const identity = new IdentityRepo(store);
  const settings = new SettingsRepo(store, createVault(loadVaultKey(config.keysDir)));
  // Without `sink`, S is its default, ChainLog (a caller naming S passes `sink`).
  const log = opts.sink ? undefined : testChainLog(store, config);
  const audit = opts.sink?.(store, config) ?? (log as unknown as S);
  const pools = new UpstreamPools({ timeoutMs: 1000, connections: 1 });
  const snapshot = new LocalSnapshot(identity, settings, pools, opts.policies?.(store));
  const boot = await bootstrap(config, store, identity, settings, audit);
  const router = new Router<RouteHandler>();
  const orgExists = (id: string): boolean => identity.getOrg(id) !== undefined;
  const parts: CoreParts = { config, store, identity, settings, snapshot, router, orgExists };
  let url = '';
  registerProvisioning(router, {
    snapshot,
    identity,
    settings,
    audit,
    egress: new EgressPolicy(),
    get baseUrl() {
      return url;
    },
  });
  opts.register(parts, audit);
  const handler = createHttpHandler(router, { logger: createLogger('error'), onFinish: () => {} });
  const server = await listen(opts.engine ?? 'uws', { host: '127.0.0.1', port: 0 }, handler);
  url = `http://127.0.0.1:${server.port}`;
  return {
    parts,
    audit,
    url,
    pat,
    agentKey: boot.created?.agentKey ?? '',
    call: (path, init = {}) =>
      callHttp(`${url}${path}`, {
        ...init,
        body: init.raw ?? (init.body === undefined ? undefined : JSON.stringify(init.body)),
      }),
    async close() {
      await server.close(1000);
      await pools.close();
      if (log) await log.close();
      else await opts.closeSink?.(audit);
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The org roles below super_admin, lowest first. */
export const ROLES = ['requester', 'auditor', 'developer', 'org_admin', 'admin'] as const;
export type RoleName = (typeof ROLES)[number];

export interface RoleOrg {
  readonly orgId: string;
  /** A PAT of a user holding each role. */
  readonly tokens: Readonly<Record<RoleName, string>>;
  /** The onboarded agents, in the order asked for. */
  readonly agents: readonly { readonly apiKey: string; readonly agentUuid: string }[];
}

/** A new org (created by the super_admin `pat`) with one user per role and the given agents. */
export async function orgWithRoles(
  h: Pick<CoreHarness<AuditSink>, 'call' | 'pat'>,
  name: string,
  agentIds: readonly string[] = [`${name}-agent`],
): Promise<RoleOrg> {
  const org = await h.call('/api/orgs', { token: h.pat, body: { name } });
  const orgId = org.body.org_id as string;
  const tokens = {} as Record<RoleName, string>;
  for (const role of ROLES) {
    const user = await h.call('/api/users', {
      token: h.pat,
      body: { email: `${role}@${name}.test`, role, org_id: orgId },
    });
    const tok = await h.call('/api/tokens', { token: h.pat, body: { user_id: user.body.user_id } });
    tokens[role] = tok.body.token as string;
  }
  const agents = [];
  for (const agent_id of agentIds) {
    const a = await h.call('/api/agents/onboard', { token: tokens.admin, body: { agent_id } });
    agents.push({ apiKey: a.body.api_key.api_key as string, agentUuid: a.body.agent_uuid as string });
  }
  return { orgId, tokens, agents };
}
