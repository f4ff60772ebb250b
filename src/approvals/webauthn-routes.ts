import type { AuditSink } from '../audit/types.js';
import { adminEvent as recordAdminEvent } from '../control/admin-event.js';
import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import { NO_PARAMS } from '../http/context.js';
import type { Router } from '../http/router.js';
import { authenticate, requireRole, targetOrg } from '../identity/guard.js';
import { roleAtLeast } from '../identity/roles.js';
import type { Snapshot } from '../snapshot/types.js';
import type { ApprovalStore } from './store.js';
import type { WebauthnCredentialRecord, WebauthnDesk } from './webauthn.js';

export interface WebauthnRouteDeps {
  readonly snapshot: Snapshot;
  readonly approvals: ApprovalStore;
  readonly webauthn: WebauthnDesk;
  readonly audit: AuditSink;
  /** Whether an org exists (a super_admin naming a missing one gets 404). */
  readonly orgExists: (id: string) => boolean;
}

const REGISTER_SPEC = {
  response: { type: 'object', required: true },
  name: { type: 'string', maxLength: 200 },
} as const;

/**
 * WebAuthn for signed-tier decisions: a person registers authenticators (developer or higher, as
 * deciding needs), lists and removes them, and fetches the challenge of one pending approval.
 */
export function registerWebauthnRoutes(router: Router<RouteHandler>, deps: WebauthnRouteDeps): void {
  const { snapshot, approvals, webauthn, audit } = deps;
  const publicView = (c: WebauthnCredentialRecord) => ({
    credential_id: c.id,
    name: c.name,
    transports: c.transports,
    created_at: c.created_at,
  });

  router.add('POST', '/api/me/webauthn/register/options', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    ctx.json(200, await webauthn.registrationOptions(p));
  });

  router.add('POST', '/api/me/webauthn/register/verify', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const b = strictBody<{ response: Record<string, unknown>; name?: string }>(
      ctx.jsonObject(),
      REGISTER_SPEC,
    );
    const cred = await webauthn.register(p, b.response, b.name ?? null);
    // The public key goes on the trail: with it, an auditor checks the signed decisions offline.
    // The name the person gave it is theirs: a personal field, which erasing them tombstones.
    await recordAdminEvent(
      audit,
      p.org_id,
      p,
      'webauthn_registered',
      { user_id: p.id, credential_id: cred.id, public_key: cred.public_key },
      cred.name === null ? undefined : { name: cred.name },
    );
    ctx.json(201, publicView(cred));
  });

  router.add('GET', '/api/me/webauthn/credentials', (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    // A person's own authenticators, of no org: an `?org_id=` is refused rather than ignored.
    ctx.onlyParams(NO_PARAMS, 'a parameter of this list');
    ctx.json(200, { data: webauthn.credentialsOf(p.id).map(publicView) });
  });

  router.add('DELETE', '/api/me/webauthn/credentials/:id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const id = ctx.params.id as string;
    if (!(await webauthn.remove(p.id, id)))
      throw new ServiceError('not_found', `authenticator ${id} not found`);
    await recordAdminEvent(audit, p.org_id, p, 'webauthn_removed', { user_id: p.id, credential_id: id });
    ctx.json(200, { credential_id: id, removed: true });
  });

  router.add('GET', '/v1/me/approvals/:id/challenge', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    if (p.kind !== 'user' || !roleAtLeast(p.role, 'developer'))
      throw new ServiceError(
        'forbidden',
        'only a person who may decide (developer or higher) signs a decision',
      );
    const id = ctx.params.id as string;
    // A super_admin signs another org's decision with ?org_id=, as it decides it.
    const rec = await approvals.get(id, targetOrg(ctx, p, undefined, deps.orgExists));
    if (rec === undefined) throw new ServiceError('not_found', `approval ${id} not found`);
    if (rec.status !== 'pending')
      throw new ServiceError('approval_not_pending', `approval ${id} is ${rec.status}, not pending`);
    const decision = ctx.query.get('decision');
    if (decision !== null && decision !== 'approve' && decision !== 'deny')
      throw new ServiceError('invalid_request', 'decision must be approve or deny', { param: 'decision' });
    ctx.json(200, await webauthn.challenge(p, rec, decision ?? undefined));
  });
}
