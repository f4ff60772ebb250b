import type { AgentRecord } from '../identity/types.js';
import type { ProviderName } from '../providers/types.js';

/*
 * The sync API between a sidecar and the control plane (docs/sidecar.md). A sidecar presents a
 * sidecar token (`gk_sc_` + 40 base62), bound to one org when an org_admin creates it.
 */

/** An agent key of the org, as the sidecar checks it: the SHA-256 of the secret, never the secret. */
export interface SnapshotCredential {
  readonly hash: string;
  readonly credential_id: string;
  readonly agent_uuid: string;
  readonly expires_at: string | null;
}

/** A configured provider with its key opened: the sidecar calls the provider itself. */
export interface SnapshotProvider {
  readonly name: ProviderName;
  readonly base_url: string | null;
  readonly models: readonly string[];
  readonly api_key: string | null;
}

/** A policy assignment with the rule set of its published version. */
export interface SnapshotPolicy {
  readonly scope_type: 'org' | 'agent';
  readonly scope_id: string;
  readonly policy_id: string;
  readonly version_no: number;
  readonly rules: unknown;
}

/** `GET /api/sync/snapshot`: what a sidecar decides from. Its ETag is the SHA-256 of `content`. */
export interface SnapshotDoc {
  readonly v: 1;
  readonly org_id: string;
  readonly sidecar_id: string;
  /** The control plane's base URL: the `iss` of the mandates the sidecar signs for it. */
  readonly issuer: string;
  readonly generated_at: string;
  readonly agents: readonly AgentRecord[];
  readonly credentials: readonly SnapshotCredential[];
  readonly providers: readonly SnapshotProvider[];
  readonly policies: readonly SnapshotPolicy[];
}

/** How far the control plane has taken in a sidecar log (`GET /api/sync/state?epoch=`). */
export interface SyncState {
  readonly epoch: string;
  /** The last entry taken in (0: none). */
  readonly index: number;
  /** Its hash in the sidecar log (null: none). */
  readonly hash: string | null;
}

/** Bounds of `POST /api/sync/events {epoch, entries}`. */
export const MAX_SYNC_ENTRIES = 1000;
export const EPOCH_PATTERN = /^[A-Za-z0-9_-]{8,64}$/;
