import type { AuditEvent } from '../audit/types.js';
import { strictBody } from '../control/body.js';
import { isTombstone } from '../core/chain/index.js';
import { ServiceError } from '../core/errors.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { UserRecord } from '../identity/types.js';

/**
 * The data subject of a DSAR or an erasure (DESIGN C): a person by `email` or by govgate
 * `user_id`, or an agent's end user by the id the agent gave (`end_user`: the OpenAI `user`
 * field, Anthropic `metadata.user_id`).
 */
export const SUBJECT_TYPES = ['email', 'user_id', 'end_user'] as const;
export type SubjectType = (typeof SUBJECT_TYPES)[number];

export interface DataSubject {
  readonly type: SubjectType;
  readonly value: string;
}

/** `data_subject` of a request body, checked. */
export function parseSubject(raw: Record<string, unknown>): DataSubject {
  const subject = strictBody<DataSubject>(raw, {
    type: { type: 'string', required: true, enum: SUBJECT_TYPES },
    value: { type: 'string', required: true, maxLength: 320 },
  });
  if (subject.value.trim() === '')
    throw new ServiceError('invalid_request', 'data_subject.value must not be empty', {
      param: 'data_subject.value',
    });
  return { type: subject.type, value: subject.value };
}

/** The people of an org the subject is: by email (any case) or by id; none for an end user. */
export function subjectUsers(identity: IdentityRepo, org: string, s: DataSubject): UserRecord[] {
  if (s.type === 'end_user') return [];
  const email = s.value.toLowerCase();
  return identity
    .usersOf(org)
    .filter((u) => (s.type === 'email' ? u.email.toLowerCase() === email : u.user_id === s.value));
}

/**
 * What finds a subject in the trail and the records: the subject as named and, for a person, each
 * user record they are (`subjectUsers`) by both its id and its email. An erasure or a DSAR by
 * `user_id` so also finds the person's address, and one by `email` their user id (a DSAR asked
 * by `user_id`, a tool argument naming it).
 */
export interface SubjectKeys {
  readonly subject: DataSubject;
  /** The ids of the people the subject is (none for an end user). */
  readonly userIds: ReadonlySet<string>;
  /** Addresses found inside a value, in any case (lower-cased). */
  readonly emails: readonly string[];
  /** Ids found as a whole value: the user ids, or the end user's id. */
  readonly ids: ReadonlySet<string>;
}

/** The user ids and addresses (lower-cased) a person subject was found to be (ErasureRequest.found). */
export interface SubjectFound {
  readonly user_ids: readonly string[];
  readonly emails: readonly string[];
}

/** `found`: who an earlier execution of the same erasure found the subject to be (added). */
export function subjectKeys(s: DataSubject, users: readonly UserRecord[], found?: SubjectFound): SubjectKeys {
  if (s.type === 'end_user') return { subject: s, userIds: new Set(), emails: [], ids: new Set([s.value]) };
  const userIds = new Set([...users.map((u) => u.user_id), ...(found?.user_ids ?? [])]);
  const emails = new Set([...users.map((u) => u.email.toLowerCase()), ...(found?.emails ?? [])]);
  if (s.type === 'email') emails.add(s.value.toLowerCase());
  const ids = new Set(userIds);
  if (s.type === 'user_id') ids.add(s.value);
  return { subject: s, userIds, emails: [...emails], ids };
}

/** Whether a value is, or holds, the subject: one of its ids whole, or one of its addresses inside. */
export function holdsSubject(v: unknown, k: SubjectKeys): boolean {
  if (typeof v === 'string' && k.ids.has(v)) return true;
  if (k.emails.length === 0) return false;
  const text = (typeof v === 'string' ? v : JSON.stringify(v ?? null)).toLowerCase();
  return k.emails.some((e) => text.includes(e));
}

/**
 * Personal fields that hold what the person who acted wrote (`details.actor`): a decision's or a
 * request's `reason`, an authenticator's `name`. They are that person's, whatever they say.
 */
export const AUTHORED_FIELDS: ReadonlySet<string> = new Set(['reason', 'name']);

/** The `value` of a personal field as the chain stores it ({value, salt, c}), or the field itself. */
function personalValue(field: unknown): unknown {
  return field !== null && typeof field === 'object' && 'value' in field
    ? (field as { value: unknown }).value
    : field;
}

/**
 * The personal fields of an event that hold the subject's data: every field of an event whose end
 * user is the subject (the whole exchange is theirs: prompt, output, arguments, detected values),
 * or of an event about the person (`details.user_id`: an authenticator they registered); what a
 * person wrote as the one who acted (`AUTHORED_FIELDS`); otherwise each field whose value is one
 * of the subject's ids, or contains one of their addresses in any case. Tombstoned fields hold
 * nothing any more and are never listed.
 */
export function subjectFields(e: Pick<AuditEvent, 'personal' | 'details'>, k: SubjectKeys): string[] {
  const personal = e.personal ?? {};
  const paths = Object.keys(personal).filter((p) => !isTombstone(personal[p]));
  if (paths.length === 0) return paths;
  const endUser = personalValue(personal.end_user);
  const theirs =
    typeof endUser === 'string' && (k.ids.has(endUser) || k.emails.includes(endUser.toLowerCase()));
  if (theirs && paths.includes('end_user')) return paths;
  const d = e.details ?? {};
  if (k.userIds.size > 0) {
    if (typeof d.user_id === 'string' && k.userIds.has(d.user_id)) return paths;
    if (typeof d.actor === 'string' && k.userIds.has(d.actor))
      return paths.filter((p) => AUTHORED_FIELDS.has(p) || holdsSubject(personalValue(personal[p]), k));
  }
  return paths.filter((p) => holdsSubject(personalValue(personal[p]), k));
}

/**
 * Whether an event names the subject: in a personal field (see `subjectFields`), or, for a person,
 * as the one who acted (`details.actor`, an admin event's `details.user_id`: pseudonymous ids, not
 * personal fields, which the erasure of the person's record unlinks).
 */
export function namesSubject(e: Pick<AuditEvent, 'personal' | 'details'>, k: SubjectKeys): boolean {
  if (k.userIds.size > 0) {
    const d = e.details ?? {};
    if (typeof d.actor === 'string' && k.userIds.has(d.actor)) return true;
    if (typeof d.user_id === 'string' && k.userIds.has(d.user_id)) return true;
  }
  return subjectFields(e, k).length > 0;
}
