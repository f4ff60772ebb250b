import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import type { RetentionDesk } from './retention.js';

export interface RetentionRouteDeps {
  readonly snapshot: Snapshot;
  readonly retention: RetentionDesk;
  readonly orgExists: (id: string) => boolean;
}

/**
 * `/api/settings/retention` (spec 4.6, DESIGN C): the configuration and a preview (auditor and
 * up), a run (admin and up), each on the caller's org (a super_admin names another with
 * `?org_id=`). See `RetentionDesk`.
 */
export function registerRetentionRoutes(router: Router<RouteHandler>, deps: RetentionRouteDeps): void {
  const { snapshot, retention, orgExists } = deps;

  router.add('GET', '/api/settings/retention', (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    ctx.json(200, retention.settings(targetOrg(ctx, p, undefined, orgExists)));
  });

  router.add('GET', '/api/settings/retention/preview', (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    ctx.json(200, retention.preview(targetOrg(ctx, p, undefined, orgExists)));
  });

  router.add('POST', '/api/settings/retention/run', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'admin');
    ctx.json(200, await retention.run(targetOrg(ctx, p, undefined, orgExists), p));
  });
}
