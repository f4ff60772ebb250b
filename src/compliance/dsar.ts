import type { ApprovalStore } from '../approvals/store.js';
import type { WebauthnCredentialRecord } from '../approvals/webauthn.js';
import type { AuditEvent, AuditLog, AuditSink } from '../audit/types.js';
import { strictBody } from '../control/body.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { Snapshot } from '../snapshot/types.js';
import type { RetentionArchive } from './archive.js';
import { holdsSubject, namesSubject, parseSubject, subjectKeys, subjectUsers } from './subject.js';

/** Events read per DSAR call at most (the default and the ceiling of `scan_limit`). */
export const DSAR_SCAN_MAX = 50_000;
const CURSOR = /^[1-9][0-9]{0,15}$/;

export interface DsarDeps {
  readonly snapshot: Snapshot;
  readonly identity: IdentityRepo;
  readonly log: Pick<AuditLog, 'scanEvents' | 'lastSeq'>;
  readonly audit: AuditSink;
  readonly orgExists: (id: string) => boolean;
  /** The retention archive: events retention pruned are read from it, in seq order, first. */
  readonly archive?: RetentionArchive;
  /** The org's approval records: those the person decided, or whose reason names the subject. */
  readonly approvals?: Pick<ApprovalStore, 'ofSubject'>;
  /** A user's registered WebAuthn authenticators. */
  readonly authenticators?: (userId: string) => readonly WebauthnCredentialRecord[];
}

/**
 * `POST /api/compliance/gdpr/dsar` (spec 4.5, auditor and higher): what the org's trail and
 * records hold about one data subject, the retention archive included. The chain is read in seq
 * order, `scan_limit` events a call (at most 50,000), so a large org is answered in pages:
 * `next_cursor` goes back as `cursor`.
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
    const subject = parseSubject(body.data_subject);
    const org = targetOrg(ctx, p, body.org_id, deps.orgExists);
    const users = subjectUsers(identity, org, subject);
    const keys = subjectKeys(subject, users);
    const from = body.cursor === undefined ? 1 : Number(body.cursor);
    const limit = body.scan_limit ?? DSAR_SCAN_MAX;
    const last = log.lastSeq(org);
    const events: AuditEvent[] = [];
    let to = from - 1;
    let scanned = 0;
    if (deps.archive !== undefined)
      for await (const e of deps.archive.events(org, from)) {
        if (scanned === limit) break;
        scanned++;
        to = e.seq;
        if (namesSubject(e, keys)) events.push(e);
      }
    if (scanned < limit)
      for (const e of log.scanEvents(org, {}, limit - scanned, to + 1)) {
        to = e.seq;
        if (namesSubject(e, keys)) events.push(e);
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
    const { tokens, agents } = identity.subjectRecords(org, keys.userIds, keys.emails);
    const records = {
      users,
      tokens: tokens.map(({ kind: _kind, ...token }) => token),
      authenticators: users.flatMap((u) => deps.authenticators?.(u.user_id) ?? []),
      agents,
      approvals: deps.approvals?.ofSubject(org, keys.userIds, (text) => holdsSubject(text, keys)) ?? [],
    };
    ctx.json(200, {
      org_id: org,
      data_subject: subject,
      records,
      events,
      scanned: { from_seq: from, to_seq: to, last_seq: last },
      next_cursor: more ? String(to + 1) : null,
    });
  });
}
