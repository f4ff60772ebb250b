import type { AuditInput, AuditRef, AuditSink } from '../audit/types.js';
import { ERASED } from '../core/chain/index.js';
import { ServiceError } from '../core/errors.js';
import { roleAtLeast } from '../identity/roles.js';
import type { Principal } from '../identity/types.js';
import type { Store } from '../store/db.js';
import { assertOrgLive } from '../store/org-tombstone.js';
import { newId } from '../util/ids.js';
import type { WebauthnEvidence } from './webauthn.js';

export const APPROVAL_STATUSES = [
  'pending',
  'approved',
  'denied',
  'cancelled',
  'revoked',
  'expired',
  'consumed',
] as const;
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];
export const APPROVAL_TIERS = ['standard', 'signed'] as const;
export type ApprovalTier = (typeof APPROVAL_TIERS)[number];
export type ApprovalDecision = 'approve' | 'deny';

export const DEFAULT_APPROVAL_TTL_MS = 15 * 60_000;
/** At most this many pending approvals are listed for one caller. */
const MAX_PENDING_LISTED = 1000;
/**
 * At most this many live (pending or approved) approvals per agent, pre-approvals included: each
 * new one is refused past it (429), so neither an agent nor a developer can make its list, and
 * its org's, grow without bound.
 */
export const MAX_LIVE_PER_AGENT = 1000;

export interface ApprovalRecord {
  readonly id: string;
  readonly org_id: string;
  readonly agent_id: string;
  readonly agent_uuid: string;
  readonly status: ApprovalStatus;
  readonly tier: ApprovalTier;
  /** SHA-256 of the JCS action (DESIGN C "Govern"); the identical call matches it. */
  readonly fingerprint: string;
  readonly summary: string;
  readonly matched_rule: string | null;
  /** The govern call that asked for the approval. */
  readonly pipeline_id: string | null;
  readonly behavior_type: string | null;
  readonly tool: string | null;
  /**
   * The credential whose call asked (`key_…`, or an acting admin's `tok_…`); null for a
   * pre-approval, and absent from records made before it was kept.
   */
  readonly credential_id?: string | null;
  readonly created_at: string;
  readonly expires_at: string;
  readonly decided_by: string | null;
  readonly decided_at: string | null;
  readonly reason: string | null;
}

export interface CreateApprovalInput {
  readonly org_id: string;
  readonly agent_id: string;
  readonly agent_uuid: string;
  readonly fingerprint: string;
  readonly tier: ApprovalTier;
  readonly summary: string;
  readonly matched_rule: string | null;
  readonly pipeline_id: string | null;
  readonly behavior_type: string | null;
  readonly tool: string | null;
  /** The credential whose call asks (see ApprovalRecord). */
  readonly credential_id?: string | null;
  readonly ttl_ms?: number;
}

export type PreApproveInput = Omit<CreateApprovalInput, 'tier'>;

export interface ConsumeOptions {
  /** The consuming govern call, recorded on the `approval.consumed` event. */
  readonly pipelineId?: string | null;
  /** 'signed' accepts only signed-tier approvals (a rule that asks for a signed approval). */
  readonly minTier?: ApprovalTier;
  /**
   * The asking call's own id for this consume (a sidecar's): asked again with the same id, the
   * approval it spent is returned again, while unexpired, and nothing else is spent. A sidecar that
   * lost the first answer (a cut connection, a timeout) retries with it, so the approval goes to
   * the call that asked rather than being spent on nothing.
   */
  readonly consumeId?: string;
}

export interface ApprovalPage {
  readonly data: ApprovalRecord[];
  readonly next_cursor: string | null;
}

type Transition = 'created' | 'decided' | 'cancelled' | 'revoked' | 'expired' | 'consumed';

interface Change {
  readonly event: Transition;
  readonly rec: ApprovalRecord;
  readonly actor?: Principal;
  /** A decision's verified WebAuthn assertion (signed tier), recorded whole for auditors. */
  readonly webauthn?: WebauthnEvidence;
  readonly pipelineId?: string | null;
  readonly preapproved?: boolean;
  /**
   * What the actor wrote with this transition (a decision's, a cancel's or a revoke's `reason`):
   * a personal field of its event (`personal.reason`), so an erasure reaches it.
   */
  readonly note?: string | null;
}

/*
 * Index keys in `approvalIndex` (one db, a tag first):
 *   ['f', org, agent_uuid, fingerprint, id] → null    live (pending | approved) records of an action
 *   ['x', org, expires_ms, id]              → status  live records by expiry (pending lists, expiry)
 *   ['o', org, created_ms, id]              → null    every record of an org, oldest first
 *   ['s', org, status, created_ms, id]      → null    every record of an org by status
 *   ['c', org, agent_uuid, fingerprint, consume_id] → id  what a consume id spent (ConsumeOptions)
 * Terminal records leave 'f' and 'x', so dedupe, consume and pending lists touch live records only.
 */
