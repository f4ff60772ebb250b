import type { AuditSink } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import { NO_PARAMS } from '../http/context.js';
import type { Router } from '../http/router.js';
import { requireRole } from '../identity/guard.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { OrgRecord, Principal } from '../identity/types.js';
import type { Snapshot } from '../snapshot/types.js';
import { adminEvent } from './admin-event.js';
import { DEFAULT_ORG } from './bootstrap.js';

/**
 * What deleting an org removes besides its identities, each desk's own part. Every method acts
 * on what the org holds at the time (after its tombstone is committed: nothing new can be added)
 * and returns how much it removed.
 */
export interface OrgDeletionDeps {
  readonly identity: IdentityRepo;
  readonly audit: AuditSink;
  readonly sidecars: { retireOrg(org: string): Promise<{ revoked: number; tokens: number }> };
  readonly approvals: {
    retireOrg(org: string, by: Principal): Promise<{ cancelled: number; revoked: number }>;
  };
  readonly alerts: { dropOrg(org: string): Promise<number> };
  readonly exports: { dropOrg(org: string): Promise<number> };
  readonly tools: { dropOrg(org: string): number };
  readonly settings: { dropOrg(org: string): { secrets: number; settings: number } };
  readonly idempotency: { dropOrg(org: string): Promise<number> };
  readonly authenticators: { removeOrg(org: string): Promise<number> };
}

/** The answer to `DELETE /api/orgs/{id}` and the details of its `admin.org_deleted` events. */
export interface OrgDeleted {
  readonly org_id: string;
  readonly name: string;
  readonly deleted_at: string;
  readonly deleted_by: string;
  readonly removed: Readonly<Record<string, number>>;
}

/**
 * Deletes an org (`DELETE /api/orgs/{id}`, super_admin; docs/api.md "Orgs", docs/ops.md
 * "Deleting an org"). In this order:
 *
 * 1. One transaction: the org's record becomes a tombstone (`deleted_at`; its name is released,
 *    its id is never reused), its users, agents and every credential of the org are deleted. From
 *    its commit no agent key or token of the org authenticates, every org-scoped route answers
 *    404 for it, and its sidecars' tokens are refused (they forget their snapshot at their next
 *    poll and decide nothing more).
 * 2. Its sidecars are revoked and their tokens deleted; its live approvals end (pending:
 *    cancelled, approved: revoked, each an event of its chain); its export and alert
 *    destinations stop and go; its tools, provider list and every vault secret of the org go;
 *    its Idempotency-Key replays and its users' authenticators go.
 * 3. `admin.org_deleted` is recorded in the org's own chain (its last event: what ended it) and
 *    then in the deployment's `_system` chain, naming who deleted it and the counts of what was
 *    removed; the tombstone keeps the counts too, which marks the deletion complete.
 *
 * The org's audit chain (events, seals, Merkle nodes, JSONL log), its policies and its erasure
 * requests are kept: a super_admin still reads and verifies the chain with `?org_id=` until
 * retention prunes it. A deletion cut short (the process stopped under it) is finished by the
 * next DELETE; a completed one answers 404, and so does a second DELETE made while the first runs,
 * once the first is done.
 */
export class OrgDeletion {
  readonly #deps: OrgDeletionDeps;
  readonly #running = new Map<string, Promise<OrgDeleted>>();

  constructor(deps: OrgDeletionDeps) {
    this.#deps = deps;
  }

  /** Refuses what may not be deleted: the bootstrap org, and the caller's own (409 `org_protected`). */
  #check(org: string, p: Principal): OrgRecord {
    const record = this.#deps.identity.orgRecord(org);
    if (record === undefined || record.removed !== undefined)
      throw new ServiceError('not_found', `org ${org} does not exist`);
    if (org === DEFAULT_ORG)
      throw new ServiceError(
        'org_protected',
        `org ${DEFAULT_ORG} is the bootstrap org (it holds the bootstrap token and is created again at every start): it cannot be deleted`,
      );
    if (org === p.org_id)
      throw new ServiceError(
        'org_protected',
        'you cannot delete your own org (it would delete you and the token you are using): ask a super_admin of another org',
      );
    return record;
  }

  async delete(org: string, p: Principal): Promise<OrgDeleted> {
    const running = this.#running.get(org);
    if (running !== undefined) {
      // The same org asked for twice at once: the second waits for the first, then finds it gone.
      await running.catch(() => {});
      throw new ServiceError('not_found', `org ${org} does not exist`);
    }
    this.#check(org, p);
    const run = this.#run(org, p);
    this.#running.set(org, run);
    try {
      return await run;
    } finally {
      this.#running.delete(org);
    }
  }

  async #run(org: string, p: Principal): Promise<OrgDeleted> {
    const d = this.#deps;
    const retired = d.identity.retireOrg(org, p.id);
    const sidecars = await d.sidecars.retireOrg(org);
    const approvals = await d.approvals.retireOrg(org, p);
    const exportDestinations = await d.exports.dropOrg(org);
    const alertDestinations = await d.alerts.dropOrg(org);
    const tools = d.tools.dropOrg(org);
    // After the desks: the secrets and settings entries they did not remove themselves.
    const settings = d.settings.dropOrg(org);
    const replays = await d.idempotency.dropOrg(org);
    // By the org each names: a deletion run again after one cut short finds no user of it left.
    const authenticators = await d.authenticators.removeOrg(org);
    const removed = {
      ...retired.removed,
      authenticators,
      sidecars_revoked: sidecars.revoked,
      sidecar_tokens: sidecars.tokens,
      approvals_cancelled: approvals.cancelled,
      approvals_revoked: approvals.revoked,
      export_destinations: exportDestinations,
      alert_destinations: alertDestinations,
      tools,
      secrets: settings.secrets,
      settings_entries: settings.settings,
      idempotency_replays: replays,
    };
    const result: OrgDeleted = {
      org_id: org,
      name: retired.record.name,
      deleted_at: retired.record.deleted_at as string,
      deleted_by: p.id,
      removed,
    };
    // The org chain's last event says what ended it; the `_system` chain records the deletion
    // as it records the creation (DESIGN C, Scope).
    await adminEvent(d.audit, org, p, 'org_deleted', { ...result });
    await d.audit.append({
      org_id: '_system',
      event_type: 'admin.org_deleted',
      outcome: 'allow',
      details: { actor: p.id, actor_kind: p.kind, credential_id: p.credential_id, ...result },
    });
    d.identity.completeOrgDeletion(org, removed);
    return result;
  }
}

/** `DELETE /api/orgs/{org_id}` (super_admin). */
export function registerOrgDeletion(
  router: Router<RouteHandler>,
  deletion: OrgDeletion,
  snapshot: Snapshot,
): void {
  router.add('DELETE', '/api/orgs/:org_id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'super_admin');
    ctx.onlyParams(NO_PARAMS, 'a parameter of DELETE /api/orgs/{org_id}');
    const result = await deletion.delete(ctx.params.org_id as string, p);
    ctx.json(200, { ...result, deleted: true });
  });
}
