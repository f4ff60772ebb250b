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
}
