import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AuditSink } from '../audit/types.js';
import type { Config } from '../config/index.js';
import { lastFour } from '../crypto/vault.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { ProviderSettings } from '../providers/types.js';
import type { Store } from '../store/db.js';
import type { SettingsRepo } from '../store/settings.js';
import { newId } from '../util/ids.js';

export interface BootstrapResult {
  /** Present only on the very first start: the secrets shown once. */
  readonly created?: {
    readonly token: string;
    readonly tokenGenerated: boolean;
    readonly agentKey: string;
    readonly agentId: string;
    /** The providers configured (mock only when no provider key was in the environment). */
    readonly providers: readonly string[];
  };
}

export const DEFAULT_ORG = 'default';

/**
 * First start: org `default`, the super_admin token (SERVICE_BOOTSTRAP_TOKEN, or generated and
 * written to data/bootstrap-token with mode 0600), one agent key, and providers: openai/anthropic
 * when their keys are in the environment, else the built-in mock.
 */
export async function bootstrap(
  config: Config,
  store: Store,
  identity: IdentityRepo,
  settings: SettingsRepo,
  audit: AuditSink,
): Promise<BootstrapResult> {
  if (store.meta.get('bootstrapped') !== undefined) return {};
  const org = identity.getOrg(DEFAULT_ORG) ?? identity.createOrg('default', DEFAULT_ORG);
  await audit.append({
    org_id: '_system',
    event_type: 'admin.org_created',
    outcome: 'allow',
    details: { actor: 'bootstrap', org_id: org.org_id, name: org.name },
  });
  const user = identity.createUser(org.org_id, 'admin@localhost', 'super_admin', 'usr_bootstrap');
  const pat = identity.createPat(user, {
    name: 'bootstrap',
    ...(config.bootstrapToken ? { secret: config.bootstrapToken } : {}),
  });
  if (!config.bootstrapToken)
    writeFileSync(join(config.dataDir, 'bootstrap-token'), `${pat.secret}\n`, { mode: 0o600 });
  const agent = identity.onboardAgent(org.org_id, {
    agent_id: 'default-agent',
    description: 'created on first start',
  });
  const key = identity.createAgentKey(agent, { name: 'default' });

  const entries: ProviderSettings[] = [];
  const secrets = new Map<string, string>();
  for (const name of ['openai', 'anthropic'] as const) {
    const apiKey = config.providerKeys[name];
    if (!apiKey) continue;
    const ref = newId('prov_', 16);
    secrets.set(ref, apiKey);
    entries.push({ name, base_url: null, models: [], key_ref: ref, key_last4: lastFour(apiKey) });
  }
  if (entries.length === 0)
    entries.push({ name: 'mock', base_url: null, models: [], key_ref: null, key_last4: null });
  settings.setProviders(org.org_id, entries, secrets);
  await audit.append({
    org_id: org.org_id,
    event_type: 'admin.bootstrap',
    outcome: 'allow',
    details: {
      actor: 'bootstrap',
      user_id: user.user_id,
      token_id: pat.record.credential_id,
      agent_uuid: agent.agent_uuid,
      providers: entries.map((e) => e.name),
    },
  });
  store.meta.putSync('bootstrapped', new Date().toISOString());
  return {
    created: {
      token: pat.secret,
      tokenGenerated: !config.bootstrapToken,
      agentKey: key.secret,
      agentId: agent.agent_id,
      providers: entries.map((e) => e.name),
    },
  };
}
