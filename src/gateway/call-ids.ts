import { ServiceError } from '../core/errors.js';
import { recordable } from '../core/guardrails/recorded.js';
import type { Ctx } from '../http/context.js';
import { sortableBody } from '../util/ids.js';

/** Per-call identifiers: the session pins across calls, task and pipeline are this call's. */
export interface CallIds {
  readonly sessionId: string;
  readonly taskId: string;
  readonly pipelineId: string;
}

const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** A caller-given session, task or pipeline id: 1-128 characters of [A-Za-z0-9._:-], or 400. */
export function checkCallId(value: unknown, param: string): string {
  if (typeof value !== 'string' || !ID_RE.test(value))
    throw new ServiceError('invalid_request', `${param} must be 1-128 characters of [A-Za-z0-9._:-]`, {
      param,
    });
  return value;
}

/**
 * The call's ids: the session the caller names (X-Session-Id, else a body's `session_id`) or a new
 * one, the task it names (X-Task-Id) or a new one, and a new pipeline. A named id that is not one
 * is a 400 naming where it came from; null in the body is absent.
 */
export function callIds(ctx: Ctx, bodySessionId?: unknown): CallIds {
  const header = ctx.header('x-session-id');
  const given =
    header !== undefined
      ? checkCallId(header, 'X-Session-Id')
      : bodySessionId === undefined || bodySessionId === null
        ? undefined
        : checkCallId(bodySessionId, 'session_id');
  const named = ctx.header('x-task-id');
  const task = named === undefined ? undefined : checkCallId(named, 'X-Task-Id');
  // One body for the ids govgate assigns (pl_X, ses_X, tsk_X): the audit log indexes such a
  // session or task through its pipeline instead of with an entry of its own. The body sorts by
  // time, so the pipeline index grows at its end instead of at a random page per call.
  const body = sortableBody();
  // A named id is recorded as every other name an agent gives a call (recordable): one that holds
  // a secret (an access key used as an id) becomes its placeholder, in the trail, its exports and
  // the envelope alike. Assigned ids skip the scan.
  return {
    sessionId: given === undefined ? `ses_${body}` : recordable(given),
    taskId: task === undefined ? `tsk_${body}` : recordable(task),
    pipelineId: `pl_${body}`,
  };
}
