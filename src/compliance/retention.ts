import type { ApprovalStore } from '../approvals/store.js';
import type { ChainLog } from '../audit/chain-log.js';
import type { AuditSink } from '../audit/types.js';
import type { ChainBridge, JsonValue } from '../core/chain/index.js';
import { ServiceError } from '../core/errors.js';
import type { Principal } from '../identity/types.js';
import { OrgQueue } from '../util/org-queue.js';
import type { RetentionArchive } from './archive.js';

const DAY_MS = 86_400_000;

export interface RetentionSettings {
  /** Days events are kept; 0 keeps them forever. */
  readonly retentionDays: number;
  readonly rotationMaxMb: number;
}

export interface RetentionDeps {
  readonly settings: RetentionSettings;
  readonly log: Pick<ChainLog, 'pruneCut' | 'prune' | 'finishPrune' | 'bridge' | 'lastSeq'>;
  readonly audit: AuditSink;
  /** The approval records a run deletes once they are over and older than its cutoff. */
  readonly approvals?: Pick<ApprovalStore, 'pruneBefore'>;
  /** Where a run writes what it prunes first (its `target`); none: SERVICE_AUDIT_ARCHIVE=none. */
  readonly archive?: RetentionArchive;
  /**
   * One org's erasures and retention runs, one at a time (shared by both desks): a retention run
   * archiving events an erasure is tombstoning would leave an unerased copy in the archive.
   */
  readonly exclusive?: OrgQueue;
  readonly clock?: () => number;
}

/** What a run would prune (or pruned) of one org chain. */
export interface PruneRange {
  readonly from_seq: number;
  readonly to_seq: number;
  readonly events: number;
  /** The newest pruned event's time: every pruned event is at least this old. */
  readonly last_ts: string;
}

/**
 * Audit retention (spec 4.6; DESIGN B), run only when an operator asks: events older than
 * `retentionDays` are pruned from the org chain on the newest seal boundary before the cutoff
 * (the chain's newest event always stays), leaving a `_chain_bridge` that keeps the rest
 * verifiable, optionally after archiving them as gzipped JSONL that verifies on its own. Each run
 * is an `admin.retention_run` event of the org's chain. One run per org at a time.
 */
export class RetentionDesk {
  readonly #deps: RetentionDeps;
  readonly #clock: () => number;
  readonly #running = new Set<string>();
  readonly #exclusive: OrgQueue;

  constructor(deps: RetentionDeps) {
    this.#deps = deps;
    this.#clock = deps.clock ?? Date.now;
    this.#exclusive = deps.exclusive ?? new OrgQueue();
  }

