import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import type { ErasureDesk } from './erasure.js';
import { parseSubject } from './subject.js';

export interface ErasureRouteDeps {
  readonly snapshot: Snapshot;
  readonly erasures: ErasureDesk;
  readonly orgExists: (id: string) => boolean;
}

/** What the erasure list reads from its query. */
const LIST_PARAMS = new Set(['limit', 'cursor', 'org_id']);

/**
 * `/api/compliance/gdpr/erasure` (spec 4.5, DESIGN C): submit (requester and up), list and read
 * (any person of the org: requester is the lowest role; agent keys hold no control-plane role),
 * execute (admin and up). See `ErasureDesk`.
 */
export function registerErasureRoutes(router: Router<RouteHandler>, deps: ErasureRouteDeps): void {
  const { snapshot, erasures, orgExists } = deps;

  router.add('POST', '/api/compliance/gdpr/erasure', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const body = strictBody<{ data_subject: Record<string, unknown>; reason?: string; org_id?: string }>(
      ctx.jsonObject(),
      {
        data_subject: { type: 'object', required: true },
        reason: { type: 'string', maxLength: 2_000 },
        org_id: { type: 'string' },
      },
    );
    const subject = parseSubject(body.data_subject);
    const org = targetOrg(ctx, p, body.org_id, orgExists);
    ctx.json(201, await erasures.submit(org, p, subject, body.reason ?? null));
  });

  router.add('GET', '/api/compliance/gdpr/erasure', (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const limitRaw = ctx.query.get('limit');
    const limit = limitRaw === null ? 100 : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
      throw new ServiceError('invalid_request', 'limit must be an integer from 1 to 1000', {
        param: 'limit',
      });
    ctx.onlyParams(LIST_PARAMS, 'a parameter of this list');
    const cursor = ctx.query.get('cursor') || undefined;
    // A page starts after a request of this org's list: anything else would start it anywhere.
    if (cursor !== undefined && erasures.get(org, cursor) === undefined)
      throw new ServiceError('invalid_request', 'cursor is not a cursor returned by this endpoint', {
        param: 'cursor',
      });
    ctx.json(200, erasures.list(org, limit, cursor));
  });

  router.add('GET', '/api/compliance/gdpr/erasure/:id', (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const id = ctx.params.id as string;
    const request = erasures.get(org, id);
    if (request === undefined) throw new ServiceError('not_found', `no erasure request ${id} in this org`);
    ctx.json(200, request);
  });

  router.add('POST', '/api/compliance/gdpr/erasure/:id/execute', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'admin');
    // No body needed; an org_id in one (or in the query) names another org for a super_admin.
    const raw = ctx.req.body.length === 0 ? {} : ctx.jsonObject();
    const body = strictBody<{ org_id?: string }>(raw, { org_id: { type: 'string' } });
    const org = targetOrg(ctx, p, body.org_id, orgExists);
    ctx.json(200, await erasures.execute(org, ctx.params.id as string, p));
  });
}
