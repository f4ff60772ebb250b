import type { JWK } from 'jose';
import type { AuditSink } from '../audit/types.js';
import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { MandateKeys } from '../crypto/mandate-keys.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import { MANDATE_JTI_RE, MAX_MANDATE_CHARS, type MandateService } from './mandates.js';

export interface MandateRouteDeps {
  readonly snapshot: Snapshot;
  /** Whether an org exists (a super_admin naming a missing one gets 404). */
  readonly orgExists: (id: string) => boolean;
  readonly mandates: MandateService;
  readonly keys: MandateKeys;
  readonly audit: AuditSink;
  /** Other public keys the JWKS publishes beside the mandate keys (e.g. audit signing keys). */
  readonly extraJwks?: () => readonly JWK[];
}

const JWKS_HEADERS = { 'cache-control': 'public, max-age=300' };
// Revocations must reach verifiers quickly: they may keep the list but must revalidate it.
const REVOKED_HEADERS = { 'cache-control': 'no-cache' };

/**
 * The mandate endpoints: the public key set and revocation list offline verifiers need, token
 * verification, and revocation.
 *
 * Revocation takes `{jti}` or `{token}`. With a token, its signature proves its org: another
 * org's mandate is 404 (a super_admin may revoke any). With a bare jti the org cannot be known
 * (mandates are not recorded when issued, to keep the allow path write-free), so the revocation
 * is recorded for the caller's org (a super_admin's `org_id`) and revokes only that org's mandate
 * of that jti: another org naming it revokes nothing of this one's (the check, and the public
 * list's entries, carry the org). Revoking a jti twice is idempotent and keeps the first record. Since a bare jti may
 * be made up, an org holds at most MAX_UNPROVEN_REVOCATIONS_PER_ORG live revocations by bare jti
 * (429 beyond; revocation by token is not limited).
 */
export function registerMandateRoutes(router: Router<RouteHandler>, deps: MandateRouteDeps): void {
  const { snapshot, mandates, keys, audit } = deps;

  router.add('GET', '/.well-known/jwks.json', (ctx) => {
    const set = keys.jwks();
    if (deps.extraJwks) set.keys.push(...deps.extraJwks());
    ctx.json(200, set, JWKS_HEADERS);
  });

  router.add('POST', '/v1/tokens/verify', async (ctx) => {
    const body = ctx.jsonObject();
    const token = body.token;
    if (typeof token !== 'string' || token === '')
      throw new ServiceError('invalid_request', 'token is required and must be a string', { param: 'token' });
    const result = await mandates.verify(token);
    ctx.json(200, result);
  });

  // Anyone may ask, as often as they like: the answer is the cached text (see RevocationList).
  router.add('GET', '/v1/mandates/revoked', (ctx) => {
    ctx.sendRaw(200, 'application/json', mandates.revokedJson(), REVOKED_HEADERS);
  });

  router.add('POST', '/api/mandates/revoke', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'admin');
    const body = strictBody<{ jti?: string; token?: string; reason?: string; org_id?: string }>(
      ctx.jsonObject(),
      {
        jti: { type: 'string', pattern: MANDATE_JTI_RE },
        token: { type: 'string', maxLength: MAX_MANDATE_CHARS },
        reason: { type: 'string', maxLength: 1000 },
        org_id: { type: 'string' },
      },
    );
    if ((body.jti === undefined) === (body.token === undefined))
      throw new ServiceError('invalid_request', 'give exactly one of jti or token', { param: 'jti' });
    let jti: string;
    let orgId: string;
    if (body.token !== undefined) {
      const claims = await mandates.inspect(body.token);
      if (claims === undefined)
        throw new ServiceError('invalid_request', 'token is not a mandate issued by this service', {
          param: 'token',
        });
      if (p.role !== 'super_admin' && claims.org !== p.org_id)
        throw new ServiceError('not_found', `mandate ${claims.jti} not found`);
      jti = claims.jti;
      orgId = claims.org;
    } else {
      jti = body.jti as string;
      orgId = targetOrg(ctx, p, body.org_id, deps.orgExists);
    }
    // A bare jti proves nothing was issued: it counts against the org's allowance.
    const { record, created } = await mandates.revoke(jti, orgId, p.id, body.reason, undefined, {
      unproven: body.token === undefined,
    });
    if (created) {
      // The reason is what a person wrote: a personal field, which an erasure reaches.
      await audit.append({
        org_id: record.org_id,
        event_type: 'admin.mandate_revoked',
        outcome: 'allow',
        details: {
          actor: p.id,
          actor_kind: p.kind,
          credential_id: p.credential_id,
          jti,
          by: body.token !== undefined ? 'token' : 'jti',
        },
        ...(body.reason !== undefined ? { personal: { reason: body.reason } } : {}),
      });
    }
    ctx.json(200, { jti, revoked: true, revoked_at: record.revoked_at });
  });
}
