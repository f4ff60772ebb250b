import { ServiceError } from '../core/errors.js';
import type { Ctx } from '../http/context.js';
import type { Snapshot } from '../snapshot/types.js';
import { type Role, roleAtLeast } from './roles.js';
import type { Principal } from './types.js';

/** The credential a request presents: `Authorization: Bearer …` or `X-API-Key: …`. */
export function presentedCredential(headers: Readonly<Record<string, string>>): string | undefined {
  const auth = headers.authorization;
  if (auth !== undefined) {
    const space = auth.indexOf(' ');
    if (space > 0 && auth.slice(0, space).toLowerCase() === 'bearer')
      return auth.slice(space + 1).trim() || undefined;
  }
  const key = headers['x-api-key'];
  return key === undefined || key === '' ? undefined : key.trim();
}

export function authenticate(ctx: Ctx, snapshot: Snapshot): Principal {
  const headers = ctx.req.headers;
  const secret = presentedCredential(headers);
  // A bearer credential and another X-API-Key: one of the two would be used without a word.
  const key = headers['x-api-key'];
  if (secret !== undefined && key !== undefined && key.trim() !== '' && key.trim() !== secret)
    throw new ServiceError(
      'invalid_request',
      'two different credentials (Authorization: Bearer and X-API-Key): send one',
      { param: 'x-api-key' },
    );
  if (secret === undefined) {
    throw new ServiceError(
      'unauthenticated',
      'a credential is required: Authorization: Bearer <key> or X-API-Key: <key>',
      {
        headers: { 'www-authenticate': 'Bearer' },
      },
    );
  }
  const principal = snapshot.authenticate(secret);
  if (principal === undefined) {
    throw new ServiceError('unauthenticated', 'the credential is not valid (unknown, revoked or expired)', {
      headers: { 'www-authenticate': 'Bearer error="invalid_token"' },
    });
  }
  ctx.principal = principal;
  return principal;
}

/** A human (PAT) with at least `min`. Agent keys hold no control-plane role. */
export function requireRole(ctx: Ctx, snapshot: Snapshot, min: Role): Principal {
  const p = authenticate(ctx, snapshot);
  if (p.kind !== 'user')
    throw new ServiceError(
      'forbidden',
      'agent keys cannot use the control plane; use a personal access token',
    );
  if (!roleAtLeast(p.role, min)) throw new ServiceError('forbidden', `this needs the ${min} role or higher`);
  return p;
}

/**
 * The org an org-scoped request acts on: the caller's own, or for a super_admin the one named by
 * `?org_id=` or `org_id` in the body. Anyone else naming another org is refused.
 */
export function targetOrg(
  ctx: Ctx,
  p: Principal,
  bodyOrgId: unknown,
  orgExists: (id: string) => boolean,
): string {
  const queried = ctx.query.get('org_id') ?? undefined;
  const given = typeof bodyOrgId === 'string' ? bodyOrgId : undefined;
  if (queried !== undefined && given !== undefined && queried !== given)
    throw new ServiceError('invalid_request', 'org_id in the query and in the body name different orgs', {
      param: 'org_id',
    });
  const named = queried ?? given;
  if (named === undefined || named === '' || named === p.org_id) return p.org_id;
  if (p.role !== 'super_admin')
    throw new ServiceError('forbidden', 'only a super_admin can act on another org', { param: 'org_id' });
  if (!orgExists(named))
    throw new ServiceError('not_found', `org ${named} does not exist`, { param: 'org_id' });
  return named;
}