type Key = (string | number)[];
const HIGH = '\uffff';

const isLive = (s: ApprovalStatus): boolean => s === 'pending' || s === 'approved';
const expiresMs = (r: ApprovalRecord): number => Date.parse(r.expires_at);
/** Whether `rec` lets the call through: approved, and signed when a signed approval is asked for. */
const allows = (rec: ApprovalRecord, opts: ConsumeOptions): boolean =>
  rec.status === 'approved' && (opts.minTier !== 'signed' || rec.tier === 'signed');
const createdMs = (r: ApprovalRecord): number => Date.parse(r.created_at);
const fpKey = (r: ApprovalRecord): Key => ['f', r.org_id, r.agent_uuid, r.fingerprint, r.id];
const liveKey = (r: ApprovalRecord): Key => ['x', r.org_id, expiresMs(r), r.id];
const orgKey = (r: ApprovalRecord): Key => ['o', r.org_id, createdMs(r), r.id];
const statusKey = (r: ApprovalRecord): Key => ['s', r.org_id, r.status, createdMs(r), r.id];

const CURSOR_RE = /^(\d{1,15})\.(apr_[A-Za-z0-9]{1,64})$/;

function notFound(id: string): ServiceError {
  return new ServiceError('not_found', `approval ${id} not found`);
}

function notPending(rec: ApprovalRecord, want: string): ServiceError {
  return new ServiceError('approval_not_pending', `approval ${rec.id} is ${rec.status}, not ${want}`);
}

function isApprover(p: Principal): boolean {
  return p.kind === 'user' && roleAtLeast(p.role, 'developer');
}

function requireApprover(p: Principal, what: string): void {
  if (p.kind === 'agent')
    throw new ServiceError('forbidden', `an agent cannot ${what} approvals; a developer or higher decides`);
  if (!roleAtLeast(p.role, 'developer'))
    throw new ServiceError('forbidden', `${what} approvals needs the developer role or higher`);
}

/**
 * The approval lifecycle (DESIGN C "Approvals"): pending → approved | denied | cancelled |
 * expired; approved → consumed (the identical call, exactly once) | revoked | expired. Each
 * transition is one LMDB write transaction followed by its `approval.<transition>` audit event
 * in the org's chain. Expiry is lazy: a live record past `expires_at` becomes `expired` when it
 * is next touched (read, listed, consumed, deduped) or swept.
 */
export class ApprovalStore {
  readonly #recorded = new Set<(orgId: string, ref: AuditRef) => void>();

  constructor(
    private readonly store: Store,
    private readonly audit: AuditSink,
    private readonly clock: () => number = Date.now,
  ) {}

  /**
   * Calls `listener` with each transition's audit event once it is committed, in the org chain's
   * order (the approval feed: docs/api.md "Approvals"). Returns the unsubscribe function.
   */
  onRecorded(listener: (orgId: string, ref: AuditRef) => void): () => void {
    this.#recorded.add(listener);
    return () => this.#recorded.delete(listener);
  }

  /** A new pending approval, or the pending one already asked for by the identical call. */
  async create(input: CreateApprovalInput): Promise<ApprovalRecord> {
    const now = this.clock();
    // Read-only first: an agent retrying a blocked call must cost no write transaction.
    for (const rec of this.liveFor(input.org_id, input.agent_uuid, input.fingerprint)) {
      if (rec.status === 'pending' && rec.tier === input.tier && now < expiresMs(rec)) return rec;
    }
    await this.makeRoom(input.org_id, input.agent_uuid, now);
    const changes: Change[] = [];
    let result: ApprovalRecord | undefined;
    this.store.root.transactionSync(() => {
      assertOrgLive(this.store, input.org_id);
      for (const found of this.liveFor(input.org_id, input.agent_uuid, input.fingerprint)) {
        const rec = this.expireIfDue(found, now, changes);
        if (rec.status === 'pending' && rec.tier === input.tier) {
          result = rec;
          return;
        }
      }
      this.checkRoom(input.org_id, input.agent_uuid, input.agent_id);
      result = this.insert(this.newRecord(input, input.tier, now), changes);
    });
    await this.record(changes);
    return result as ApprovalRecord;
  }

