import type { AuditSink } from '../audit/types.js';
import { adminEvent, recordedUrl } from '../control/admin-event.js';
import { type FieldSpec, strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import { EXPORT_FORMATS, SEVERITY_FILTERS, type SeverityFilter } from './formats.js';
import {
  DESTINATION_KINDS,
  type ExportDesk,
  type ExportTarget,
  emptyStats,
  mask,
  SIEM_FIELD_NAMES,
  SIEM_ID,
  SIEM_KINDS,
  SYSTEM,
  type TargetInput,
} from './siem.js';

export interface SiemRouteDeps {
  readonly snapshot: Snapshot;
  readonly exports: ExportDesk;
  readonly audit: AuditSink;
  readonly orgExists: (id: string) => boolean;
}

const LIST_MAX = 100;
const NAME_MAX = 128;

/** Batching and retry fields (spec 2.9): integers, bounded. */
const TUNING: Record<string, FieldSpec> = {
  buffer_size: { type: 'integer', min: 1, max: 10_000 },
  flush_interval_seconds: { type: 'integer', min: 1, max: 300 },
  max_retries: { type: 'integer', min: 0, max: 10 },
  retry_backoff_seconds: { type: 'integer', min: 0, max: 60 },
};

function names(v: unknown, param: string): string[] | undefined {
  if (v === undefined) return undefined;
  if (
    !Array.isArray(v) ||
    v.length > LIST_MAX ||
    v.some((x) => typeof x !== 'string' || x === '' || x.length > NAME_MAX)
  )
    throw new ServiceError('invalid_request', `${param} must be a list of at most ${LIST_MAX} event types`, {
      param,
    });
  return v as string[];
}

const token = (t: ExportTarget): string | null => (t.token_last4 === null ? null : mask(t.token_last4));

/** The deployment-wide export before the first PUT: every field, none set. */
const UNCONFIGURED: Readonly<Record<string, unknown>> = {
  enabled: false,
  destination: null,
  url: null,
  auth_token: null,
  format: null,
  severity_filter: null,
  event_types: null,
  exclude_event_types: null,
  buffer_size: null,
  flush_interval_seconds: null,
  max_retries: null,
  retry_backoff_seconds: null,
  source_name: null,
  environment: null,
  updated_at: null,
};

function siemView(t: ExportTarget | undefined): Record<string, unknown> {
  if (t === undefined) return UNCONFIGURED;
  return {
    enabled: t.enabled,
    destination: t.kind,
    url: t.url,
    auth_token: token(t),
    format: t.format,
    severity_filter: t.severity_filter,
    event_types: t.event_types,
    exclude_event_types: t.exclude_event_types,
    buffer_size: t.buffer_size,
    flush_interval_seconds: t.flush_interval_seconds,
    max_retries: t.max_retries,
    retry_backoff_seconds: t.retry_backoff_seconds,
    source_name: t.source_name,
    environment: t.environment,
    updated_at: t.updated_at,
  };
}

function destinationView(t: ExportTarget): Record<string, unknown> {
  return {
    id: t.id,
    kind: t.kind,
    endpoint: t.url,
    secret_header: t.secret_header,
    token: token(t),
    event_filter: {
      event_types: t.event_types,
      exclude_event_types: t.exclude_event_types,
      severity: t.severity_filter,
    },
    format: t.kind === 'otlp' ? null : t.format,
    enabled: t.enabled,
    created_at: t.created_at,
    updated_at: t.updated_at,
  };
}

/** What an admin event records of a change: never the token, the URL as origin and hash. */
function changeOf(t: ExportTarget, urlChanged: boolean): Record<string, unknown> {
  return {
    target_id: t.id,
    kind: t.kind,
    format: t.format,
    enabled: t.enabled,
    ...(urlChanged ? { url: recordedUrl(t.url) } : {}),
  };
}

/**
 * SIEM export (`/api/settings/siem`, super_admin: every org's events) and each org's export
 * destinations (`/api/settings/export-destinations`, org_admin and up). See `ExportDesk`.
 */
export function registerSiemRoutes(router: Router<RouteHandler>, deps: SiemRouteDeps): void {
  const { snapshot, exports, audit, orgExists } = deps;
  const raw = (ctx: Ctx): Record<string, unknown> => (ctx.req.body.length === 0 ? {} : ctx.jsonObject());

  router.add('GET', '/api/settings/siem', (ctx) => {
    requireRole(ctx, snapshot, 'super_admin');
    ctx.json(200, siemView(exports.get(SYSTEM, SIEM_ID)));
  });

  router.add('PUT', '/api/settings/siem', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'super_admin');
    const b = strictBody<Record<string, unknown>>(raw(ctx), {
      enabled: { type: 'boolean' },
      destination: { type: 'string', enum: SIEM_KINDS },
      url: { type: 'string', maxLength: 2_048 },
      auth_token: { type: 'string', maxLength: 4_096, nullable: true },
      format: { type: 'string', enum: EXPORT_FORMATS },
      severity_filter: { type: 'string', enum: SEVERITY_FILTERS },
      event_types: { type: 'array' },
      exclude_event_types: { type: 'array' },
      source_name: { type: 'string', maxLength: NAME_MAX },
      environment: { type: 'string', maxLength: NAME_MAX },
      ...TUNING,
    });
    const before = exports.get(SYSTEM, SIEM_ID);
    const input: TargetInput = {
      ...(b as TargetInput),
      kind: b.destination as TargetInput['kind'],
      token: b.auth_token as string | undefined,
      event_types: names(b.event_types, 'event_types'),
      exclude_event_types: names(b.exclude_event_types, 'exclude_event_types'),
    };
    delete (input as Record<string, unknown>).destination;
    delete (input as Record<string, unknown>).auth_token;
    const t = await exports.put(SYSTEM, SIEM_ID, input, SIEM_FIELD_NAMES);
    await adminEvent(audit, SYSTEM, p, 'siem_updated', changeOf(t, t.url !== before?.url));
    ctx.json(200, siemView(t));
  });

  router.add('POST', '/api/settings/siem/test', async (ctx) => {
    requireRole(ctx, snapshot, 'super_admin');
    const t = exports.get(SYSTEM, SIEM_ID);
    if (t === undefined)
      throw new ServiceError('conflict', 'no SIEM export is configured: PUT /api/settings/siem first');
    ctx.json(200, await exports.test(t));
  });

  router.add('GET', '/api/settings/siem/stats', (ctx) => {
    requireRole(ctx, snapshot, 'super_admin');
    const t = exports.get(SYSTEM, SIEM_ID);
    // The same fields with nothing configured (zeros and nulls): a dashboard reads one shape.
    ctx.json(200, { enabled: t?.enabled ?? false, ...(exports.stats(SYSTEM, SIEM_ID) ?? emptyStats()) });
  });

  // ---- per org (org_admin and up)
  const destinationInput = (ctx: Ctx): TargetInput & { org_id?: string } => {
    const b = strictBody<Record<string, unknown>>(raw(ctx), {
      kind: { type: 'string', enum: DESTINATION_KINDS },
      endpoint: { type: 'string', maxLength: 2_048 },
      secret_header: { type: 'string', maxLength: NAME_MAX, pattern: /^[A-Za-z0-9-]+$/, nullable: true },
      token: { type: 'string', maxLength: 4_096, nullable: true },
      event_filter: { type: 'object' },
      format: { type: 'string', enum: EXPORT_FORMATS },
      enabled: { type: 'boolean' },
      org_id: { type: 'string' },
    });
    const f =
      b.event_filter === undefined
        ? {}
        : strictBody<{ event_types?: unknown; exclude_event_types?: unknown; severity?: SeverityFilter }>(
            b.event_filter as Record<string, unknown>,
            {
              event_types: { type: 'array' },
              exclude_event_types: { type: 'array' },
              severity: { type: 'string', enum: SEVERITY_FILTERS },
            },
          );
    return {
      ...(b.kind !== undefined ? { kind: b.kind as TargetInput['kind'] } : {}),
      ...(b.endpoint !== undefined ? { url: b.endpoint as string } : {}),
      // null: back to the kind's own header (Authorization with its scheme).
      ...(b.secret_header !== undefined
        ? { secret_header: b.secret_header === null ? null : (b.secret_header as string).toLowerCase() }
        : {}),
      ...(b.token !== undefined ? { token: b.token as string | null } : {}),
      ...(b.format !== undefined ? { format: b.format as TargetInput['format'] } : {}),
      ...(b.enabled !== undefined ? { enabled: b.enabled as boolean } : {}),
      event_types: names(f.event_types, 'event_filter.event_types'),
      exclude_event_types: names(f.exclude_event_types, 'event_filter.exclude_event_types'),
      ...(f.severity !== undefined ? { severity_filter: f.severity } : {}),
      ...(b.org_id !== undefined ? { org_id: b.org_id as string } : {}),
    };
  };
  const find = (org: string, id: string): ExportTarget => {
    const t = exports.get(org, id);
    if (t === undefined || id === SIEM_ID)
      throw new ServiceError('not_found', `no export destination ${id} in this org`);
    return t;
  };

  router.add('GET', '/api/settings/export-destinations', (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    ctx.json(200, { data: exports.list(org).map(destinationView) });
  });

  router.add('POST', '/api/settings/export-destinations', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const { org_id, ...input } = destinationInput(ctx);
    const org = targetOrg(ctx, p, org_id, orgExists);
    if (input.kind === undefined)
      throw new ServiceError('invalid_request', 'kind is required', { param: 'kind' });
    if (input.url === undefined)
      throw new ServiceError('invalid_request', 'endpoint is required', { param: 'endpoint' });
    const t = await exports.put(org, undefined, input);
    await adminEvent(audit, org, p, 'export_destination_created', changeOf(t, true));
    ctx.json(201, destinationView(t));
  });

  router.add('PUT', '/api/settings/export-destinations/:id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const { org_id, ...input } = destinationInput(ctx);
    const org = targetOrg(ctx, p, org_id, orgExists);
    const before = find(org, ctx.params.id as string);
    const t = await exports.put(org, before.id, input);
    await adminEvent(audit, org, p, 'export_destination_updated', changeOf(t, t.url !== before.url));
    ctx.json(200, destinationView(t));
  });

  router.add('DELETE', '/api/settings/export-destinations/:id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const t = find(org, ctx.params.id as string);
    await exports.remove(org, t.id);
    await adminEvent(audit, org, p, 'export_destination_deleted', { target_id: t.id });
    ctx.json(200, { id: t.id, deleted: true });
  });

  // Spec 5.5: testing a destination takes an admin (an org_admin manages them, an admin tests).
  router.add('POST', '/api/settings/export-destinations/:id/test', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    ctx.json(200, await exports.test(find(org, ctx.params.id as string)));
  });
}
