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

/** The `value` of a personal field as the chain stores it ({value, salt, c}), or the field itself. */
function personalValue(field: unknown): unknown {
  return field !== null && typeof field === 'object' && 'value' in field
    ? (field as { value: unknown }).value
    : field;
}

/**
 * The personal fields of an event that hold the subject's data: every field of an event whose end
 * user is the subject (the whole exchange is theirs: prompt, output, arguments, detected values);
 * otherwise each field whose value is the subject's id, or, for an email, contains it in any
 * case. Tombstoned fields hold nothing any more and are never listed.
 */
export function subjectFields(e: Pick<AuditEvent, 'personal'>, s: DataSubject): string[] {
  const personal = e.personal ?? {};
  const paths = Object.keys(personal).filter((p) => !isTombstone(personal[p]));
  const endUser = personalValue(personal.end_user);
  const needle = s.value.toLowerCase();
  const isSubject = (v: unknown): boolean =>
    s.type === 'email'
      ? (typeof v === 'string' ? v : JSON.stringify(v ?? null)).toLowerCase().includes(needle)
      : v === s.value;
  const theirs =
    typeof endUser === 'string' &&
    (s.type === 'email' ? endUser.toLowerCase() === needle : endUser === s.value);
  if (theirs && paths.includes('end_user')) return paths;
  return paths.filter((p) => isSubject(personalValue(personal[p])));
}

/**
 * Whether an event names the subject: in a personal field (see `subjectFields`), or, for a person,
 * as the one who acted (`details.actor`, an admin event's `details.user_id`: pseudonymous ids, not
 * personal fields, which the erasure of the person's record unlinks).
 */
export function namesSubject(
  e: Pick<AuditEvent, 'personal' | 'details'>,
  s: DataSubject,
  userIds: ReadonlySet<string>,
): boolean {
  if (s.type !== 'end_user') {
    const d = e.details ?? {};
    if (typeof d.actor === 'string' && userIds.has(d.actor)) return true;
    if (typeof d.user_id === 'string' && userIds.has(d.user_id)) return true;
  }
  return subjectFields(e, s).length > 0;
}