  get #target() {
    return this.#deps.archive?.target;
  }

  /** `GET /api/settings/retention`. */
  settings(org: string): Record<string, JsonValue> {
    const s = this.#deps.settings;
    const bridge = this.#deps.log.bridge(org);
    return {
      org_id: org,
      retention_days: s.retentionDays,
      keep_forever: s.retentionDays === 0,
      schedule: 'operator-triggered: POST /api/settings/retention/run; nothing runs in the background',
      archive:
        this.#target === undefined
          ? { type: 'none' }
          : { type: this.#target.type, ...this.#target.where, compression: 'gzip' },
      rotation: { jsonl_max_mb: s.rotationMaxMb },
      pruned: bridge === undefined ? null : bridgeSummary(bridge),
    };
  }

  /** `GET /api/settings/retention/preview`: what a run now would prune. */
  preview(org: string): Record<string, JsonValue> {
    const { cutoff, range, reason } = this.#plan(org);
    return {
      org_id: org,
      retention_days: this.#deps.settings.retentionDays,
      cutoff: cutoff === null ? null : new Date(cutoff).toISOString(),
      prune: range === null ? null : { ...range },
      archive: this.#target?.type ?? 'none',
      reason,
    };
  }

  /** `POST /api/settings/retention/run`. */
  async run(org: string, p: Principal): Promise<Record<string, JsonValue>> {
    if (this.#running.has(org))
      throw new ServiceError('conflict', 'a retention run of this org is under way');
    this.#running.add(org);
    try {
      return await this.#exclusive.run(org, () => this.#run(org, p));
    } finally {
      this.#running.delete(org);
    }
  }

  async #run(org: string, p: Principal): Promise<Record<string, JsonValue>> {
    const { log } = this.#deps;
    await log.finishPrune(org); // what a run cut short left behind
    const { cutoff, range, reason } = this.#plan(org);
    // Approvals over before the cutoff go whether or not the chain has a cut to make, but only
    // once the chain's cut (if any) is made: a run that fails prunes nothing. Either way the run
    // is an event when it deleted anything.
    const pruneApprovals = (): Promise<number> =>
      cutoff === null || this.#deps.approvals === undefined
        ? Promise.resolve(0)
        : this.#deps.approvals.pruneBefore(org, cutoff);
    if (range === null) {
      const approvalsDeleted = await pruneApprovals();
      let eventId: string | null = null;
      if (approvalsDeleted > 0)
        eventId = (
          await this.#recordRun(org, p, cutoff as number, {
            pruned: null,
            approvals_deleted: approvalsDeleted,
          })
        ).id;
      return {
        org_id: org,
        cutoff: cutoff === null ? null : new Date(cutoff).toISOString(),
        pruned: null,
        approvals_deleted: approvalsDeleted,
        reason,
        event_id: eventId,
      };
    }
    const target = this.#deps.archive;
    const archive =
      target?.target === undefined
        ? undefined
        : async (lines: Iterable<string>) => {
            try {
              return await target.write(org, range.from_seq, range.to_seq, lines);
            } catch (err) {
              throw new ServiceError(
                'unavailable',
                `the archive could not be written: ${(err as Error).message}`,
                {
                  cause: err,
                },
              );
            }
          };
    let result: Awaited<ReturnType<ChainLog['prune']>>;
    try {
      result = await log.prune(org, range.to_seq, archive);
    } catch (err) {
      if (err instanceof ServiceError) throw err;
      throw new ServiceError(
        'unavailable',
        `the retention run stopped: ${(err as Error).message}; run it again`,
        {
          cause: err,
        },
      );
    }
    const approvalsDeleted = await pruneApprovals();
    const pruned = {
      from_seq: result.from_seq,
      to_seq: result.to_seq,
      events: result.events,
      seals: result.seals,
      jsonl_files_deleted: result.files_deleted,
      last_ts: range.last_ts,
    };
    const ref = await this.#recordRun(
      org,
      p,
      cutoff as number,
      Object.assign({}, pruned, { approvals_deleted: approvalsDeleted, archive: result.bridge.archive }),
    );
    return {
      org_id: org,
      cutoff: new Date(cutoff as number).toISOString(),
      pruned,
      approvals_deleted: approvalsDeleted,
      bridge: bridgeSummary(result.bridge),
      event_id: ref.id,
    };
  }

  /** The run's `admin.retention_run` event: who, the retention, the cutoff, and `what` it did. */
  #recordRun(org: string, p: Principal, cutoff: number, what: Record<string, JsonValue>) {
    return this.#deps.audit.append({
      org_id: org,
      event_type: 'admin.retention_run',
      outcome: 'allow',
      details: Object.assign(
        {
          actor: p.id,
          actor_kind: p.kind,
          credential_id: p.credential_id,
          retention_days: this.#deps.settings.retentionDays,
          cutoff: new Date(cutoff).toISOString(),
        },
        what,
      ),
    });
  }

  #plan(org: string): { cutoff: number | null; range: PruneRange | null; reason: string | null } {
    const days = this.#deps.settings.retentionDays;
    if (days === 0)
      return { cutoff: null, range: null, reason: 'retention_days is 0: events are kept forever' };
    const cutoff = this.#clock() - days * DAY_MS;
    const cut = this.#deps.log.pruneCut(org, cutoff);
    if (cut === undefined)
      return {
        cutoff,
        range: null,
        reason: 'no sealed events older than the cutoff (the newest event is always kept)',
      };
    return {
      cutoff,
      range: {
        from_seq: cut.fromSeq,
        to_seq: cut.toSeq,
        events: cut.toSeq - cut.fromSeq + 1,
        last_ts: cut.lastTs,
      },
      reason: null,
    };
  }
}

function bridgeSummary(b: ChainBridge): Record<string, JsonValue> {
  return {
    bridged_to_seq: b.bridged_to_seq,
    bridged_hash: b.bridged_hash,
    last_seal: b.last_seal === null ? null : { seq: b.last_seal.seq, size: b.last_seal.size },
    archive: b.archive,
  };
}
