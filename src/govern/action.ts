// A govern request body (spec 2.4) as the action it asks about: what /v1/govern decides and what
// the policy playground tries against a candidate policy, parsed by the same rules.

import { ServiceError } from '../core/errors.js';
import { BEHAVIOR_TYPES, type BehaviorType, type Decision } from '../core/policy/index.js';
import { toolName } from './tool-name.js';

export interface GovernAction {
  readonly type: BehaviorType;
  readonly tool: string | null;
  readonly server: string | null;
  readonly model: string | null;
  readonly provider: string | null;
  readonly args: Record<string, unknown> | null;
  readonly payload: Record<string, unknown>;
}

const TYPES: ReadonlySet<string> = new Set(BEHAVIOR_TYPES);

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Spec 2.4: `type` is one of the 11 behavior types; TOOL_CALL needs payload.tool; args is an
 * object. `at` prefixes the names of the fields an error points to (`action.` in the playground).
 */
export function parseAction(body: Record<string, unknown>, at = ''): GovernAction {
  const type = body.type;
  if (typeof type !== 'string' || !TYPES.has(type)) {
    throw new ServiceError('invalid_request', `${at}type must be one of ${BEHAVIOR_TYPES.join(', ')}`, {
      param: `${at}type`,
    });
  }
  const payload = body.payload ?? {};
  if (!isObject(payload))
    throw new ServiceError('invalid_request', `${at}payload must be an object`, { param: `${at}payload` });
  if (type === 'TOOL_CALL' && (payload.tool === undefined || payload.tool === null || payload.tool === '')) {
    throw new ServiceError('invalid_request', `a TOOL_CALL needs ${at}payload.tool`, {
      param: `${at}payload.tool`,
    });
  }
  // Names are identifiers: they are what an approver reads (an approval's tool and summary).
  const tool = payload.tool == null ? null : toolName(payload.tool, `${at}payload.tool`);
  const server = payload.server == null ? null : toolName(payload.server, `${at}payload.server`);
  // A tool call without arguments is one with none ({}), as /v1/tools/govern and /v1/tools/execute
  // read it: its mandate's args_sha256, and its approval's fingerprint, match theirs.
  const args = payload.args ?? (type === 'TOOL_CALL' ? {} : null);
  if (args !== null && !isObject(args))
    throw new ServiceError('invalid_request', `${at}payload.args must be an object`, {
      param: `${at}payload.args`,
    });
  // A model or provider name is scanned for secrets on the event loop when it is recorded
  // (recordableName): it is a name, bounded like the gateway's model ids.
  const str = (k: string): string | null => {
    const v = payload[k];
    if (typeof v !== 'string') return null;
    if (v.length > MAX_NAME)
      throw new ServiceError('invalid_request', `${at}payload.${k} is at most ${MAX_NAME} characters`, {
        param: `${at}payload.${k}`,
      });
    return v;
  };
  return {
    type: type as BehaviorType,
    tool,
    server,
    model: str('model'),
    provider: str('provider'),
    args,
    payload,
  };
}

/** The longest `payload.model` or `payload.provider` taken (the gateway's model ids are as long). */
const MAX_NAME = 256;

/**
 * What the agent must do for the decision to hold: have it approved, or remove what the policy
 * wants redacted. govgate rewrites the texts it forwards itself; an action the agent carries out
 * is the agent's to change (and a changed action is governed again: a mandate binds its args).
 */
export function obligationsOf(d: Decision): Record<string, unknown>[] {
  if (d.outcome === 'needs_approval')
    return [{ type: 'require_approval', tier: d.tier ?? 'standard', reason: d.reason }];
  if (d.outcome === 'allow' && d.redact.length > 0)
    return [{ type: 'redact', categories: d.redact, reason: d.reason }];
  return [];
}

/** Which step decided a non-allow outcome (DESIGN C `details.blocking_step`). */
export function blockingStep(outcome: string, ruleId: string | null): string | null {
  if (outcome === 'allow') return null;
  const id = ruleId ?? '';
  if (id.startsWith('detector:')) return 'detection';
  if (id.startsWith('flags:')) return 'flags';
  if (id === 'default') return 'default_policy';
  return 'policy_rule';
}
