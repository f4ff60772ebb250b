import type { AuditEvent, AuditLog, AuditRef } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import type { Ctx } from '../http/context.js';
import type { ApprovalRecord, ApprovalStore } from './store.js';

export interface ApprovalFeedOptions {
  /** A comment line goes out this often on an idle stream (proxies close silent connections). */
  readonly heartbeatMs?: number;
  /** Streams open at once per org; one more is refused (429). */
  readonly maxStreamsPerOrg?: number;
  /** Long polls waiting at once per org (their own bound: they take no stream's place); 429 past. */
  readonly maxPollsPerOrg?: number;
  /** Transitions a reconnecting stream is sent from the trail at most; past it, a resync. */
  readonly replayMax?: number;
  /** A stream whose client leaves this much unread is closed (its client stopped reading). */
  readonly maxBacklogBytes?: number;
}

const DEFAULTS = {
  heartbeatMs: 15_000,
  maxStreamsPerOrg: 256,
  maxPollsPerOrg: 1_024,
  replayMax: 1_000,
  maxBacklogBytes: 256 * 1024,
} as const;

/** What the stream and the long poll say of one transition: the audit event, as an update. */
export interface ApprovalUpdate {
  readonly approval_id: string;
  /** created | decided | cancelled | revoked | expired | consumed */
  readonly transition: string;
  readonly status: string;
  readonly agent_id: string | null;
  readonly tier: unknown;
  readonly tool: unknown;
  readonly matched_rule: unknown;
  readonly expires_at: unknown;
  readonly reason: string | null;
  /** Who made the transition (absent for an expiry or a consumption by the call itself). */
  readonly actor: unknown;
  readonly actor_kind: unknown;
  /** The audit event that records it, and its place in the org chain (the stream's `id:`). */
  readonly event_id: string;
  readonly seq: number;
  readonly ts: string;
}

const APPROVAL_PREFIX = 'approval.';

/** The update an `approval.*` audit event stands for (undefined for any other event). */
function updateOf(e: AuditEvent): ApprovalUpdate | undefined {
  if (!e.event_type.startsWith(APPROVAL_PREFIX)) return undefined;
  const d = e.details;
  if (typeof d.approval_id !== 'string') return undefined;
  return {
    approval_id: d.approval_id,
    transition: e.event_type.slice(APPROVAL_PREFIX.length),
    status: typeof d.status === 'string' ? d.status : String(e.outcome),
    agent_id: e.agent_id,
    tier: d.tier ?? null,
    tool: d.tool ?? null,
    matched_rule: d.matched_rule ?? null,
    expires_at: d.expires_at ?? null,
    reason: e.reason ?? writtenReason(e.personal?.reason),
    actor: d.actor ?? null,
    actor_kind: d.actor_kind ?? null,
    event_id: e.id,
    seq: e.seq,
    ts: e.ts,
  };
}

/** A transition's reason as its actor wrote it: the `value` of the personal field (a tombstone once erased). */
function writtenReason(field: unknown): string | null {
  const value = field !== null && typeof field === 'object' ? (field as { value?: unknown }).value : field;
  return typeof value === 'string' ? value : null;
}

/** One SSE frame: `id:` is the org chain seq, so a reconnect resumes with Last-Event-ID. */
function frame(u: ApprovalUpdate): string {
  return `id: ${u.seq}\nevent: approval.${u.transition}\ndata: ${JSON.stringify(u)}\n\n`;
}

/** The frame that tells a reconnecting client to list its approvals again (it moves no id on). */
function resync(why: string, afterSeq: number): string {
  const reason = `${why}: list the approvals again (GET /v1/me/approvals)`;
  return `event: approval.resync\ndata: ${JSON.stringify({ reason, after_seq: afterSeq })}\n\n`;
}

interface Subscriber {
  /** A stream, or a long poll: each is bounded per org on its own. */
  readonly kind: 'stream' | 'poll';
  /** null: every approval of the org (a person); else the one agent's (by its agent_id). */
  readonly agentId: string | null;
  readonly deliver: (u: ApprovalUpdate) => void;
  /** The service is shutting down: end now. */
  readonly close: () => void;
}

/** What the feed reads of the trail. */
export type FeedTrail = Pick<AuditLog, 'get' | 'scanEvents' | 'lastSeq'>;