  /**
   * `/v1/govern/approve`: a developer+ human approves an action ahead of the call. An unexpired
   * approval of the same action is returned as is; a pending standard-tier request for it is
   * approved; otherwise a new record is created already approved.
   */
  async preApprove(input: PreApproveInput, by: Principal): Promise<ApprovalRecord> {
    requireApprover(by, 'pre-approve');
    if (by.org_id !== input.org_id && by.role !== 'super_admin')
      throw new ServiceError('forbidden', 'only a super_admin can act on another org');
    const now = this.clock();
    await this.makeRoom(input.org_id, input.agent_uuid, now);
    const changes: Change[] = [];
    let result: ApprovalRecord | undefined;
    this.store.root.transactionSync(() => {
      assertOrgLive(this.store, input.org_id);
      let pending: ApprovalRecord | undefined;
      for (const found of this.liveFor(input.org_id, input.agent_uuid, input.fingerprint)) {
        const rec = this.expireIfDue(found, now, changes);
        if (rec.status === 'approved') {
          result = rec;
          return;
        }
        if (rec.status === 'pending' && rec.tier === 'standard') pending ??= rec;
        // A pre-approval is of the standard tier: it does not stand in for a signed decision
        // (the call would still need its signed approval, so "approved" would change nothing).
        if (rec.status === 'pending' && rec.tier === 'signed')
          throw new ServiceError(
            'webauthn_required',
            `this action waits for a signed-tier approval (${rec.id}): decide it with a WebAuthn assertion (POST /v1/me/approvals/${rec.id}/decide); a pre-approval cannot stand in for it`,
          );
      }
      if (pending) {
        result = this.apply(pending, this.decided(pending, by, 'approved', null, now), changes, {
          event: 'decided',
          actor: by,
        });
        return;
      }
      const fresh: ApprovalRecord = {
        ...this.newRecord(input, 'standard', now),
        status: 'approved',
        decided_by: by.id,
        decided_at: new Date(now).toISOString(),
      };
      // A pre-approval counts against the agent's cap too: it is one of its live approvals.
      this.checkRoom(input.org_id, input.agent_uuid, input.agent_id);
      result = this.insert(fresh, changes, by);
    });
    await this.record(changes);
    return result as ApprovalRecord;
  }

  /**
   * The approval `consume` would take now, read only: the call it would allow may still be
   * refused by a later check, and then it must stay unspent.
   */
  granted(
    orgId: string,
    agentUuid: string,
    fingerprint: string,
    opts: ConsumeOptions = {},
  ): ApprovalRecord | undefined {
    const now = this.clock();
    for (const rec of this.liveFor(orgId, agentUuid, fingerprint)) {
      if (now < expiresMs(rec) && allows(rec, opts)) return rec;
    }
    return undefined;
  }

  /**
   * Marks an approved, unexpired approval of this action consumed and returns it; undefined when
   * there is none. The check and the write are one transaction, so of two identical calls at
   * once only one is allowed. Synchronous for the govern hot path: its `approval.consumed` event
   * is appended at once, so it precedes the call's own decision event in the org chain and is
   * committed with it or before it (the caller awaits that one). The governor calls it once
   * `granted` found one: most governed calls have no approval, and they must not write.
   */
  consume(
    orgId: string,
    agentUuid: string,
    fingerprint: string,
    opts: ConsumeOptions = {},
  ): ApprovalRecord | undefined {
    const now = this.clock();
    const changes: Change[] = [];
    let result: ApprovalRecord | undefined;
    const spentKey =
      opts.consumeId === undefined ? undefined : ['c', orgId, agentUuid, fingerprint, opts.consumeId];
    this.store.root.transactionSync(() => {
      if (spentKey !== undefined) {
        const spent = this.store.approvalIndex.get(spentKey) as string | undefined;
        const rec =
          spent === undefined ? undefined : (this.store.approvals.get(spent) as ApprovalRecord | undefined);
        // What it spent, while unexpired and of the tier the call asks for now (a rule that came to
        // ask for a signed approval meanwhile is not met by a standard one); else a live one.
        if (
          rec?.status === 'consumed' &&
          now < expiresMs(rec) &&
          (opts.minTier !== 'signed' || rec.tier === 'signed')
        ) {
          result = rec;
          return;
        }
      }
      for (const found of this.liveFor(orgId, agentUuid, fingerprint)) {
        const rec = this.expireIfDue(found, now, changes);
        if (!allows(rec, opts)) continue;
        result = this.apply(rec, { ...rec, status: 'consumed' }, changes, {
          event: 'consumed',
          pipelineId: opts.pipelineId ?? null,
        });
        if (spentKey !== undefined) this.store.approvalIndex.putSync(spentKey, rec.id);
        return;
      }
    });
    // A failing append means a failing audit store: the caller's own decision event, queued
    // after this one, fails the same way and fails the call.
    this.record(changes).catch(() => {});
    return result;
  }

