import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { authenticate, targetOrg } from '../identity/guard.js';
import { roleAtLeast } from '../identity/roles.js';
import type { Snapshot } from '../snapshot/types.js';
import type { ApprovalFeed } from './feed.js';

export interface ApprovalFeedRouteDeps {
  readonly snapshot: Snapshot;
  readonly feed: ApprovalFeed;
  /** The service's base URL, for the long poll's successor link. */
  readonly baseUrl: string;
  /** Whether an org exists (a super_admin naming a missing one gets 404). */
  readonly orgExists: (id: string) => boolean;
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
  orgExists: (id: string) => boolean,
): { org: string; agentId: string | null; agentUuid: string | null } {
  const p = authenticate(ctx, snapshot);
  if (p.kind === 'agent') return { org: p.org_id, agentId: p.agent_id, agentUuid: p.id };
  if (!roleAtLeast(p.role, 'auditor'))
    throw new ServiceError('forbidden', 'reading approvals needs the auditor role or higher');
  return { org: targetOrg(ctx, p, undefined, orgExists), agentId: null, agentUuid: null };
}

/** Whether the request's credential still reads what it read when it began (see feedScope). */
function sameScope(
  ctx: Ctx,
  snapshot: Snapshot,
  orgExists: (id: string) => boolean,
  scope: ReturnType<typeof feedScope>,
): boolean {
  try {
    const now = feedScope(ctx, snapshot, orgExists);
    return now.org === scope.org && now.agentId === scope.agentId && now.agentUuid === scope.agentUuid;
  } catch {
    return false;
  }
}

/** Spec 4.4's decision stream (SSE) and the deprecated long poll (docs/api.md "Approvals"). */
export function registerApprovalFeedRoutes(router: Router<RouteHandler>, deps: ApprovalFeedRouteDeps): void {
  const { snapshot, feed } = deps;

  router.add('GET', '/v1/me/approvals/stream', async (ctx) => {
    const scope = feedScope(ctx, snapshot, deps.orgExists);
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
    await feed.stream(ctx, scope.org, scope.agentId, after, () =>
      sameScope(ctx, snapshot, deps.orgExists, scope),
    );
  });

  router.add('GET', '/v1/me/approvals/:id/wait', async (ctx) => {
    const scope = feedScope(ctx, snapshot, deps.orgExists);
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
    if (!sameScope(ctx, snapshot, deps.orgExists, scope))
      throw new ServiceError('unauthenticated', 'the credential is no longer valid for these approvals');
    ctx.json(200, rec, {
      deprecation: DEPRECATED_AT,
      link: `<${deps.baseUrl}/v1/me/approvals/stream>; rel="successor-version"`,
    });
  });
}