/**
 * Approval transitions as they are committed, for the SSE stream (`GET /v1/me/approvals/stream`)
 * and the long poll (`GET /v1/me/approvals/{id}/wait`). The trail is the feed's journal: every
 * transition is an `approval.*` event of the org chain, announced once committed, and a stream
 * that reconnects with the `seq` it last had is sent what it missed from the chain. Nothing is
 * held in memory but the open subscriptions.
 */
export class ApprovalFeed {
  readonly #subs = new Map<string, Set<Subscriber>>();
  /** Per org: streams open and long polls waiting (each bounded on its own). */
  readonly #counts = new Map<string, { stream: number; poll: number }>();
  readonly #opts: Required<ApprovalFeedOptions>;
  #closed = false;

  constructor(
    private readonly approvals: ApprovalStore,
    private readonly trail: FeedTrail,
    opts: ApprovalFeedOptions = {},
  ) {
    this.#opts = { ...DEFAULTS, ...opts };
    approvals.onRecorded((org, ref) => this.#publish(org, ref));
  }

  /** Open streams and waiting long polls (the `govgate_approval_streams` gauge; tests). */
  get streams(): number {
    let n = 0;
    for (const set of this.#subs.values()) n += set.size;
    return n;
  }

  #publish(org: string, ref: AuditRef): void {
    const subs = this.#subs.get(org);
    if (subs === undefined || subs.size === 0) return;
    const event = this.trail.get(org, ref.id);
    const update = event === undefined ? undefined : updateOf(event);
    if (update === undefined) return;
    for (const s of subs) if (s.agentId === null || s.agentId === update.agent_id) s.deliver(update);
  }

  /** Long polls waiting now, over every org (tests). */
  get polls(): number {
    let n = 0;
    for (const c of this.#counts.values()) n += c.poll;
    return n;
  }

  /** Subscribes `sub`, or refuses it (429) when its kind is at its bound for the org. */
  #add(org: string, sub: Subscriber): () => void {
    let count = this.#counts.get(org);
    if (count === undefined) this.#counts.set(org, (count = { stream: 0, poll: 0 }));
    const max = sub.kind === 'stream' ? this.#opts.maxStreamsPerOrg : this.#opts.maxPollsPerOrg;
    if (count[sub.kind] >= max)
      throw new ServiceError(
        'rate_limited',
        sub.kind === 'stream'
          ? `at most ${max} approval streams may be open at once per org`
          : `at most ${max} approval long polls may wait at once per org; use the stream`,
        { headers: { 'retry-after': '5' } },
      );
    count[sub.kind]++;
    let set = this.#subs.get(org);
    if (set === undefined) this.#subs.set(org, (set = new Set()));
    set.add(sub);
    const counted = count;
    return () => {
      if (!set.delete(sub)) return;
      counted[sub.kind]--;
      if (set.size === 0 && this.#subs.get(org) === set) {
        this.#subs.delete(org);
        this.#counts.delete(org);
      }
    };
  }

  #refuseIfClosed(): void {
    if (this.#closed) throw new ServiceError('unavailable', 'the service is shutting down');
  }

  /**
   * Streams the org's transitions (or one agent's) as SSE until the client leaves or the service
   * stops. `afterSeq`: the Last-Event-ID of a reconnect; what came after it is sent first, from
   * the trail (at most `replayMax`; past that an `approval.resync` event says to list again).
   * `authorized` is asked again before each event and heartbeat: a stream whose credential was
   * revoked, expired or lost its role meanwhile ends there, with nothing more sent.
   */
  async stream(
    ctx: Ctx,
    org: string,
    agentId: string | null,
    afterSeq: number | undefined,
    authorized: () => boolean,
  ): Promise<void> {
    this.#refuseIfClosed();
    const res = ctx.res;
    let done!: () => void;
    const ended = new Promise<void>((resolve) => {
      done = resolve;
    });
    let lastSeq = afterSeq ?? 0;
    // Until the replay is out, live updates wait here (a commit during the replay may be in both).
    let held: ApprovalUpdate[] | undefined = [];
    let finished = false;
    const write = (text: string): void => {
      if (finished) return;
      if (!authorized()) {
        sub.close();
        return;
      }
      if (!res.write(text)) {
        finish();
        return;
      }
      if (res.backlog > this.#opts.maxBacklogBytes) {
        ctx.clientStalled();
        finish();
      }
    };
    const send = (u: ApprovalUpdate): void => {
      if (u.seq <= lastSeq) return;
      lastSeq = u.seq;
      write(frame(u));
    };
    const sub: Subscriber = {
      kind: 'stream',
      agentId,
      deliver: (u) => {
        if (held !== undefined) held.push(u);
        else send(u);
      },
      close: () => {
        if (finished) return;
        if (!res.aborted) ctx.endStream();
        finish();
      },
    };
    // Refused at its bound (429) here, before anything is written.
    const remove = this.#add(org, sub);
    const heartbeat = setInterval(() => write(': heartbeat\n\n'), this.#opts.heartbeatMs);
    function finish(): void {
      if (finished) return;
      finished = true;
      clearInterval(heartbeat);
      remove();
      done();
    }
    res.onAbort(() => {
      ctx.clientGone();
      finish();
    });
    ctx.startStream(200, 'text/event-stream; charset=utf-8', { 'x-accel-buffering': 'no' });
    write('retry: 2000\n\n');
    if (afterSeq !== undefined && afterSeq > this.trail.lastSeq(org)) {
      // An id this org's trail never reached (another org's, or a store restored from a backup):
      // nothing can be replayed after it, and no live event may be held back by it.
      lastSeq = 0;
      write(resync(`Last-Event-ID ${afterSeq} is past the end of this org's trail`, afterSeq));
    } else if (afterSeq !== undefined) {
      const filters =
        agentId === null ? { category: 'approval' } : { category: 'approval', agent_id: agentId };
      const missed: ApprovalUpdate[] = [];
      let more = false;
      try {
        for (const e of this.trail.scanEvents(org, filters, this.#opts.replayMax + 1, afterSeq + 1)) {
          const u = updateOf(e);
          if (u === undefined) continue;
          if (missed.length === this.#opts.replayMax) {
            more = true;
            break;
          }
          missed.push(u);
        }
      } catch (err) {
        // The stream ends (the app ends a started stream on an error); nothing is left subscribed.
        finish();
        throw err;
      }
      // Too much to send: the client lists the approvals again, and live updates follow.
      if (more) write(resync(`more than ${this.#opts.replayMax} transitions since ${afterSeq}`, afterSeq));
      else for (const u of missed) send(u);
    }
    const pending = held;
    held = undefined;
    for (const u of pending) send(u);
    return ended;
  }

  /**
   * Resolves with the approval once it is no longer pending, or as it stands when `timeoutMs`
   * passes, the client leaves or the service stops. A pending approval that reaches its expiry
   * while waited on is expired then (and so answered).
   */
  async wait(
    ctx: Ctx,
    org: string,
    visible: (rec: ApprovalRecord) => boolean,
    id: string,
    timeoutMs: number,
  ): Promise<ApprovalRecord> {
    this.#refuseIfClosed();
    const current = async (): Promise<ApprovalRecord> => {
      const rec = await this.approvals.get(id, org);
      if (rec === undefined || !visible(rec)) throw new ServiceError('not_found', `approval ${id} not found`);
      return rec;
    };
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => {
      wake = resolve;
    });
    // Subscribed before the first read: a decision between the two is not missed.
    const remove = this.#add(org, {
      kind: 'poll',
      agentId: null,
      deliver: (u) => {
        if (u.approval_id === id) wake();
      },
      close: () => wake(),
    });
    try {
      const rec = await current();
      if (rec.status !== 'pending' || timeoutMs === 0) return rec;
      const untilExpiry = Math.max(0, Date.parse(rec.expires_at) - Date.now());
      const timer = setTimeout(wake, Math.min(timeoutMs, untilExpiry + 1));
      ctx.res.onAbort(wake);
      try {
        await woken;
      } finally {
        clearTimeout(timer);
      }
      return await current();
    } finally {
      remove();
    }
  }

  /** Ends every stream and long poll (the service is stopping); refuses new ones. */
  close(): void {
    this.#closed = true;
    for (const set of [...this.#subs.values()]) for (const s of [...set]) s.close();
  }
}