  /**
   * What the caller may act on: a developer+ human gets the pending approvals of their org, or of
   * `org` (a super_admin's choice; soonest to expire first), an agent its own pending requests,
   * anyone else nothing.
   */
  async pendingFor(principal: Principal, org: string = principal.org_id): Promise<ApprovalRecord[]> {
    const now = this.clock();
    const due: string[] = [];
    const ids: string[] = [];
    const idx = this.store.approvalIndex;
    if (principal.kind === 'agent') {
      for (const key of idx.getKeys({
        start: ['f', org, principal.id],
        end: ['f', org, principal.id, HIGH],
      })) {
        ids.push((key as Key)[4] as string);
      }
    } else if (isApprover(principal)) {
      for (const { key, value } of idx.getRange({ start: ['x', org], end: ['x', org, HIGH] })) {
        const k = key as Key;
        if ((k[2] as number) <= now) due.push(k[3] as string);
        else if (value === 'pending' && ids.length < MAX_PENDING_LISTED) ids.push(k[3] as string);
      }
    }
    const out: ApprovalRecord[] = [];
    for (const id of ids) {
      const rec = this.store.approvals.get(id) as ApprovalRecord | undefined;
      if (rec === undefined || rec.status !== 'pending') continue;
      if (now >= expiresMs(rec)) due.push(id);
      else if (out.length < MAX_PENDING_LISTED) out.push(rec);
    }
    if (due.length > 0) await this.expireIds(due, now);
    if (principal.kind === 'agent') out.sort((a, b) => expiresMs(a) - expiresMs(b));
    return out;
  }

  /** One approval of the org (undefined when missing or another org's), expired if it is due. */
  async get(id: string, orgId: string): Promise<ApprovalRecord | undefined> {
    const rec = this.store.approvals.get(id) as ApprovalRecord | undefined;
    if (rec === undefined || rec.org_id !== orgId) return undefined;
    const now = this.clock();
    if (!isLive(rec.status) || now < expiresMs(rec)) return rec;
    await this.expireIds([id], now);
    return this.store.approvals.get(id) as ApprovalRecord;
  }

  /**
   * Approve or deny a pending approval: developer+ humans of its org; never an agent. A signed-tier
   * approval needs `webauthn`: the decider's assertion, verified by the caller (WebauthnDesk),
   * which the `approval.decided` event records.
   */
  async decide(
    id: string,
    principal: Principal,
    decision: ApprovalDecision,
    reason?: string,
    webauthn?: WebauthnEvidence,
    orgId: string = principal.org_id,
  ): Promise<ApprovalRecord> {
    requireApprover(principal, 'decide');
    return this.update(id, principal, orgId, (rec, now) => {
      if (rec.status !== 'pending') return notPending(rec, 'pending');
      if (rec.tier === 'signed' && webauthn === undefined) {
        return new ServiceError(
          'webauthn_required',
          `approval ${rec.id} is signed tier: its decision must carry a WebAuthn assertion (webauthn) ` +
            `over the challenge of GET /v1/me/approvals/${rec.id}/challenge`,
          { param: 'webauthn' },
        );
      }
      const status = decision === 'approve' ? 'approved' : 'denied';
      const next = this.decided(rec, principal, status, reason ?? null, now);
      const note = reason ?? null;
      return webauthn === undefined
        ? { next, event: 'decided', note }
        : { next, event: 'decided', note, webauthn };
    });
  }

  /**
   * What deciding `id` would refuse before looking at its state: a caller who may not decide
   * (403), an approval that is not in `orgId` (404). Checked before a decision's WebAuthn
   * assertion is, so a missing approval reads as missing whatever the body carries.
   */
  assertDecidable(id: string, principal: Principal, orgId: string = principal.org_id): void {
    requireApprover(principal, 'decide');
    const found = this.store.approvals.get(id) as ApprovalRecord | undefined;
    if (found === undefined || found.org_id !== orgId) throw notFound(id);
  }

