import { DEFAULT_POLICY } from '../core/policy/index.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { AgentRecord, Principal } from '../identity/types.js';
import { buildOrgProviders, type OrgProviders } from '../providers/registry.js';
import type { UpstreamPools } from '../providers/upstream.js';
import type { SettingsRepo } from '../store/settings.js';
import type { EffectivePolicy, PolicySource, Snapshot } from './types.js';

const NO_POLICIES: PolicySource = {
  effective: () => ({ policy: DEFAULT_POLICY, policy_id: null, version_no: null }),
};

const MAX_CACHED_CREDENTIALS = 10_000;

interface CachedPrincipal {
  readonly generation: number;
  readonly principal: Principal;
}

/** The all-in-one snapshot: the store, behind caches that drop entries when the store changes. */
export class LocalSnapshot implements Snapshot {
  private readonly credentials = new Map<string, CachedPrincipal>();
  private readonly orgProviders = new Map<string, { generation: number; providers: OrgProviders }>();

  constructor(
    private readonly identity: IdentityRepo,
    private readonly settings: SettingsRepo,
    private readonly pools: UpstreamPools,
    private readonly policies: PolicySource = NO_POLICIES,
  ) {}

  policy(orgId: string, agentUuid: string): EffectivePolicy {
    return this.policies.effective(orgId, agentUuid);
  }

  authenticate(secret: string): Principal | undefined {
    const generation = this.identity.generation;
    const hit = this.credentials.get(secret);
    if (hit !== undefined && hit.generation === generation) return hit.principal;
    const principal = this.identity.authenticate(secret);
    if (principal === undefined) {
      this.credentials.delete(secret);
      return undefined;
    }
    // Credentials with an expiry are resolved every time, so expiry needs no timer here.
    if (this.identity.getCredential(principal.credential_id)?.expires_at === null) {
      if (this.credentials.size >= MAX_CACHED_CREDENTIALS) this.credentials.clear();
      this.credentials.set(secret, { generation, principal });
    }
    return principal;
  }

  agentByName(orgId: string, agentId: string): AgentRecord | undefined {
    return this.identity.getAgentByName(orgId, agentId);
  }

  providers(orgId: string): OrgProviders {
    const generation = this.settings.generation;
    const hit = this.orgProviders.get(orgId);
    if (hit !== undefined && hit.generation === generation) return hit.providers;
    const providers = buildOrgProviders(
      this.settings.providers(orgId),
      (ref) => this.settings.openSecret(orgId, ref),
      this.pools.forOrg(orgId),
    );
    this.orgProviders.set(orgId, { generation, providers });
    return providers;
  }
}
