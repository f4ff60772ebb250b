import { ServiceError } from '../core/errors.js';
import type { Store } from './db.js';

/**
 * Whether `orgId` was deleted (`DELETE /api/orgs/{id}`): its record stays as a tombstone with
 * `deleted_at`. An org never created is not deleted (unit tests write for orgs they never create).
 */
export function orgDeleted(store: Pick<Store, 'orgs'>, orgId: string): boolean {
  const o = store.orgs.get(orgId) as { deleted_at?: string } | undefined;
  return o?.deleted_at !== undefined;
}

/**
 * Inside a write transaction that adds lasting state to an org (a user, a credential, a secret,
 * a destination, an approval, a sidecar): refuses it (404) when the org was deleted meanwhile.
 * Write transactions are serialized, so a write that passed its route's org check before the
 * deletion either commits before the tombstone (and the deletion's clean-up removes it) or sees
 * the tombstone here: nothing is left behind for a deleted org.
 */
export function assertOrgLive(store: Pick<Store, 'orgs'>, orgId: string): void {
  if (orgDeleted(store, orgId)) throw new ServiceError('not_found', `org ${orgId} does not exist (deleted)`);
}
