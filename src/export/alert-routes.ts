import type { AuditSink } from '../audit/types.js';
import { adminEvent, recordedUrl } from '../control/admin-event.js';
import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import {
  type AlertDesk,
  type AlertDestination,
  GLOBAL_ID,
  MIN_SEVERITIES,
  type MinSeverity,
  mask,
  SYSTEM,
  WEBHOOK_TYPES,
  type WebhookType,
} from './alerts.js';

export interface AlertRouteDeps {
  readonly snapshot: Snapshot;
  readonly alerts: AlertDesk;
  readonly audit: AuditSink;
  readonly orgExists: (id: string) => boolean;
}

interface Body {
  webhook_type?: WebhookType;
  webhook_url?: string;
  min_severity?: MinSeverity;
  enabled?: boolean;
  org_id?: string;
}

const SPEC = {
  webhook_type: { type: 'string', enum: WEBHOOK_TYPES },
  webhook_url: { type: 'string' },
  min_severity: { type: 'string', enum: MIN_SEVERITIES },
  enabled: { type: 'boolean' },
  org_id: { type: 'string' },
} as const;

/** A destination as the API shows it: the URL masked (`****last4`). */
function view(d: AlertDestination): Record<string, unknown> {
  return {
    id: d.id,
    webhook_type: d.webhook_type,
    webhook_url: mask(d.url_last4),
    min_severity: d.min_severity,
    enabled: d.enabled,
    created_at: d.created_at,
    updated_at: d.updated_at,
  };
}

/**
 * Alerting (spec 2.10, 2.12, 4.7, 4.8): the deployment-wide webhook (`/api/settings/alerting`,
 * super_admin; alerts of every org) and each org's alert destinations
 * (`/api/settings/alert-destinations`, org_admin and up). URLs are SSRF-checked, kept sealed in
 * the vault and shown masked; changes are `admin.*` events recording the URL's origin and hash.
 */
export function registerAlertRoutes(router: Router<RouteHandler>, deps: AlertRouteDeps): void {
  const { snapshot, alerts, audit, orgExists } = deps;
  const body = (ctx: Ctx): Body => strictBody<Body>(ctx.req.body.length === 0 ? {} : ctx.jsonObject(), SPEC);
  const changedUrl = (b: Body, before: AlertDestination | undefined) =>
    b.webhook_url === undefined || (before !== undefined && b.webhook_url === mask(before.url_last4))
      ? {}
      : { url: recordedUrl(b.webhook_url) };
  const find = (org: string, id: string): AlertDestination => {
    const d = alerts.get(org, id);
    if (d === undefined || id === GLOBAL_ID)
      throw new ServiceError('not_found', `no alert destination ${id} in this org`);
    return d;
  };

  // ---- deployment-wide (super_admin)
  router.add('GET', '/api/settings/alerting', (ctx) => {
    requireRole(ctx, snapshot, 'super_admin');
    const d = alerts.global();
    ctx.json(
      200,
      d === undefined
        ? { enabled: false, webhook_type: null, webhook_url: null, min_severity: null, updated_at: null }
        : view(d),
    );
  });

  router.add('PUT', '/api/settings/alerting', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'super_admin');
    const b = body(ctx);
    if (b.org_id !== undefined)
      throw new ServiceError('invalid_request', 'the alerting webhook is deployment-wide: no org_id', {
        param: 'org_id',
      });
    const before = alerts.global();
    const d = await alerts.put(SYSTEM, GLOBAL_ID, b);
    await adminEvent(audit, SYSTEM, p, 'alerting_updated', {
      webhook_type: d.webhook_type,
      min_severity: d.min_severity,
      enabled: d.enabled,
      ...changedUrl(b, before),
    });
    ctx.json(200, view(d));
  });

  router.add('POST', '/api/settings/alerting/test', async (ctx) => {
    requireRole(ctx, snapshot, 'super_admin');
    const d = alerts.global();
    if (d === undefined)
      throw new ServiceError(
        'conflict',
        'no alerting webhook is configured: PUT /api/settings/alerting first',
      );
    ctx.json(200, await alerts.test(d, SYSTEM));
  });

  router.add('GET', '/api/settings/alerting/delivery-log', (ctx) => {
    requireRole(ctx, snapshot, 'super_admin');
    const d = alerts.global();
    ctx.json(200, { data: d === undefined ? [] : alerts.deliveryLog(d) });
  });

  // ---- per org (org_admin and up)
  router.add('GET', '/api/settings/alert-destinations', (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    ctx.json(200, { data: alerts.list(org).map(view) });
  });

  router.add('POST', '/api/settings/alert-destinations', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const b = body(ctx);
    const org = targetOrg(ctx, p, b.org_id, orgExists);
    for (const f of ['webhook_type', 'webhook_url'] as const)
      if (b[f] === undefined) throw new ServiceError('invalid_request', `${f} is required`, { param: f });
    const d = await alerts.put(org, undefined, b);
    await adminEvent(audit, org, p, 'alert_destination_created', {
      destination_id: d.id,
      webhook_type: d.webhook_type,
      min_severity: d.min_severity,
      ...changedUrl(b, undefined),
    });
    ctx.json(201, view(d));
  });

  router.add('PUT', '/api/settings/alert-destinations/:id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const b = body(ctx);
    const org = targetOrg(ctx, p, b.org_id, orgExists);
    const before = find(org, ctx.params.id as string);
    const d = await alerts.put(org, before.id, b);
    await adminEvent(audit, org, p, 'alert_destination_updated', {
      destination_id: d.id,
      webhook_type: d.webhook_type,
      min_severity: d.min_severity,
      enabled: d.enabled,
      ...changedUrl(b, before),
    });
    ctx.json(200, view(d));
  });

  router.add('DELETE', '/api/settings/alert-destinations/:id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const d = find(org, ctx.params.id as string);
    await alerts.remove(org, d.id);
    await adminEvent(audit, org, p, 'alert_destination_deleted', { destination_id: d.id });
    ctx.json(200, { id: d.id, deleted: true });
  });

  // Spec 5.5: testing a destination takes an admin (an org_admin manages them, an admin tests).
  router.add('POST', '/api/settings/alert-destinations/:id/test', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    ctx.json(200, await alerts.test(find(org, ctx.params.id as string), org));
  });

  router.add('GET', '/api/settings/alert-destinations/:id/delivery-log', (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    ctx.json(200, { data: alerts.deliveryLog(find(org, ctx.params.id as string)) });
  });
}
