import type { Role } from './roles.js';

export interface OrgRecord {
  readonly org_id: string;
  readonly name: string;
  readonly created_at: string;
  /**
   * Set when the org was deleted (`DELETE /api/orgs/{id}`): the record stays as a tombstone, so
   * its id is never reused and a super_admin still reads its chain. Its name is released.
   */
  readonly deleted_at?: string;
  /** The user who deleted it. */
  readonly deleted_by?: string;
  /** What the deletion removed (counts), once it completed; absent while it is under way. */
  readonly removed?: Readonly<Record<string, number>>;
}

export interface UserRecord {
  readonly user_id: string;
  readonly org_id: string;
  readonly email: string;
  readonly role: Role;
  readonly created_at: string;
}

export interface AgentRecord {
  readonly agent_uuid: string;
  readonly agent_id: string;
  readonly org_id: string;
  readonly owner_email: string | null;
  readonly description: string | null;
  readonly framework: string | null;
  readonly intended_use: string | null;
  readonly created_at: string;
}

/** A stored credential, keyed by the SHA-256 of the secret; the secret itself is never stored. */
export interface CredentialRecord {
  readonly kind: 'pat' | 'agent';
  /** `tok_…` for PATs, `key_…` for agent keys. */
  readonly credential_id: string;
  readonly org_id: string;
  /** user_id (PAT) or agent_uuid (agent key). */
  readonly subject_id: string;
  readonly name: string | null;
  /** A PAT may carry a narrower role than its user. */
  readonly role: Role | null;
  readonly last4: string;
  readonly created_at: string;
  readonly expires_at: string | null;
  readonly revoked_at: string | null;
}

/** Who is calling, resolved from the credential. Identity is pinned here, never from the body. */
export interface Principal {
  readonly kind: 'user' | 'agent';
  /** user_id or agent_uuid. */
  readonly id: string;
  readonly org_id: string;
  /** Control-plane role; agents hold none. */
  readonly role: Role | null;
  /** For agents, the agent's own agent_id. */
  readonly agent_id: string | null;
  readonly credential_id: string;
  readonly email: string | null;
}