  /** Cancel a pending request: the agent that asked, or a developer+ human of the org. */
  async cancel(
    id: string,
    principal: Principal,
    reason?: string,
    orgId: string = principal.org_id,
  ): Promise<ApprovalRecord> {
    if (principal.kind === 'user') requireApprover(principal, 'cancel');
    return this.update(id, principal, orgId, (rec, now) => {
      // Another agent's request is not this agent's business: reported as missing.
      if (principal.kind === 'agent' && rec.agent_uuid !== principal.id) return notFound(id);
      if (rec.status !== 'pending') return notPending(rec, 'pending');
      // A person's cancel of a signed-tier request ends it as a denial would: it needs the
      // denial's signature (spec: the owner cancels; the agent that asked still may).
      if (principal.kind === 'user' && rec.tier === 'signed')
        return new ServiceError(
          'webauthn_required',
          `approval ${id} is signed-tier: deny it with a WebAuthn assertion (POST /v1/me/approvals/${id}/decide) instead of cancelling it`,
        );
      const next: ApprovalRecord = {
        ...rec,
        status: 'cancelled',
        decided_by: principal.id,
        decided_at: new Date(now).toISOString(),
        reason: reason ?? rec.reason,
      };
      return { next, event: 'cancelled', note: reason ?? null };
    });
  }

  /** Revoke an approval granted and not yet consumed: developer+ humans of the org. */
  async revoke(
    id: string,
    principal: Principal,
    reason?: string,
    orgId: string = principal.org_id,
  ): Promise<ApprovalRecord> {
    requireApprover(principal, 'revoke');
    return this.update(id, principal, orgId, (rec, now) => {
      if (rec.status !== 'approved') return notPending(rec, 'approved');
      const next: ApprovalRecord = {
        ...rec,
        status: 'revoked',
        decided_by: principal.id,
        decided_at: new Date(now).toISOString(),
        reason: reason ?? rec.reason,
      };
      return { next, event: 'revoked', note: reason ?? null };
    });
  }

  /**
   * Every approval of the org, newest first, optionally of one status. Due expiries are applied
   * first so the status filter is exact. The cursor is the last item's `created_ms.id`.
   */
  async list(
    orgId: string,
    opts: { status?: ApprovalStatus; limit: number; cursor?: string },
  ): Promise<ApprovalPage> {
    await this.expireDue(orgId);
    const prefix: Key = opts.status === undefined ? ['o', orgId] : ['s', orgId, opts.status];
    let start: Key = [...prefix, Number.MAX_SAFE_INTEGER];
    if (opts.cursor !== undefined) {
      const m = CURSOR_RE.exec(opts.cursor);
      if (!m) throw new ServiceError('invalid_request', 'cursor is not valid', { param: 'cursor' });
      start = [...prefix, Number(m[1]), m[2] as string];
    }
    const data: ApprovalRecord[] = [];
    let more = false;
    for (const key of this.store.approvalIndex.getKeys({
      start,
      end: prefix,
      reverse: true,
      exclusiveStart: opts.cursor !== undefined,
    })) {
      if (data.length === opts.limit) {
        more = true;
        break;
      }
      const rec = this.store.approvals.get((key as Key)[prefix.length + 1] as string) as
        | ApprovalRecord
        | undefined;
      if (rec !== undefined) data.push(rec);
    }
    const last = data[data.length - 1];
    return { data, next_cursor: more && last ? `${createdMs(last)}.${last.id}` : null };
  }

  /** Expires every due live approval of one org; returns how many. */
  async expireDue(orgId: string): Promise<number> {
    const now = this.clock();
    const due: string[] = [];
    for (const key of this.store.approvalIndex.getKeys({ start: ['x', orgId], end: ['x', orgId, now + 1] })) {
      due.push((key as Key)[3] as string);
    }
    return due.length === 0 ? 0 : this.expireIds(due, now);
  }

  /**
   * Deletes the org's approvals created before `beforeMs` that are over (denied, cancelled,
   * revoked, expired, consumed), with their index entries, in transactions of a few hundred so
   * calls go on meanwhile; returns how many. A retention run calls it with its cutoff: the
   * records' transitions stay in the audit trail as long as the trail keeps them, and the records
   * themselves (an agent can create and cancel them as fast as it calls) do not outlive it.
   */
  async pruneBefore(orgId: string, beforeMs: number): Promise<number> {
    await this.expireDue(orgId);
    const { approvals, approvalIndex } = this.store;
    const gone = new Set<string>();
    let from: Key = ['o', orgId];
    for (;;) {
      const keys: Key[] = [];
      for (const key of approvalIndex.getKeys({ start: from, end: ['o', orgId, beforeMs], limit: 500 }))
        keys.push(key as Key);
      if (keys.length === 0) break;
      await this.store.root.transaction(() => {
        for (const key of keys) {
          const id = key[3] as string;
          const rec = approvals.get(id) as ApprovalRecord | undefined;
          if (rec !== undefined && isLive(rec.status)) continue; // pending or approved: kept
          approvalIndex.removeSync(key);
          if (rec === undefined) continue;
          approvalIndex.removeSync(statusKey(rec));
          approvals.removeSync(id);
          gone.add(id);
        }
      });
      // Past the last key read: the live ones stay behind it, and nothing older is added.
      from = [...(keys[keys.length - 1] as Key), HIGH];
    }
    // What a consume id spent (['c', …]) goes with the approval it names.
    if (gone.size > 0)
      await this.store.root.transaction(() => {
        for (const { key, value } of approvalIndex.getRange({ start: ['c', orgId], end: ['c', orgId, HIGH] }))
          if (gone.has(value as string)) approvalIndex.removeSync(key);
      });
    return gone.size;
  }

