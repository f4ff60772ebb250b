import type { AuditSink } from '../audit/types.js';
import { adminEvent as recordAdminEvent } from '../control/admin-event.js';
import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { authenticate, requireRole, targetOrg } from '../identity/guard.js';
import { roleAtLeast } from '../identity/roles.js';
import type { Principal } from '../identity/types.js';
import type { Snapshot } from '../snapshot/types.js';
import type { ApprovalFeed } from './feed.js';
import { APPROVAL_STATUSES, type ApprovalStatus, type ApprovalStore } from './store.js';
import type { WebauthnCredentialRecord, WebauthnDesk, WebauthnEvidence } from './webauthn.js';

export interface ApprovalRouteDeps {
  readonly snapshot: Snapshot;
  readonly approvals: ApprovalStore;
  /**
   * Verifies the WebAuthn assertion of a decision. Without it an assertion cannot be checked, so
   * a signed-tier approval cannot be decided (fail closed).
   */
  readonly webauthn?: WebauthnDesk;
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
  for (const n of names) picked[n] = raw[n];
  return strictBody<T>(picked, spec);
}

export function registerApprovalRoutes(router: Router<RouteHandler>, deps: ApprovalRouteDeps): void {
  const { snapshot, approvals } = deps;
  // A decision's assertion is checked (and its challenge used up) before the decision is made.
  const signed = async (
    p: Principal,
    id: string,
    decision: 'approve' | 'deny',
    webauthn: unknown,
  ): Promise<WebauthnEvidence | undefined> =>
    webauthn === undefined || deps.webauthn === undefined
      ? undefined
      : deps.webauthn.verify(p, id, decision, webauthn);

  router.add('GET', '/v1/me/approvals', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    ctx.json(200, { data: await approvals.pendingFor(p) });
  });

  router.add('GET', '/v1/me/approvals/:id', async (ctx) => {
    const p = authenticate(ctx, snapshot);
    if (p.kind === 'user' && !roleAtLeast(p.role, 'auditor'))
      throw new ServiceError('forbidden', 'reading approvals needs the auditor role or higher');
    const id = ctx.params.id as string;
    const rec = await approvals.get(id, p.org_id);
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
    const rec = await approvals.get(id, targetOrg(ctx, p));
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
    const evidence = await signed(p, id, b.decision, b.webauthn);
    ctx.json(200, await approvals.decide(id, p, b.decision, b.reason, evidence));
  });
  router.add('POST', '/api/approvals/:id/cancel', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const b = strictBody<{ reason?: string }>(body(ctx), REASON_SPEC);
    ctx.json(200, await approvals.cancel(ctx.params.id as string, p, b.reason));
  });
  router.add('POST', '/api/approvals/:id/revoke', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const b = strictBody<{ reason?: string }>(body(ctx), REASON_SPEC);
    ctx.json(200, await approvals.revoke(ctx.params.id as string, p, b.reason));
  });

  router.add('GET', '/api/approvals', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const orgId = targetOrg(ctx, p);
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

export interface ApprovalFeedRouteDeps {
  readonly snapshot: Snapshot;
  readonly feed: ApprovalFeed;
  /** The service's base URL, for the long poll's successor link. */
  readonly baseUrl: string;
}

/** Longest long poll, in seconds (a `timeout` above it is refused), and the default. */
const WAIT_MAX_S = 60;
const WAIT_DEFAULT_S = 30;
const SECONDS = /^(0|[1-9][0-9]{0,2})$/;
const SEQ = /^(0|[1-9][0-9]{0,15})$/;
/** RFC 9745: the long poll is deprecated (as of this version's date), the stream replaces it. */
const DEPRECATED_AT = `@${Date.UTC(2026, 10, 28) / 1000}`;

/**
 * Who reads the feed and what of it: an agent its own approvals; a person (auditor or higher)
 * every approval of the org, a super_admin another org's with `?org_id=`.
 */
function feedScope(
  ctx: Ctx,
  snapshot: Snapshot,
): { org: string; agentId: string | null; agentUuid: string | null } {
  const p = authenticate(ctx, snapshot);
  if (p.kind === 'agent') return { org: p.org_id, agentId: p.agent_id, agentUuid: p.id };
  if (!roleAtLeast(p.role, 'auditor'))
    throw new ServiceError('forbidden', 'reading approvals needs the auditor role or higher');
  return { org: targetOrg(ctx, p), agentId: null, agentUuid: null };
}

/** Whether the request's credential still reads what it read when it began (see feedScope). */
function sameScope(ctx: Ctx, snapshot: Snapshot, scope: ReturnType<typeof feedScope>): boolean {
  try {
    const now = feedScope(ctx, snapshot);
    return now.org === scope.org && now.agentId === scope.agentId && now.agentUuid === scope.agentUuid;
  } catch {
    return false;
  }
}

/** Spec 4.4's decision stream (SSE) and the deprecated long poll (docs/api.md "Approvals"). */
export function registerApprovalFeedRoutes(router: Router<RouteHandler>, deps: ApprovalFeedRouteDeps): void {
  const { snapshot, feed } = deps;

  router.add('GET', '/v1/me/approvals/stream', async (ctx) => {
    const scope = feedScope(ctx, snapshot);
    // Last-Event-ID is what an EventSource sends on a reconnect; the query form is for clients
    // that cannot set a header on their first connection.
    const raw = ctx.header('last-event-id') ?? ctx.query.get('last_event_id') ?? undefined;
    let after: number | undefined;
    if (raw !== undefined && raw !== '') {
      if (!SEQ.test(raw))
        throw new ServiceError(
          'invalid_request',
          'Last-Event-ID must be the id of an event this stream sent',
          {
            param: 'Last-Event-ID',
          },
        );
      after = Number(raw);
    }
    await feed.stream(ctx, scope.org, scope.agentId, after, () => sameScope(ctx, snapshot, scope));
  });

  router.add('GET', '/v1/me/approvals/:id/wait', async (ctx) => {
    const scope = feedScope(ctx, snapshot);
    const raw = ctx.query.get('timeout');
    const seconds =
      raw === null || raw === '' ? WAIT_DEFAULT_S : SECONDS.test(raw) ? Number(raw) : Number.NaN;
    if (!(seconds >= 0 && seconds <= WAIT_MAX_S))
      throw new ServiceError('invalid_request', `timeout must be whole seconds from 0 to ${WAIT_MAX_S}`, {
        param: 'timeout',
      });
    const rec = await feed.wait(
      ctx,
      scope.org,
      // An agent waits on its own requests only; another agent's is reported as missing.
      (r) => scope.agentUuid === null || r.agent_uuid === scope.agentUuid,
      ctx.params.id as string,
      seconds * 1000,
    );
    // The credential is checked again before the answer: it may have been revoked meanwhile.
    if (!sameScope(ctx, snapshot, scope))
      throw new ServiceError('unauthenticated', 'the credential is no longer valid for these approvals');
    ctx.json(200, rec, {
      deprecation: DEPRECATED_AT,
      link: `<${deps.baseUrl}/v1/me/approvals/stream>; rel="successor-version"`,
    });
  });
}

export interface WebauthnRouteDeps {
  readonly snapshot: Snapshot;
  readonly approvals: ApprovalStore;
  readonly webauthn: WebauthnDesk;
  readonly audit: AuditSink;
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
    await recordAdminEvent(audit, p.org_id, p, 'webauthn_registered', {
      user_id: p.id,
      credential_id: cred.id,
      public_key: cred.public_key,
      name: cred.name,
    });
    ctx.json(201, publicView(cred));
  });

  router.add('GET', '/api/me/webauthn/credentials', (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
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
    const rec = await approvals.get(id, p.org_id);
    if (rec === undefined) throw new ServiceError('not_found', `approval ${id} not found`);
    if (rec.status !== 'pending')
      throw new ServiceError('approval_not_pending', `approval ${id} is ${rec.status}, not pending`);
    const decision = ctx.query.get('decision');
    if (decision !== null && decision !== 'approve' && decision !== 'deny')
      throw new ServiceError('invalid_request', 'decision must be approve or deny', { param: 'decision' });
    ctx.json(200, await webauthn.challenge(p, rec, decision ?? undefined));
  });
}
