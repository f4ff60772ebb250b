import type { AuditInput } from '../audit/types.js';

/**
 * Spec 2.7 and 6.1: PII seen in a call (a model call's prompt or answer, a governed action's
 * payload) is a `pii_detected` event of the call's pipeline, for the call `base` records (its
 * provider null when none received anything) and made by `caller`: the kinds found, never the
 * values, and the action taken (`outcome` and `details.action`). A governed action's names what
 * the agent must do with it (`obligation`), govgate not changing what the agent carries out.
 */
export function piiDetectedEvent(
  base: Omit<AuditInput, 'event_type'>,
  caller: { readonly credential_id?: unknown; readonly acting_admin?: unknown },
  stage: 'input' | 'output',
  types: readonly string[],
  action: string,
  obligation?: string | null,
): AuditInput {
  const details: Record<string, unknown> = {
    stage,
    entity_types: types,
    action,
    credential_id: caller.credential_id,
    acting_admin: caller.acting_admin,
  };
  if (obligation !== undefined) details.obligation = obligation;
  return {
    org_id: base.org_id,
    event_type: 'pii_detected',
    agent_id: base.agent_id ?? null,
    session_id: base.session_id ?? null,
    task_id: base.task_id ?? null,
    pipeline_id: base.pipeline_id ?? null,
    behavior_type: base.behavior_type ?? null,
    provider: base.provider ?? null,
    model: base.model ?? null,
    outcome: action,
    details,
  };
}
