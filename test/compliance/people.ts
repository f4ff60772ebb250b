import { IdentityRepo } from '../../src/identity/repo.js';
import type { Principal, UserRecord } from '../../src/identity/types.js';
import type { TempLog } from '../audit/helpers.js';

/**
 * Org `acme` on `h`'s store, with an admin (`admin@example.com`, acting as `p`) and Erin
 * (`Erin@Example.com`, a developer): the people the erasure unit tests erase and act as.
 */
export function acmeWithErin(h: TempLog): {
  identity: IdentityRepo;
  org: string;
  admin: UserRecord;
  erin: UserRecord;
  p: Principal;
} {
  const identity = new IdentityRepo(h.store);
  const org = identity.createOrg('acme').org_id;
  const admin = identity.createUser(org, 'admin@example.com', 'admin');
  const erin = identity.createUser(org, 'Erin@Example.com', 'developer');
  const p: Principal = {
    kind: 'user',
    id: admin.user_id,
    org_id: org,
    role: 'admin',
    agent_id: null,
    credential_id: 'tok_admin',
    email: admin.email,
  };
  return { identity, org, admin, erin, p };
}
