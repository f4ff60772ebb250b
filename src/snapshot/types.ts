import type { CompiledPolicy } from '../core/policy/index.js';
import type { AgentRecord, Principal } from '../identity/types.js';
import type { OrgProviders } from '../providers/registry.js';

/**
 * Everything the request path reads about identity and configuration. In all-in-one it reads the
 * embedded store through caches; a sidecar implements it from the snapshot it pulls from the
 * control plane. The request path never reads the store directly.
 */
export interface Snapshot {
  /** Resolves a presented credential; undefined when unknown, revoked or expired. */
  authenticate(secret: string): Principal | undefined;
  agentByName(orgId: string, agentId: string): AgentRecord | undefined;
  providers(orgId: string): OrgProviders;
  /** The policy in force for an agent: its own assignment, else its org's, else the default. */
  policy(orgId: string, agentUuid: string): EffectivePolicy;
}

export interface EffectivePolicy {
  readonly policy: CompiledPolicy;
  readonly policy_id: string | null;
  readonly version_no: number | null;
}

/** Where published policies come from (the policy store in all-in-one). */
export interface PolicySource {
  effective(orgId: string, agentUuid: string): EffectivePolicy;
}
