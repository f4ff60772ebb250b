import { hash } from 'node:crypto';
import { setImmediate as yieldTurn } from 'node:timers/promises';
import type { ApprovalStore } from '../approvals/store.js';
import type { AuditEvent, AuditLog, AuditSink } from '../audit/types.js';
import {
  canonicalize,
  ERASURE_EVENT_TYPE,
  type ErasureTarget,
  erasureDetails,
  erasureTargets,
} from '../core/chain/index.js';
import { ServiceError } from '../core/errors.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { Principal } from '../identity/types.js';
import type { Store } from '../store/db.js';
import type { IdempotencyStore } from '../store/idempotency.js';
import { sortableId } from '../util/ids.js';
import { OrgQueue } from '../util/org-queue.js';
import type { RetentionArchive } from './archive.js';
import {
  AUTHORED_FIELDS,
  type DataSubject,
  holdsSubject,
  type SubjectFound,
  type SubjectKeys,
  subjectFields,
  subjectKeys,
  subjectUsers,
} from './subject.js';

export type ErasureStatus = 'pending' | 'executing' | 'executed';

/** What an execution erased (spec 2.8): the person's data subject, counts, and a hash of it all. */
export interface ErasureReceipt {
  readonly request_id: string;
  readonly data_subject: DataSubject;
  /** The user who executed it. */
  readonly executor: string;
  readonly executed_at: string;
  readonly erased: { readonly events: number; readonly records: number; readonly credentials: number };
  /** Hex SHA-256 of the JCS form of the fields above (the erasure events hold it, signed). */
  readonly receipt_hash: string;
}

export interface ErasureRequest {
  readonly request_id: string;
  readonly org_id: string;
  readonly data_subject: DataSubject;
  readonly reason: string | null;
  readonly status: ErasureStatus;
  readonly requested_by: string;
  readonly requested_at: string;
  readonly executed_by: string | null;
  readonly executed_at: string | null;
  /** The `gdpr.erasure_executed` events (one per `PART_TARGETS` events erased), once committed. */
  readonly erasure_event_ids: readonly string[];
  /** Events of the org chain up to this seq were searched for the subject. */
  readonly scanned_to_seq: number | null;
  readonly receipt: ErasureReceipt | null;
  /** Why the last execution stopped before the end (it can be executed again), else null. */
  readonly error: string | null;
  /**
   * Who the subject was found to be when an execution began (`subjectKeys`), kept with the request
   * until its erasure events are committed: its first step erases the user records that link a
   * user id to an address, so an execution cut short after it still finds the person both ways
   * when executed again. Never shown (`get`, `list`): it names the person as the records did.
   */
  readonly found?: SubjectFound;
}

/** Tombstoned events named per erasure event at most (an event stays ~250 KB or less). */
export const PART_TARGETS = 5_000;
/** Events read between two yields of the event loop while searching the chain. */
const SCAN_CHUNK = 2_000;

export interface ErasureDeps {
  readonly store: Pick<Store, 'erasures' | 'writer'>;
  readonly identity: IdentityRepo;
  readonly log: Pick<AuditLog, 'scanEvents' | 'lastSeq' | 'get' | 'erase'>;
  readonly audit: AuditSink;
  /** Removes a user's WebAuthn authenticators; returns how many there were. */
  readonly removeAuthenticators: (userId: string) => Promise<number>;
  /** The org's approval records: the person as the one who decided, and reasons naming them. */
  readonly approvals?: Pick<ApprovalStore, 'eraseSubject'>;
  /** The Idempotency-Key replays this process keeps (24 h): answers holding the subject go. */
  readonly idempotency?: Pick<IdempotencyStore, 'eraseWhere'>;
  /** The retention archive (SERVICE_AUDIT_ARCHIVE=local): searched and tombstoned too. */
  readonly archive?: RetentionArchive;
  /**
   * One org's erasures and retention runs, one at a time (shared by both desks): a retention run
   * archiving events an erasure is tombstoning would leave an unerased copy in the archive.
   */
  readonly exclusive?: OrgQueue;
  readonly clock?: () => number;
}