  /**
   * The org's approval records that hold a person's data, oldest first: decided (approved, denied,
   * cancelled, revoked, pre-approved) by one of `userIds`, or with a `reason` that `holds` finds
   * them in. An erasure's and a DSAR's; read through the org's index, no request pays for it.
   */
  ofSubject(
    orgId: string,
    userIds: ReadonlySet<string>,
    holds: (reason: string) => boolean,
  ): ApprovalRecord[] {
    const out: ApprovalRecord[] = [];
    for (const key of this.store.approvalIndex.getKeys({ start: ['o', orgId], end: ['o', orgId, HIGH] })) {
      const rec = this.store.approvals.get((key as Key)[3] as string) as ApprovalRecord | undefined;
      if (rec === undefined) continue;
      const decider = rec.decided_by !== null && userIds.has(rec.decided_by);
      if (decider || (rec.reason !== null && rec.reason !== ERASED && holds(rec.reason))) out.push(rec);
    }
    return out;
  }

  /**
   * Erases a person from the org's approval records (GDPR erasure; see `ofSubject`): the
   * `decided_by` that is them and the reason of a record they decided, or a reason naming them,
   * become `[ERASED:GDPR-Art17]`. The status, the times and the action stay, as the approval's
   * events do. Returns how many records changed.
   */
  async eraseSubject(
    orgId: string,
    userIds: ReadonlySet<string>,
    holds: (reason: string) => boolean,
  ): Promise<number> {
    const found = this.ofSubject(orgId, userIds, holds);
    const erased = (rec: ApprovalRecord): ApprovalRecord => {
      const decider = rec.decided_by !== null && userIds.has(rec.decided_by);
      return {
        ...rec,
        decided_by: decider ? ERASED : rec.decided_by,
        reason: rec.reason !== null && (decider || holds(rec.reason)) ? ERASED : rec.reason,
      };
    };
    for (let i = 0; i < found.length; i += 500) {
      const part = found.slice(i, i + 500);
      await this.store.root.transaction(() => {
        for (const { id } of part) {
          // Read again: a transition since `ofSubject` (an expiry, a consume) is kept.
          const rec = this.store.approvals.get(id) as ApprovalRecord | undefined;
          if (rec !== undefined) this.store.approvals.putSync(id, erased(rec));
        }
      });
    }
    return found.length;
  }

  /**
   * The org is being deleted: every live approval of it ends, a pending one `cancelled`, an
   * approved one not yet consumed `revoked` (by `by`, the super_admin deleting it, with the reason
   * `org deleted`), each an `approval.*` event of the org's chain as any transition is, and heard
   * by the approval streams. One transaction; returns how many of each.
   */
  async retireOrg(orgId: string, by: Principal): Promise<{ cancelled: number; revoked: number }> {
    const now = this.clock();
    const changes: Change[] = [];
    const ended = { cancelled: 0, revoked: 0 };
    this.store.root.transactionSync(() => {
      const ids = [...this.store.approvalIndex.getKeys({ start: ['x', orgId], end: ['x', orgId, HIGH] })].map(
        (key) => (key as Key)[3] as string,
      );
      for (const id of ids) {
        const rec = this.store.approvals.get(id) as ApprovalRecord | undefined;
        if (rec === undefined || !isLive(rec.status)) continue;
        const status = rec.status === 'pending' ? 'cancelled' : 'revoked';
        const next: ApprovalRecord = {
          ...rec,
          status,
          decided_by: by.id,
          decided_at: new Date(now).toISOString(),
          reason: 'org deleted',
        };
        this.apply(rec, next, changes, { event: status, actor: by, note: null });
        ended[status]++;
      }
    });
    await this.record(changes);
    return ended;
  }

  /** Expires every due live approval of every org (for a timer; not on the request path). */
  async sweepExpired(): Promise<number> {
    const now = this.clock();
    const due: string[] = [];
    for (const key of this.store.approvalIndex.getKeys({ start: ['x'], end: ['x', HIGH] })) {
      const k = key as Key;
      if ((k[2] as number) <= now) due.push(k[3] as string);
    }
    return due.length === 0 ? 0 : this.expireIds(due, now);
  }

