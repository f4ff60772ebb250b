import type { AuditEvent, AuditLog, AuditSink } from '../audit/types.js';
import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { UserRecord } from '../identity/types.js';
import type { Snapshot } from '../snapshot/types.js';

export const SUBJECT_TYPES = ['email', 'user_id', 'end_user'] as const;
export type SubjectType = (typeof SUBJECT_TYPES)[number];

export interface DataSubject {
  readonly type: SubjectType;
  readonly value: string;
}

/** Events read per DSAR call at most (the default and the ceiling of `scan_limit`). */
export const DSAR_SCAN_MAX = 50_000;
const CURSOR = /^[1-9][0-9]{0,15}$/;

/** The `value` of a personal field as the chain stores it ({value, salt, c}), or the field itself. */
function personalValue(field: unknown): unknown {
  return field !== null && typeof field === 'object' && 'value' in field
    ? (field as { value: unknown }).value
    : field;
}

/**
 * Whether an event names the subject: in a personal field (the end user, a detected value, tool
 * arguments, captured text), or, for a person, as the one who acted (`details.actor`, an admin
 * event's `details.user_id`). An email matches case-insensitively, anywhere in a personal value.
 */
export function namesSubject(e: AuditEvent, s: DataSubject, userIds: ReadonlySet<string>): boolean {
  const personal = e.personal ?? {};
  const endUser = personalValue(personal.end_user);
  if (s.type === 'end_user') return endUser === s.value;
  const d = e.details ?? {};
  if (typeof d.actor === 'string' && userIds.has(d.actor)) return true;
  if (typeof d.user_id === 'string' && userIds.has(d.user_id)) return true;
  if (s.type === 'user_id') return endUser === s.value;
  const needle = s.value.toLowerCase();
  for (const field of Object.values(personal)) {
    const v = personalValue(field);
    const text = typeof v === 'string' ? v : JSON.stringify(v ?? null);
    if (text.toLowerCase().includes(needle)) return true;
  }
  return false;
}

export interface DsarDeps {
  readonly snapshot: Snapshot;
  readonly identity: IdentityRepo;
  readonly log: Pick<AuditLog, 'scanEvents' | 'lastSeq'>;
  readonly audit: AuditSink;
  readonly orgExists: (id: string) => boolean;
}

/**
 * `POST /api/compliance/gdpr/dsar` (spec 4.5, auditor and higher): what the org's trail and
 * records hold about one data subject. The chain is read in seq order, `scan_limit` events a call
 * (at most 50,000), so a large org is answered in pages: `next_cursor` goes back as `cursor`.
 * Each call is itself recorded (`compliance.dsar_exported`, the subject in a personal field).
 */
export function registerDsarRoutes(router: Router<RouteHandler>, deps: DsarDeps): void {
  const { snapshot, identity, log, audit } = deps;

  router.add('POST', '/api/compliance/gdpr/dsar', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const body = strictBody<{
      data_subject: Record<string, unknown>;
      org_id?: string;
      cursor?: string;
      scan_limit?: number;
    }>(ctx.jsonObject(), {
      data_subject: { type: 'object', required: true },
      org_id: { type: 'string' },
      cursor: { type: 'string', pattern: CURSOR },
      scan_limit: { type: 'integer', min: 1, max: DSAR_SCAN_MAX },
    });
    const subject = strictBody<DataSubject>(body.data_subject, {
      type: { type: 'string', required: true, enum: SUBJECT_TYPES },
      value: { type: 'string', required: true, maxLength: 320 },
    });
    if (subject.value.trim() === '')
      throw new ServiceError('invalid_request', 'data_subject.value must not be empty', {
        param: 'data_subject.value',
      });
    const org = targetOrg(ctx, p, body.org_id, deps.orgExists);
    // The people the subject is: by email (any case) or by id, in this org.
    const users: UserRecord[] = [];
    if (subject.type !== 'end_user')
      for (const u of identity.usersOf(org))
        if (
          subject.type === 'email'
            ? u.email.toLowerCase() === subject.value.toLowerCase()
            : u.user_id === subject.value
        )
          users.push(u);
    const userIds = new Set(users.map((u) => u.user_id));
    const from = body.cursor === undefined ? 1 : Number(body.cursor);
    const limit = body.scan_limit ?? DSAR_SCAN_MAX;
    const last = log.lastSeq(org);
    const events: AuditEvent[] = [];
    let to = from - 1;
    for (const e of log.scanEvents(org, {}, limit, from)) {
      to = e.seq;
      if (namesSubject(e, subject, userIds)) events.push(e);
    }
    const more = to < last && to >= from;
    await audit.append({
      org_id: org,
      event_type: 'compliance.dsar_exported',
      outcome: 'allow',
      details: {
        actor: p.id,
        actor_kind: p.kind,
        credential_id: p.credential_id,
        subject_type: subject.type,
        scanned_from_seq: from,
        scanned_to_seq: to,
        matched_events: events.length,
        matched_users: users.length,
      },
      personal: { data_subject: subject.value },
    });
    ctx.json(200, {
      org_id: org,
      data_subject: subject,
      records: { users },
      events,
      scanned: { from_seq: from, to_seq: to, last_seq: last },
      next_cursor: more ? String(to + 1) : null,
    });
  });
}