/**
 * GDPR erasure (spec 2.8, 4.5; DESIGN B, C). A request names a data subject; executing it:
 *
 * 1. searches the org chain for the personal fields holding the subject's data (`subjectFields`,
 *    a person found by their user ids and addresses both: `subjectKeys`);
 * 2. erases the org's records of the person: their user record and personal access tokens, their
 *    WebAuthn authenticators, the `owner_email` of agents they own, the `decided_by` and reasons
 *    of approvals they decided (and reasons naming the subject), and the Idempotency-Key answers
 *    this process keeps of the calls whose exchange (the agent's input or output) step 1 found the
 *    subject in, or whose text holds the person (`inExchange`, `bodyHolds`);
 * 3. commits the `gdpr.erasure_executed` events naming every field to tombstone (the signed
 *    authority integrity checks tombstones against) with the receipt's hash;
 * 4. tombstones those fields in the store and the JSONL log (`AuditLog.erase`).
 *
 * Steps 3 and 4 are ordered so that no tombstone is ever without its authority: an execution cut
 * short (a crash, a JSONL file that could not be written) leaves the request `executing`, and
 * executing it again finishes step 4 from the committed events. The erasure events hold no copy of
 * the subject: the receipt (in the request) names them, and its hash is in the signed events.
 * One execution per org at a time.
 */
export class ErasureDesk {
  readonly #deps: ErasureDeps;
  readonly #clock: () => number;
  readonly #running = new Set<string>();
  readonly #exclusive: OrgQueue;

  constructor(deps: ErasureDeps) {
    this.#deps = deps;
    this.#clock = deps.clock ?? Date.now;
    this.#exclusive = deps.exclusive ?? new OrgQueue();
  }

  /** The org's request `requestId`, as shown. */
  get(org: string, requestId: string): ErasureRequest | undefined {
    const stored = this.#stored(org, requestId);
    return stored === undefined ? undefined : shown(stored);
  }