  // ---- internals

  private newRecord(input: PreApproveInput, tier: ApprovalTier, now: number): ApprovalRecord {
    const ttl = input.ttl_ms !== undefined && input.ttl_ms > 0 ? input.ttl_ms : DEFAULT_APPROVAL_TTL_MS;
    return {
      id: newId('apr_'),
      org_id: input.org_id,
      agent_id: input.agent_id,
      agent_uuid: input.agent_uuid,
      status: 'pending',
      tier,
      fingerprint: input.fingerprint,
      summary: input.summary,
      matched_rule: input.matched_rule,
      pipeline_id: input.pipeline_id,
      behavior_type: input.behavior_type,
      tool: input.tool,
      credential_id: input.credential_id ?? null,
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + ttl).toISOString(),
      decided_by: null,
      decided_at: null,
      reason: null,
    };
  }

  private decided(
    rec: ApprovalRecord,
    by: Principal,
    status: 'approved' | 'denied',
    reason: string | null,
    now: number,
  ): ApprovalRecord {
    return { ...rec, status, decided_by: by.id, decided_at: new Date(now).toISOString(), reason };
  }

  /** The agent's live (pending or approved) approvals, counted from the index: no record is read. */
  private liveCount(orgId: string, agentUuid: string): number {
    return this.store.approvalIndex.getKeysCount({
      start: ['f', orgId, agentUuid],
      end: ['f', orgId, agentUuid, HIGH],
    });
  }

  /**
   * Before a new approval of an agent at its cap: the org's approvals past their expiry are
   * expired first, in a transaction of their own (committed and audited even when the new one is
   * then refused), so the cap counts live ones only. Only the due part of the expiry index is read.
   */
  private async makeRoom(orgId: string, agentUuid: string, now: number): Promise<void> {
    if (this.liveCount(orgId, agentUuid) < MAX_LIVE_PER_AGENT) return;
    const due: string[] = [];
    for (const key of this.store.approvalIndex.getKeys({ start: ['x', orgId], end: ['x', orgId, now, HIGH] }))
      due.push((key as Key)[3] as string);
    if (due.length > 0) await this.expireIds(due, now);
  }

  /** Inside the write transaction that would add one: refuses it at the agent's cap (429). */
  private checkRoom(orgId: string, agentUuid: string, agentId: string): void {
    if (this.liveCount(orgId, agentUuid) < MAX_LIVE_PER_AGENT) return;
    throw new ServiceError(
      'rate_limited',
      `agent ${agentId} already has ${MAX_LIVE_PER_AGENT} pending or approved approvals; wait for them to be decided, consumed or expired`,
      // Room comes back as approvals are decided, consumed or expire (within 15 minutes).
      { headers: { 'retry-after': '60' } },
    );
  }

  /** The live records of one action (reads inside a write transaction see its writes). */
  private liveFor(orgId: string, agentUuid: string, fingerprint: string): ApprovalRecord[] {
    const out: ApprovalRecord[] = [];
    for (const key of this.store.approvalIndex.getKeys({
      start: ['f', orgId, agentUuid, fingerprint],
      end: ['f', orgId, agentUuid, fingerprint, HIGH],
    })) {
      const rec = this.store.approvals.get((key as Key)[4] as string) as ApprovalRecord | undefined;
      if (rec !== undefined) out.push(rec);
    }
    return out;
  }

  /** Inside a write transaction. */
  private insert(rec: ApprovalRecord, changes: Change[], actor?: Principal): ApprovalRecord {
    const { approvals, approvalIndex } = this.store;
    approvals.putSync(rec.id, rec);
    approvalIndex.putSync(fpKey(rec), null);
    approvalIndex.putSync(liveKey(rec), rec.status);
    approvalIndex.putSync(orgKey(rec), null);
    approvalIndex.putSync(statusKey(rec), null);
    changes.push(
      actor === undefined
        ? { event: 'created', rec }
        : { event: 'created', rec, actor, preapproved: rec.status === 'approved' },
    );
    return rec;
  }

  /** Inside a write transaction: writes `next` over `prev` and moves its index entries. */
  private apply(
    prev: ApprovalRecord,
    next: ApprovalRecord,
    changes: Change[],
    change: Omit<Change, 'rec'>,
  ): ApprovalRecord {
    const { approvals, approvalIndex } = this.store;
    approvals.putSync(next.id, next);
    if (prev.status !== next.status) {
      approvalIndex.removeSync(statusKey(prev));
      approvalIndex.putSync(statusKey(next), null);
    }
    if (isLive(next.status)) {
      approvalIndex.putSync(liveKey(next), next.status);
    } else {
      approvalIndex.removeSync(liveKey(prev));
      approvalIndex.removeSync(fpKey(prev));
    }
    changes.push({ ...change, rec: next });
    return next;
  }

  /** Inside a write transaction: a live record past its expiry becomes expired. */
  private expireIfDue(rec: ApprovalRecord, now: number, changes: Change[]): ApprovalRecord {
    if (!isLive(rec.status) || now < expiresMs(rec)) return rec;
    return this.apply(rec, { ...rec, status: 'expired' }, changes, { event: 'expired' });
  }

  private async expireIds(ids: readonly string[], now: number): Promise<number> {
    const changes: Change[] = [];
    this.store.root.transactionSync(() => {
      for (const id of ids) {
        const rec = this.store.approvals.get(id) as ApprovalRecord | undefined;
        if (rec !== undefined) this.expireIfDue(rec, now, changes);
      }
    });
    await this.record(changes);
    return changes.length;
  }

  /**
   * One transition of one record, checked and written in one transaction. `step` returns the
   * next record or the error to answer; a due expiry found on the way is kept either way.
   */
  private async update(
    id: string,
    actor: Principal,
    orgId: string,
    step: (
      rec: ApprovalRecord,
      now: number,
    ) =>
      | { next: ApprovalRecord; event: Transition; note: string | null; webauthn?: WebauthnEvidence }
      | ServiceError,
  ): Promise<ApprovalRecord> {
    const now = this.clock();
    const changes: Change[] = [];
    // Assigned inside the transaction callback (the cast keeps TypeScript from narrowing it here).
    let outcome = notFound(id) as ApprovalRecord | ServiceError;
    this.store.root.transactionSync(() => {
      const found = this.store.approvals.get(id) as ApprovalRecord | undefined;
      if (found === undefined || found.org_id !== orgId) return;
      const rec = this.expireIfDue(found, now, changes);
      const r = step(rec, now);
      if (r instanceof ServiceError) {
        outcome = r;
        return;
      }
      outcome = this.apply(
        rec,
        r.next,
        changes,
        r.webauthn === undefined
          ? { event: r.event, actor, note: r.note }
          : { event: r.event, actor, note: r.note, webauthn: r.webauthn },
      );
    });
    await this.record(changes);
    if (outcome instanceof ServiceError) throw outcome;
    return outcome;
  }

  /**
   * Appends the audit events of committed transitions, in order. Each is announced to the
   * listeners as its own commit resolves: commits resolve in seq order, so they hear them so too.
   */
  private async record(changes: readonly Change[]): Promise<void> {
    if (changes.length === 0) return;
    await Promise.all(
      changes.map((c) =>
        this.audit.append(this.event(c)).then((ref) => {
          for (const listener of this.#recorded) {
            try {
              listener(c.rec.org_id, ref);
            } catch {
              // a listener's failure is its own; the transition is committed and audited
            }
          }
          return ref;
        }),
      ),
    );
  }

  private event(c: Change): AuditInput {
    const r = c.rec;
    const details: Record<string, unknown> = {
      approval_id: r.id,
      fingerprint: r.fingerprint,
      tier: r.tier,
      status: r.status,
      matched_rule: r.matched_rule,
      tool: r.tool,
      expires_at: r.expires_at,
      // Who asked, beside `actor` (who decided): one person minting a key and approving what it
      // asks for shows as the same user behind both.
      request_credential_id: r.credential_id ?? null,
    };
    if (c.actor !== undefined) {
      details.actor = c.actor.id;
      details.actor_kind = c.actor.kind;
      details.credential_id = c.actor.credential_id;
    }
    if (c.preapproved) details.preapproved = true;
    if (c.webauthn !== undefined) details.webauthn = c.webauthn;
    if (c.event === 'consumed') details.request_pipeline_id = r.pipeline_id;
    // The summary is the rule's words; what a person or an agent wrote goes in `personal`, where an
    // erasure reaches it, and only on the transition that wrote it (not copied onto later ones).
    const input: AuditInput = {
      org_id: r.org_id,
      event_type: `approval.${c.event}`,
      agent_id: r.agent_id,
      pipeline_id: c.event === 'consumed' ? (c.pipelineId ?? r.pipeline_id) : r.pipeline_id,
      behavior_type: r.behavior_type,
      outcome: r.status,
      reason: c.event === 'created' ? r.summary : null,
      rule_id: r.matched_rule,
      details,
    };
    return c.note === undefined || c.note === null ? input : { ...input, personal: { reason: c.note } };
  }
}
