import type { ApprovalStore } from '../approvals/store.js';
import type { AuditSink } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { presentedCredential, requireRole, targetOrg } from '../identity/guard.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { Snapshot } from '../snapshot/types.js';
import { EPOCH_PATTERN, MAX_SYNC_ENTRIES } from '../snapshot/wire.js';
import { adminEvent } from './admin-event.js';
import { strictBody } from './body.js';
import type { SidecarDesk, SidecarRecord } from './sidecars.js';

export interface SidecarRouteDeps {
  readonly snapshot: Snapshot;
  readonly sidecars: SidecarDesk;
  readonly identity: IdentityRepo;
  readonly approvals: ApprovalStore;
  readonly audit: AuditSink;
  readonly orgExists: (id: string) => boolean;
  /** Whether the control plane's own mandate keys use this key id. */
  readonly mandateKidTaken: (kid: string) => boolean;
  /** Resolves once the store's commits so far are on disk (Store.durable). */
  readonly durable: () => Promise<void>;
}

const MAX_NAME = 100;

/**
 * `/api/sidecars` (org_admin and up: create, list, revoke) and the sync API the sidecars call
 * with their own token (`/api/sync/*`, docs/sidecar.md).
 */
export function registerSidecarRoutes(router: Router<RouteHandler>, deps: SidecarRouteDeps): void {
  const { snapshot, sidecars, identity, approvals, audit, orgExists } = deps;

  const view = (r: SidecarRecord) => ({
    sidecar_id: r.sidecar_id,
    org_id: r.org_id,
    name: r.name,
    last4: r.last4,
    created_at: r.created_at,
    revoked_at: r.revoked_at,
  });

  router.add('POST', '/api/sidecars', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const raw = ctx.jsonObject();
    const body = strictBody<{ name: string; org_id?: string }>(raw, {
      name: { type: 'string', required: true, maxLength: MAX_NAME },
      org_id: { type: 'string' },
    });
    const org = targetOrg(ctx, p, body.org_id, orgExists);
    const { record, token } = await sidecars.create(org, body.name.trim(), p.id);
    await adminEvent(audit, org, p, 'sidecar_created', { sidecar_id: record.sidecar_id, name: record.name });
    ctx.json(201, { ...view(record), token });
  });

  router.add('GET', '/api/sidecars', (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    ctx.json(200, {
      data: sidecars.list(org).map((r) => ({
        ...view(r),
        sync: r.sync === null ? null : { epoch: r.sync.epoch, index: r.sync.index },
      })),
    });
  });

  router.add('DELETE', '/api/sidecars/:id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const before = sidecars.get(org, ctx.params.id as string);
    const r = await sidecars.revoke(org, ctx.params.id as string);
    if (before?.revoked_at === null)
      await adminEvent(audit, org, p, 'sidecar_revoked', { sidecar_id: r.sidecar_id });
    ctx.json(200, view(r));
  });

  // ---- the sync API (sidecar token)

  const sidecarOf = (ctx: Parameters<RouteHandler>[0]): SidecarRecord =>
    sidecars.authenticate(presentedCredential(ctx.req.headers));
  /** For its log's state and entries: a sidecar revoked moments ago still ships what it holds. */
  const shipperOf = (ctx: Parameters<RouteHandler>[0]): SidecarRecord =>
    sidecars.authenticate(presentedCredential(ctx.req.headers), { shipping: true });

  router.add('GET', '/api/sync/snapshot', (ctx) => {
    const sc = sidecarOf(ctx);
    const { etag, doc } = sidecars.snapshot(sc);
    if (ctx.header('if-none-match') === etag) {
      ctx.sendRaw(304, 'application/json', '', { etag });
      return;
    }
    ctx.json(200, doc, { etag, 'cache-control': 'no-store' });
  });

  const epochOf = (value: unknown, param: string): string => {
    if (typeof value !== 'string' || !EPOCH_PATTERN.test(value))
      throw new ServiceError('invalid_request', `${param} must be 8 to 64 characters of A-Z a-z 0-9 _ -`, {
        param,
      });
    return value;
  };

  router.add('GET', '/api/sync/state', (ctx) => {
    const sc = shipperOf(ctx);
    const s = sidecars.state(sc, epochOf(ctx.query.get('epoch') ?? undefined, 'epoch'));
    ctx.json(200, { epoch: s.epoch, index: s.index, hash: s.hash });
  });

  router.add('POST', '/api/sync/log', async (ctx) => {
    const sc = sidecarOf(ctx);
    const body = ctx.jsonObject();
    const epoch = epochOf(body.epoch, 'epoch');
    ctx.json(200, await sidecars.registerLog(sc, epoch, body.keys));
  });

  router.add('POST', '/api/sync/mandate-keys', async (ctx) => {
    const sc = sidecarOf(ctx);
    const body = ctx.jsonObject();
    ctx.json(200, await sidecars.registerMandateKeys(sc, body.keys, deps.mandateKidTaken));
  });

  router.add('POST', '/api/sync/events', async (ctx) => {
    const sc = shipperOf(ctx);
    const body = ctx.jsonObject();
    const epoch = epochOf(body.epoch, 'epoch');
    const entries = body.entries;
    if (!Array.isArray(entries) || entries.length === 0 || entries.length > MAX_SYNC_ENTRIES)
      throw new ServiceError(
        'invalid_request',
        `entries must be an array of 1 to ${MAX_SYNC_ENTRIES} events`,
        {
          param: 'entries',
        },
      );
    const seals = body.seals ?? [];
    if (!Array.isArray(seals) || seals.length > MAX_SYNC_ENTRIES)
      throw new ServiceError(
        'invalid_request',
        `seals must be an array of at most ${MAX_SYNC_ENTRIES} seals`,
        {
          param: 'seals',
        },
      );
    const s = await sidecars.ingest(sc, epoch, entries, seals);
    // Acknowledged only once on disk: the sidecar cuts what it was told is taken in, and a crash
    // of this machine must not take back entries the sidecar no longer holds.
    await deps.durable();
    ctx.json(200, { epoch: s.epoch, index: s.index, hash: s.hash, ingested: s.ingested });
  });

  // A call at a sidecar that an approval may allow: the approval is spent here, once, whichever
  // sidecar asks first (consume is one transaction; its `approval.consumed` event is this org's).
  router.add('POST', '/api/sync/approvals/consume', async (ctx) => {
    const sc = sidecarOf(ctx);
    const b = strictBody<{
      agent_uuid: string;
      fingerprint: string;
      min_tier: 'standard' | 'signed';
      pipeline_id?: string;
      consume_id?: string;
    }>(ctx.jsonObject(), {
      agent_uuid: { type: 'string', required: true, maxLength: 64 },
      fingerprint: { type: 'string', required: true, pattern: /^[0-9a-f]{64}$/ },
      min_tier: { type: 'string', required: true, enum: ['standard', 'signed'] },
      pipeline_id: { type: 'string', maxLength: 200 },
      consume_id: { type: 'string', pattern: /^[A-Za-z0-9_-]{16,64}$/ },
    });
    const agent = identity.getAgent(b.agent_uuid);
    if (agent?.org_id !== sc.org_id)
      throw new ServiceError('not_found', `agent ${b.agent_uuid} not found in this sidecar's org`, {
        param: 'agent_uuid',
      });
    const consumed = approvals.consume(sc.org_id, agent.agent_uuid, b.fingerprint, {
      pipelineId: b.pipeline_id ?? null,
      minTier: b.min_tier,
      ...(b.consume_id === undefined ? {} : { consumeId: b.consume_id }),
    });
    ctx.json(200, {
      consumed: consumed === undefined ? null : { id: consumed.id, decided_by: consumed.decided_by },
    });
  });

  // An LLM call at a sidecar that its policy sends for approval: the approval lives here, where
  // humans decide it. The sidecar names the agent; it must be one of the sidecar's org.
  router.add('POST', '/api/sync/approvals', async (ctx) => {
    const sc = sidecarOf(ctx);
    const b = strictBody<{
      agent_uuid: string;
      fingerprint: string;
      tier: 'standard' | 'signed';
      summary: string;
      matched_rule?: string;
      pipeline_id?: string;
      behavior_type?: string;
      tool?: string;
      credential_id?: string;
    }>(ctx.jsonObject(), {
      agent_uuid: { type: 'string', required: true, maxLength: 64 },
      fingerprint: { type: 'string', required: true, pattern: /^[0-9a-f]{64}$/ },
      tier: { type: 'string', required: true, enum: ['standard', 'signed'] },
      summary: { type: 'string', required: true, maxLength: 1000 },
      matched_rule: { type: 'string', maxLength: 200 },
      pipeline_id: { type: 'string', maxLength: 200 },
      behavior_type: { type: 'string', maxLength: 64 },
      tool: { type: 'string', maxLength: 200 },
      credential_id: { type: 'string', maxLength: 64 },
    });
    const agent = identity.getAgent(b.agent_uuid);
    if (agent?.org_id !== sc.org_id)
      throw new ServiceError('not_found', `agent ${b.agent_uuid} not found in this sidecar's org`, {
        param: 'agent_uuid',
      });
    const r = await approvals.create({
      org_id: sc.org_id,
      agent_id: agent.agent_id,
      agent_uuid: agent.agent_uuid,
      fingerprint: b.fingerprint,
      tier: b.tier,
      summary: b.summary,
      matched_rule: b.matched_rule ?? null,
      pipeline_id: b.pipeline_id ?? null,
      behavior_type: b.behavior_type ?? null,
      tool: b.tool ?? null,
      credential_id: b.credential_id ?? null,
    });
    ctx.json(200, {
      request_id: r.id,
      tier: r.tier,
      expires_at: r.expires_at,
      matched_rule: r.matched_rule,
      status: r.status,
    });
  });
}