  #stored(org: string, requestId: string): ErasureRequest | undefined {
    if (!requestId.startsWith('er_') || requestId.length > 64) return undefined;
    return this.#deps.store.erasures.get([org, requestId]) as ErasureRequest | undefined;
  }

  /** The org's requests, newest first; `cursor` is the last request id of the previous page. */
  list(org: string, limit: number, cursor?: string): { data: ErasureRequest[]; next_cursor: string | null } {
    const data: ErasureRequest[] = [];
    const range = this.#deps.store.erasures.getRange({
      start: [org, cursor ?? '\uffff'],
      end: [org, ''],
      reverse: true,
    });
    for (const { key, value } of range) {
      if (cursor !== undefined && (key as [string, string])[1] === cursor) continue;
      data.push(shown(value as ErasureRequest));
      if (data.length > limit) break;
    }
    const more = data.length > limit;
    if (more) data.length = limit;
    return { data, next_cursor: more ? (data.at(-1)?.request_id ?? null) : null };
  }

  async submit(
    org: string,
    p: Principal,
    subject: DataSubject,
    reason: string | null,
  ): Promise<ErasureRequest> {
    const request: ErasureRequest = {
      request_id: sortableId('er_', this.#clock()),
      org_id: org,
      data_subject: subject,
      reason,
      status: 'pending',
      requested_by: p.id,
      requested_at: new Date(this.#clock()).toISOString(),
      executed_by: null,
      executed_at: null,
      erasure_event_ids: [],
      scanned_to_seq: null,
      receipt: null,
      error: null,
    };
    // The subject and the reason are personal: the execution tombstones them in this event too.
    await this.#deps.audit.append({
      org_id: org,
      event_type: 'compliance.erasure_requested',
      outcome: 'allow',
      details: { ...actorOf(p), request_id: request.request_id, subject_type: subject.type },
      personal: reason === null ? { data_subject: subject.value } : { data_subject: subject.value, reason },
    });
    await this.#put(request);
    return request;
  }

  async execute(org: string, requestId: string, p: Principal): Promise<ErasureRequest> {
    const request = this.#stored(org, requestId);
    if (request === undefined)
      throw new ServiceError('not_found', `no erasure request ${requestId} in this org`);
    if (request.status === 'executed')
      throw new ServiceError(
        'conflict',
        `erasure request ${requestId} was executed at ${request.executed_at}`,
      );
    if (this.#running.has(org))
      throw new ServiceError(
        'conflict',
        'an erasure of this org is being executed; execute this one once it ends',
      );
    this.#running.add(org);
    try {
      return shown(await this.#exclusive.run(org, () => this.#execute(request, p)));
    } finally {
      this.#running.delete(org);
    }
  }

  async #execute(request: ErasureRequest, p: Principal): Promise<ErasureRequest> {
    const { identity, log, audit } = this.#deps;
    const org = request.org_id;
    let current = request;
    if (current.status === 'pending' || current.erasure_event_ids.length === 0) {
      const subject = current.data_subject;
      const users = subjectUsers(identity, org, subject);
      // Who an execution cut short found (their user records may be gone since): found again.
      const keys = subjectKeys(subject, users, current.found);
      if (keys.userIds.has(p.id))
        throw new ServiceError(
          'conflict',
          'this erasure deletes your own account: another admin of the org must execute it',
        );
      const found: SubjectFound = { user_ids: [...keys.userIds], emails: keys.emails };
      if (!sameFound(current.found, found)) {
        current = { ...current, found };
        await this.#put(current);
      }
      const { targets, pipelines, scannedTo } = await this.#search(org, keys);
      // The person's records: not chained, so erased first, and counted exactly.
      const records = identity.eraseSubject(org, users, keys.emails);
      let authenticators = 0;
      for (const id of keys.userIds) authenticators += await this.#deps.removeAuthenticators(id);
      const approvals =
        (await this.#deps.approvals?.eraseSubject(org, keys.userIds, (text) => holdsSubject(text, keys))) ??
        0;
      const replays =
        (await this.#deps.idempotency?.eraseWhere(org, pipelines, (body) => bodyHolds(body, keys))) ?? 0;
      const fields = {
        request_id: current.request_id,
        data_subject: subject,
        executor: p.id,
        executed_at: new Date(this.#clock()).toISOString(),
        erased: {
          events: targets.length,
          records: records.users + records.agents + approvals + replays,
          credentials: records.tokens + authenticators,
        },
      };
      const receipt: ErasureReceipt = { ...fields, receipt_hash: receiptHash(fields) };
      const parts = Math.max(1, Math.ceil(targets.length / PART_TARGETS));
      const ids: string[] = [];
      for (let i = 0; i < parts; i++) {
        const ref = await audit.append({
          org_id: org,
          event_type: ERASURE_EVENT_TYPE,
          outcome: 'allow',
          details: {
            ...erasureDetails(current.request_id, targets.slice(i * PART_TARGETS, (i + 1) * PART_TARGETS)),
            ...actorOf(p),
            part: i + 1,
            parts,
            subject_type: subject.type,
            scanned_to_seq: scannedTo,
            erased: receipt.erased,
            receipt_hash: receipt.receipt_hash,
          },
        });
        ids.push(ref.id);
      }
      const { found: _found, ...request } = current;
      current = {
        ...request,
        status: 'executing',
        executed_by: p.id,
        executed_at: receipt.executed_at,
        erasure_event_ids: ids,
        scanned_to_seq: scannedTo,
        receipt,
      };
      await this.#put(current);
    }
    // Tombstone what the committed erasure events name (again, when a first run was cut short).
    const targets: ErasureTarget[] = [];
    for (const id of current.erasure_event_ids) {
      const e = log.get(org, id);
      if (e === undefined) throw new Error(`erasure event ${id} of request ${current.request_id} is missing`);
      targets.push(...erasureTargets(e));
    }
    try {
      await log.erase(org, targets);
      await this.#deps.archive?.erase(org, targets);
    } catch (err) {
      const error = `the audit log could not be rewritten: ${(err as Error).message}`;
      await this.#put({ ...current, error });
      throw new ServiceError('unavailable', `${error}; the request stays executing: execute it again`);
    }
    const done: ErasureRequest = { ...current, status: 'executed', error: null };
    await this.#put(done);
    return done;
  }

  /**
   * The events of the org chain holding the subject's data, the archived ones first, the calls
   * whose kept answers go with them (`inExchange`), and the seq the search ended at.
   */
  async #search(
    org: string,
    keys: SubjectKeys,
  ): Promise<{ targets: ErasureTarget[]; pipelines: Set<string>; scannedTo: number }> {
    const { log, archive } = this.#deps;
    const last = log.lastSeq(org);
    const targets: ErasureTarget[] = [];
    const pipelines = new Set<string>();
    const found = (e: AuditEvent, fields: string[]): void => {
      targets.push({ event_id: e.id, fields });
      if (typeof e.pipeline_id === 'string' && inExchange(fields)) pipelines.add(e.pipeline_id);
    };
    let from = 1;
    if (archive !== undefined) {
      let seen = 0;
      for await (const e of archive.events(org)) {
        from = e.seq + 1;
        const fields = subjectFields(e, keys);
        if (fields.length > 0) found(e, fields);
        if (++seen % SCAN_CHUNK === 0) await yieldTurn();
      }
    }
    while (from <= last) {
      let seen = 0;
      for (const e of log.scanEvents(org, {}, SCAN_CHUNK, from) as Iterable<AuditEvent>) {
        seen++;
        from = e.seq + 1;
        if (e.seq > last) break;
        const fields = subjectFields(e, keys);
        if (fields.length > 0) found(e, fields);
      }
      if (seen === 0) break;
      await yieldTurn();
    }
    return { targets, pipelines, scannedTo: Math.min(last, from - 1) };
  }

  #put(request: ErasureRequest): Promise<void> {
    const { erasures, writer } = this.#deps.store;
    return writer.enqueue(() => erasures.putSync([request.org_id, request.request_id], request));
  }
}

/** The receipt's hash: SHA-256 (hex) of the JCS form of every receipt field but the hash. */
export function receiptHash(fields: Omit<ErasureReceipt, 'receipt_hash'>): string {
  return hash('sha256', canonicalize(fields), 'hex');
}

/** A request as the API shows it: without whom it found (`ErasureRequest.found`). */
function shown(r: ErasureRequest): ErasureRequest {
  if (r.found === undefined) return r;
  const { found: _found, ...rest } = r;
  return rest;
}

function sameFound(a: SubjectFound | undefined, b: SubjectFound): boolean {
  return (
    a !== undefined &&
    a.user_ids.length === b.user_ids.length &&
    a.user_ids.every((id) => b.user_ids.includes(id)) &&
    a.emails.length === b.emails.length &&
    a.emails.every((e) => b.emails.includes(e))
  );
}

/**
 * Whether the fields an event holds the subject in are of the agent's own exchange (its input or
 * output: detected values, arguments, payload, output, the end user; every field of an end user's
 * exchange), so that the call's kept Idempotency-Key answer goes too. What a person wrote as the
 * one who acted (`AUTHORED_FIELDS`: an approval's reason, its decider's or one naming the subject)
 * is not in the answer: a call the subject only decided keeps its replay, else the agent's retry
 * would run the call again. Any other field counts (a new kind of field deletes a replay rather
 * than keep one holding the subject); an answer naming the person in its text goes by `bodyHolds`.
 */
function inExchange(fields: readonly string[]): boolean {
  return fields.some((f) => !AUTHORED_FIELDS.has(f));
}

/**
 * Whether a kept answer holds a person: one of their addresses (any case) or user ids in its text.
 * An end user's id is not looked for in text (`cust-4` is in `cust-42`): their answers are found
 * by the calls the erasure tombstones.
 */
function bodyHolds(body: string, k: SubjectKeys): boolean {
  if (k.emails.length === 0 && k.userIds.size === 0) return false;
  const text = body.toLowerCase();
  if (k.emails.some((e) => text.includes(e))) return true;
  for (const id of k.userIds) if (body.includes(id)) return true;
  return false;
}

function actorOf(p: Principal): Record<string, string> {
  return { actor: p.id, actor_kind: p.kind, credential_id: p.credential_id };
}
