import type { AuditEvent, AuditReader, AuditSink } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import { type ActingAgent, actingAgent, callerDetails } from '../gateway/acting-agent.js';
import { checkCallId } from '../gateway/call-ids.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import type { Snapshot } from '../snapshot/types.js';

export interface ExecutionDeps {
  readonly snapshot: Snapshot;
  readonly audit: AuditSink;
  /** The pipeline index: the decision an execution report is for is looked up there. */
  readonly auditReader: Pick<AuditReader, 'byPipeline'>;
}

/**
 * How many of a pipeline's first events are read for its `govern.decision`. /v1/govern names a
 * fresh pipeline per call, and only the approval events of that call (created, or consumed) can
 * precede its decision; executions, tool runs and refusals come after it.
 */
const DECISION_WITHIN = 8;

/**
 * The `govern.decision` that opened `pipelineId`, if this agent made it: another agent's or
 * another org's pipeline is reported as missing, like one never governed.
 */
export function ownDecision(
  reader: Pick<AuditReader, 'byPipeline'>,
  agent: ActingAgent,
  pipelineId: string,
): AuditEvent {
  const decision = reader
    .byPipeline(agent.orgId, pipelineId, DECISION_WITHIN)
    .find((e) => e.event_type === 'govern.decision');
  if (decision === undefined || decision.agent_id !== agent.agentId)
    throw new ServiceError('not_found', `pipeline ${pipelineId} has no govern decision of this agent`, {
      param: 'pipeline_id',
    });
  return decision;
}

/**
 * POST /v1/govern/execution: the agent reports how an action it governed went. Recorded only
 * for a pipeline whose decision this agent got and that allowed the action; a report of an
 * action that was not allowed is refused (409) and the refusal is audited.
 */
export function registerExecutionRoute(router: Router<RouteHandler>, deps: ExecutionDeps): void {
  const { snapshot, audit, auditReader } = deps;
  router.add('POST', '/v1/govern/execution', async (ctx) => {
    const body = ctx.jsonObject();
    const agent = actingAgent(ctx, snapshot, body.agent_id);
    if (body.pipeline_id === undefined || body.pipeline_id === '')
      throw new ServiceError('invalid_request', 'pipeline_id is required', { param: 'pipeline_id' });
    const pipelineId = checkCallId(body.pipeline_id, 'pipeline_id');
    const sessionId =
      body.session_id === undefined || body.session_id === null
        ? null
        : checkCallId(body.session_id, 'session_id');
    if (typeof body.ok !== 'boolean')
      throw new ServiceError('invalid_request', 'ok must be a boolean', { param: 'ok' });
    const output = body.output_text ?? undefined;
    if (output !== undefined && typeof output !== 'string')
      throw new ServiceError('invalid_request', 'output_text must be a string', { param: 'output_text' });
    const duration = body.duration_ms;
    if (
      duration !== undefined &&
      (typeof duration !== 'number' || !Number.isFinite(duration) || duration < 0)
    )
      throw new ServiceError('invalid_request', 'duration_ms must be a non-negative number', {
        param: 'duration_ms',
      });
    const decision = ownDecision(auditReader, agent, pipelineId);
    const details: Record<string, unknown> = Object.assign(callerDetails(agent), {
      ok: body.ok,
      duration_ms: duration ?? null,
      output_chars: output?.length ?? 0,
      decision_event_id: decision.id,
    });
    // The event joins the decision's session and task, whatever the report says: one agent
    // cannot write into another's session view through this route. Members are named, not
    // spread: see docs/ops.md ("Object spreads").
    const record = (eventType: string, outcome: string, reason: string | null) =>
      audit.append({
        org_id: agent.orgId,
        event_type: eventType,
        agent_id: agent.agentId,
        session_id: decision.session_id,
        task_id: decision.task_id,
        pipeline_id: pipelineId,
        behavior_type: decision.behavior_type,
        outcome,
        reason,
        details,
        personal: output === undefined ? {} : { output_text: output },
      });
    if (decision.outcome !== 'allow') {
      // A report of an action that was not allowed is what an auditor wants to see: kept, as a
      // refusal, never as an execution.
      details.decision_outcome = decision.outcome;
      await record(
        'govern.execution_refused',
        'block',
        `reported an execution of an action whose decision was ${decision.outcome}`,
      );
      throw new ServiceError(
        'conflict',
        `the action of pipeline ${pipelineId} was not allowed (its decision was ${decision.outcome}): ` +
          'no execution is recorded for it, and the refused report is audited',
        { param: 'pipeline_id' },
      );
    }
    if (sessionId !== null && sessionId !== decision.session_id)
      throw new ServiceError('invalid_request', `session_id is not the session of pipeline ${pipelineId}`, {
        param: 'session_id',
      });
    const ref = await record('govern.execution', body.ok ? 'ok' : 'failed', null);
    ctx.json(200, { recorded: true, event_id: ref.id });
  });
}
