import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { authenticate, requireRole, targetOrg } from '../identity/guard.js';
import { roleAtLeast } from '../identity/roles.js';
import type { Principal } from '../identity/types.js';
import type { Snapshot } from '../snapshot/types.js';
import { APPROVAL_STATUSES, type ApprovalStatus, type ApprovalStore } from './store.js';
import type { WebauthnDesk, WebauthnEvidence } from './webauthn.js';

export interface ApprovalRouteDeps {
  readonly snapshot: Snapshot;
  readonly approvals: ApprovalStore;
  /**
   * Verifies the WebAuthn assertion of a decision. Without it an assertion cannot be checked, so
   * a signed-tier approval cannot be decided (fail closed).
   */
  readonly webauthn?: WebauthnDesk;
  /** Whether an org exists (a super_admin naming a missing one gets 404). */
  readonly orgExists: (id: string) => boolean;
}

const REASON = { type: 'string', maxLength: 2000 } as const;
const DECIDE_SPEC = {
  decision: { type: 'string', required: true, enum: ['approve', 'deny'] },
  reason: REASON,
  webauthn: { type: 'object' },
} as const;
const REASON_SPEC = { reason: REASON } as const;

/**
 * `/v1` bodies are lenient (unknown fields are ignored, DESIGN C "Leniency"): only the known
 * fields are picked and checked. An empty body counts as `{}`.
 */
function leniently<T>(ctx: Ctx, names: readonly string[], spec: Parameters<typeof strictBody>[1]): T {
  const raw = ctx.req.body.length === 0 ? {} : ctx.jsonObject();
  const picked: Record<string, unknown> = {};
  // A null is what an SDK sends for a field it does not set: absent here.
  for (const n of names) if (raw[n] !== null) picked[n] = raw[n];
  return strictBody<T>(picked, spec);
}

export function registerApprovalRoutes(router: Router<RouteHandler>, deps: ApprovalRouteDeps): void {
  const { snapshot, approvals } = deps;
  /** The org a request acts on: the caller's, or the one a super_admin names (`?org_id=`). */
  const orgOf = (ctx: Ctx, p: Principal): string => targetOrg(ctx, p, undefined, deps.orgExists);
  // A decision's assertion is checked (and its challenge used up) before the decision is made,
  // once the caller may decide and the approval is there to decide (403 and 404 as without one).
  const signed = async (
    p: Principal,
    id: string,
    decision: 'approve' | 'deny',
    webauthn: unknown,
    orgId: string = p.org_id,
  ): Promise<WebauthnEvidence | undefined> => {
    approvals.assertDecidable(id, p, orgId);
    return webauthn === undefined || deps.webauthn === undefined
      ? undefined
      : deps.webauthn.verify(p, id, decision, webauthn);
  };

  router.add('GET', '/v1/me/approvals', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    // A super_admin names another org with ?org_id=; anyone else naming one is refused.
    ctx.json(200, { data: await approvals.pendingFor(p, orgOf(ctx, p)) });
  });

  router.add('GET', '/v1/me/approvals/:id', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    if (p.kind === 'user' && !roleAtLeast(p.role, 'auditor'))
      throw new ServiceError('forbidden', 'reading approvals needs the auditor role or higher');
    const id = ctx.params.id as string;
    const rec = await approvals.get(id, orgOf(ctx, p));
    // An agent sees only its own requests; another agent's is reported as missing.
    if (rec === undefined || (p.kind === 'agent' && rec.agent_uuid !== p.id))
      throw new ServiceError('not_found', `approval ${id} not found`);
    ctx.json(200, rec);
  });

  router.add('POST', '/v1/me/approvals/:id/decide', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    const body = leniently<{ decision: 'approve' | 'deny'; reason?: string; webauthn?: unknown }>(
      ctx,
      ['decision', 'reason', 'webauthn'],
      DECIDE_SPEC,
    );
    const id = ctx.params.id as string;
    const evidence = await signed(p, id, body.decision, body.webauthn);
    ctx.json(200, await approvals.decide(id, p, body.decision, body.reason, evidence));
  });

  router.add('POST', '/v1/me/approvals/:id/cancel', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    const body = leniently<{ reason?: string }>(ctx, ['reason'], REASON_SPEC);
    ctx.json(200, await approvals.cancel(ctx.params.id as string, p, body.reason));
  });

  router.add('POST', '/v1/me/approvals/:id/revoke', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    const body = leniently<{ reason?: string }>(ctx, ['reason'], REASON_SPEC);
    ctx.json(200, await approvals.revoke(ctx.params.id as string, p, body.reason));
  });

  // Spec 4.4's `/api/approvals` (workflow management on the control plane): one approval and its
  // decide, cancel and revoke, as under /v1/me/approvals, for people (a PAT) and with strict bodies.
  router.add('GET', '/api/approvals/:id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const id = ctx.params.id as string;
    const rec = await approvals.get(id, orgOf(ctx, p));
    if (rec === undefined) throw new ServiceError('not_found', `approval ${id} not found`);
    ctx.json(200, rec);
  });
  const body = (ctx: Ctx): Record<string, unknown> => (ctx.req.body.length === 0 ? {} : ctx.jsonObject());
  router.add('POST', '/api/approvals/:id/decide', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const b = strictBody<{ decision: 'approve' | 'deny'; reason?: string; webauthn?: unknown }>(
      body(ctx),
      DECIDE_SPEC,
    );
    const id = ctx.params.id as string;
    // A super_admin names another org's approval with ?org_id= (DESIGN C, "Scope").
    const orgId = orgOf(ctx, p);
    const evidence = await signed(p, id, b.decision, b.webauthn, orgId);
    ctx.json(200, await approvals.decide(id, p, b.decision, b.reason, evidence, orgId));
  });
  router.add('POST', '/api/approvals/:id/cancel', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const b = strictBody<{ reason?: string }>(body(ctx), REASON_SPEC);
    ctx.json(200, await approvals.cancel(ctx.params.id as string, p, b.reason, orgOf(ctx, p)));
  });
  router.add('POST', '/api/approvals/:id/revoke', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const b = strictBody<{ reason?: string }>(body(ctx), REASON_SPEC);
    ctx.json(200, await approvals.revoke(ctx.params.id as string, p, b.reason, orgOf(ctx, p)));
  });

  router.add('GET', '/api/approvals', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const orgId = orgOf(ctx, p);
    const q = ctx.query;
    const status = q.get('status');
    if (status !== null && !(APPROVAL_STATUSES as readonly string[]).includes(status)) {
      throw new ServiceError('invalid_request', `status must be one of ${APPROVAL_STATUSES.join(', ')}`, {
        param: 'status',
      });
    }
    const limitRaw = q.get('limit');
    const limit = limitRaw === null ? 100 : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
      throw new ServiceError('invalid_request', 'limit must be an integer from 1 to 1000', {
        param: 'limit',
      });
    const cursor = q.get('cursor');
    const page = await approvals.list(orgId, {
      limit,
      ...(status === null ? {} : { status: status as ApprovalStatus }),
      ...(cursor === null || cursor === '' ? {} : { cursor }),
    });
    ctx.json(200, page);
  });
}
