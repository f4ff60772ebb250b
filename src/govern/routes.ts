import type { AuditInput, AuditReader, AuditSink } from '../audit/types.js';
import { adminEvent, recordedUrl } from '../control/admin-event.js';
import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import {
  actionFingerprint,
  argsDigest,
  recordable,
  recordableName,
  stringsIn,
} from '../core/guardrails/index.js';
import { BEHAVIOR_TYPES } from '../core/policy/index.js';
import { type ActingAgent, actingAgent, callerDetails } from '../gateway/acting-agent.js';
import type { ApprovalRef } from '../gateway/blocked.js';
import { type CallIds, callIds } from '../gateway/call-ids.js';
import { piiDetectedEvent } from '../gateway/pii-event.js';
import { auditUndecided } from '../gateway/undecided.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import { newId } from '../util/ids.js';
import { blockingStep, type GovernAction, obligationsOf, parseAction } from './action.js';
import { registerExecutionRoute } from './execution.js';
import { decisionRecord, detectionRecord, type Governor, type GovernResult } from './governor.js';
import { toolName } from './tool-name.js';
import { ToolCallError, type ToolRegistry } from './tools.js';
import type { ApprovalDesk, MandateAuthority } from './types.js';

export interface GovernDeps {
  readonly snapshot: Snapshot;
  readonly governor: Governor;
  readonly audit: AuditSink;
  /** The pipeline index, for /v1/govern/execution (see execution.ts). */
  readonly auditReader: Pick<AuditReader, 'byPipeline'>;
  readonly mandates: MandateAuthority;
  readonly approvals: ApprovalDesk;
  readonly tools: ToolRegistry;
  readonly orgExists: (orgId: string) => boolean;
}

const TYPES = new Set<string>(BEHAVIOR_TYPES);

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * What identifies a governed action beyond its tool and args, for approvals: the payload's other
 * members (rules read them, e.g. `payload.target`), or null when it has none.
 */
function payloadContext(payload: Record<string, unknown>): Record<string, unknown> | null {
  let rest: Record<string, unknown> | null = null;
  for (const k in payload) {
    if (k === 'tool' || k === 'args') continue;
    rest ??= Object.create(null) as Record<string, unknown>;
    rest[k] = payload[k];
  }
  return rest;
}

function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string')
    throw new ServiceError('invalid_request', `${field} must be a string`, { param: field });
  return v;
}

/** The event of an action never decided (auditUndecided), before its outcome: its names as recorded. */
function undecidedEvent(
  agent: ActingAgent,
  ids: CallIds,
  action: GovernAction,
  extra: Record<string, unknown>,
): AuditInput & { details: Record<string, unknown> } {
  // Not scanned: any name may hold a secret, so each is recorded as the scan would have kept it.
  const named = {
    type: action.type,
    tool: recordableName(action.tool),
    server: recordableName(action.server),
    model: recordableName(action.model),
    provider: recordableName(action.provider),
  };
  return {
    org_id: agent.orgId,
    event_type: 'govern.decision',
    agent_id: agent.agentId,
    session_id: ids.sessionId,
    task_id: ids.taskId,
    pipeline_id: ids.pipelineId,
    behavior_type: action.type,
    model: named.model,
    provider: named.provider,
    details: Object.assign(callerDetails(agent), { action: named }, extra),
  };
}

/** What the decision routes need: a sidecar serves them from its snapshot, its log and its own mandate key. */
export type DecisionDeps = Pick<GovernDeps, 'snapshot' | 'governor' | 'audit' | 'mandates'> & {
  readonly approvals: Pick<ApprovalDesk, 'request'>;
};

/** `POST /v1/govern` and `POST /v1/tools/govern`: decide an action, with its approval or mandate. */
export function registerDecisionRoutes(router: Router<RouteHandler>, deps: DecisionDeps): void {
  const { snapshot, governor, audit, mandates, approvals } = deps;

  /** One governed action end to end: decide, approval or mandate, audit, answer. */
  const govern = async (
    ctx: Ctx,
    body: Record<string, unknown>,
    action: GovernAction,
    extra: Record<string, unknown> = {},
  ): Promise<void> => {
    const agent = actingAgent(ctx, snapshot, body.agent_id);
    const ids = callIds(ctx, body.session_id);
    const behaviorId = newId('bh_');
    const texts = stringsIn(action.payload, 'payload').map((text, i) => ({ message: i, part: -1, text }));
    const deciding = governor.decideOrDefer(agent, {
      type: action.type,
      tool: action.tool,
      server: action.server,
      model: action.model,
      provider: action.provider,
      args: action.args ?? undefined,
      payload: action.payload,
      context: payloadContext(action.payload),
      texts,
      flagsHeader: ctx.header('x-service-flags'),
      pipelineId: ids.pipelineId,
      cancel: ctx.res,
    });
    // A large call's content is scanned off the event loop (ScanPool); the credential is read
    // again after it (a key revoked meanwhile is refused as it would have been on arrival).
    let result: GovernResult;
    if (deciding instanceof Promise) {
      try {
        result = await deciding;
      } catch (err) {
        // Refused by the scan queue, or dropped from it (its client left): audited as such.
        await auditUndecided(audit, ctx.res, err, undecidedEvent(agent, ids, action, extra));
        return;
      }
      if (actingAgent(ctx, snapshot, body.agent_id).agentUuid !== agent.agentUuid)
        throw new ServiceError('forbidden', 'the credential no longer acts for this agent');
    } else result = deciding;
    const d = result.decision;
    const decidedAt = new Date().toISOString();
    // The names as the trail may keep them: a secret the scan found in one is recorded redacted.
    const named =
      result.scan.counts.secret > 0
        ? {
            tool: recordableName(action.tool),
            server: recordableName(action.server),
            model: recordableName(action.model),
            provider: recordableName(action.provider),
          }
        : action;
    let approval: ApprovalRef | undefined;
    let mandate: { token: string; jti: string; exp: number } | undefined;
    if (d.outcome === 'needs_approval') {
      approval = await approvals.request({
        org_id: agent.orgId,
        agent_id: agent.agentId,
        agent_uuid: agent.agentUuid,
        fingerprint: result.fingerprint,
        tier: d.tier ?? 'standard',
        summary: `${action.type}${named.tool ? ` ${named.tool}` : ''}: ${d.reason}`,
        matched_rule: d.rule_id,
        pipeline_id: ids.pipelineId,
        behavior_type: action.type,
        tool: named.tool,
        credential_id: agent.principal.credential_id,
      });
    } else if (d.outcome === 'allow') {
      mandate = await mandates.issue({
        sub: agent.agentId,
        org: agent.orgId,
        behavior_id: behaviorId,
        pipeline_id: ids.pipelineId,
        cap: { type: action.type, tool: action.tool, args_sha256: result.argsSha256 },
      });
    }
    // `extra` is assigned, not spread into the literal: see docs/ops.md ("Object spreads").
    const event: AuditInput = {
      org_id: agent.orgId,
      event_type: 'govern.decision',
      agent_id: agent.agentId,
      session_id: ids.sessionId,
      task_id: ids.taskId,
      pipeline_id: ids.pipelineId,
      behavior_type: action.type,
      outcome: d.outcome,
      reason: d.reason,
      rule_id: d.rule_id,
      model: named.model,
      provider: named.provider,
      detections: { input: detectionRecord(result.scan) },
      details: Object.assign(
        {
          behavior_id: behaviorId,
          action: {
            type: action.type,
            tool: named.tool,
            server: named.server,
            model: named.model,
            provider: named.provider,
          },
          decision: decisionRecord(result),
          fingerprint: result.fingerprint,
          approval_id: approval?.request_id ?? null,
          mandate_jti: mandate?.jti ?? null,
          credential_id: agent.principal.credential_id,
          acting_admin: agent.actingAdmin,
        },
        extra,
      ),
      personal: { args: action.args, payload: action.payload },
    };
    const pii = result.scan.summary.pii;
    // Most decisions find no PII: their event alone, without a Promise.all and its array.
    const appended = audit.append(event);
    const ref =
      pii.length === 0
        ? await appended
        : (
            await Promise.all([
              appended,
              audit.append(
                // `blocked` when the action was not allowed (block or needs_approval), else `allowed`:
                // a redact obligation is named as such, not claimed as done.
                piiDetectedEvent(
                  event,
                  { credential_id: agent.principal.credential_id, acting_admin: agent.actingAdmin },
                  'input',
                  pii,
                  d.outcome === 'allow' ? 'allowed' : 'blocked',
                  d.outcome === 'allow' && d.redact.includes('pii') ? 'redact' : null,
                ),
              ),
            ])
          )[0];
    const response: Record<string, unknown> = {
      outcome: d.outcome,
      reason: d.reason,
      behavior_id: behaviorId,
      pipeline_id: ids.pipelineId,
      session_id: ids.sessionId,
      decided_at: decidedAt,
      rule_id: d.rule_id,
      obligations: obligationsOf(d),
      details: {
        blocking_step: blockingStep(result.decision.outcome, result.decision.rule_id),
        mode: d.mode,
        would_outcome: d.would_outcome ?? null,
        detections: result.scan.summary,
        policy_id: result.policyRef.policy_id,
        policy_version: result.policyRef.version_no,
        flags_ignored: result.ignoredFlags,
        event_id: ref.id,
      },
    };
    if (mandate) response.mandate = mandate.token;
    if (approval) response.approval = approval;
    ctx.json(200, response);
  };

  router.add('POST', '/v1/govern', async (ctx) => {
    const body = ctx.jsonObject();
    await govern(ctx, body, parseAction(body));
  });

  router.add('POST', '/v1/tools/govern', async (ctx) => {
    const body = ctx.jsonObject();
    if (body.name === undefined || body.name === null || body.name === '')
      throw new ServiceError('invalid_request', 'name is required', { param: 'name' });
    const name = toolName(body.name, 'name');
    const args = body.arguments ?? {};
    if (!isObject(args))
      throw new ServiceError('invalid_request', 'arguments must be an object', { param: 'arguments' });
    stringsIn(args, 'arguments');
    const toolCallId = optionalString(body, 'tool_call_id') ?? null;
    await govern(
      ctx,
      body,
      {
        type: 'TOOL_CALL',
        tool: name,
        server: null,
        model: null,
        provider: null,
        args,
        payload: { tool: name, args },
      },
      { tool_call_id: recordableName(toolCallId) },
    );
  });
}

export function registerGovernRoutes(router: Router<RouteHandler>, deps: GovernDeps): void {
  const { snapshot, audit, mandates, approvals, tools } = deps;
  registerDecisionRoutes(router, deps);
  registerExecutionRoute(router, { snapshot, audit, auditReader: deps.auditReader });

  router.add('POST', '/v1/govern/approve', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const body = ctx.jsonObject();
    const agentId = body.agent_id;
    if (typeof agentId !== 'string' || agentId === '')
      throw new ServiceError('invalid_request', 'agent_id is required', { param: 'agent_id' });
    const orgId = targetOrg(ctx, p, body.org_id, deps.orgExists);
    const agent = snapshot.agentByName(orgId, agentId);
    if (!agent)
      throw new ServiceError('not_found', `agent ${agentId} does not exist in this org`, {
        param: 'agent_id',
      });
    const type = body.type ?? 'TOOL_CALL';
    if (typeof type !== 'string' || !TYPES.has(type))
      throw new ServiceError('invalid_request', `type must be one of ${BEHAVIOR_TYPES.join(', ')}`, {
        param: 'type',
      });
    // The action as /v1/govern would see it: `payload` (optional) carries the members beyond
    // tool and args that the approval is for, e.g. a write's target.
    const payload = body.payload ?? {};
    if (!isObject(payload))
      throw new ServiceError('invalid_request', 'payload must be an object', { param: 'payload' });
    stringsIn(payload, 'payload');
    const tool =
      body.tool != null
        ? toolName(body.tool, 'tool')
        : payload.tool != null
          ? toolName(payload.tool, 'payload.tool')
          : null;
    if (body.tool != null && payload.tool != null && toolName(payload.tool, 'payload.tool') !== tool)
      throw new ServiceError('invalid_request', 'tool and payload.tool name different tools', {
        param: 'tool',
      });
    // As /v1/govern reads the action: a TOOL_CALL names its tool, and no arguments are {}.
    if (type === 'TOOL_CALL' && tool === null)
      throw new ServiceError('invalid_request', 'a TOOL_CALL needs tool', { param: 'tool' });
    if (body.args != null && payload.args != null)
      throw new ServiceError('invalid_request', 'give args or payload.args, not both', { param: 'args' });
    const args = body.args ?? payload.args ?? (type === 'TOOL_CALL' ? {} : null);
    if (args !== null && !isObject(args))
      throw new ServiceError('invalid_request', 'args must be an object', { param: 'args' });
    if (args !== null) stringsIn(args, 'args');
    const fingerprint = actionFingerprint({
      org_id: orgId,
      agent_id: agent.agent_id,
      type,
      tool,
      args,
      context: payloadContext(payload),
    });
    const approval = await approvals.preApprove(
      {
        org_id: orgId,
        agent_id: agent.agent_id,
        agent_uuid: agent.agent_uuid,
        fingerprint,
        behavior_type: type,
        tool,
      },
      p,
    );
    ctx.json(200, { approved: true, fingerprint, approval });
  });

  router.add('POST', '/v1/tools/execute', async (ctx) => {
    const body = ctx.jsonObject();
    const agent = actingAgent(ctx, snapshot, body.agent_id);
    const token = body.mandate;
    const args = body.arguments ?? {};
    if (typeof token !== 'string' || token === '')
      throw new ServiceError('invalid_request', 'mandate is required', { param: 'mandate' });
    if (body.name === undefined || body.name === null || body.name === '')
      throw new ServiceError('invalid_request', 'name is required', { param: 'name' });
    const name = toolName(body.name, 'name');
    if (!isObject(args))
      throw new ServiceError('invalid_request', 'arguments must be an object', { param: 'arguments' });
    stringsIn(args, 'arguments');
    const checked = await mandates.verify(token);
    const refuse = async (why: string): Promise<never> => {
      await audit.append({
        org_id: agent.orgId,
        event_type: 'tool.execution_refused',
        agent_id: agent.agentId,
        outcome: 'block',
        // The names in it are the agent's (or its mandate's): a secret in one is kept redacted.
        reason: recordable(why),
        details: Object.assign(callerDetails(agent), { tool: recordable(name) }),
      });
      throw new ServiceError('mandate_invalid', `the mandate does not authorise this call: ${why}`, {
        param: 'mandate',
      });
    };
    if (!checked.valid) return refuse(checked.error);
    const c = checked.claims;
    if (c.org !== agent.orgId || c.sub !== agent.agentId) return refuse('it was issued to another agent');
    if (c.cap.type !== 'TOOL_CALL' || c.cap.tool !== name)
      return refuse(`it is for ${c.cap.type} ${c.cap.tool ?? ''}`.trim());
    if (c.cap.args_sha256 !== argsDigest(args)) return refuse('the arguments differ from the governed ones');
    // Looked up before the mandate is used, so a call to a tool not configured yet leaves the
    // mandate to run once an operator adds it.
    let tool: ReturnType<ToolRegistry['require']>;
    try {
      tool = tools.require(agent.orgId, name);
    } catch (err) {
      // An attempt all the same: in the trail, as a refusal that left the mandate unused.
      await audit.append({
        org_id: agent.orgId,
        event_type: 'tool.execution_refused',
        agent_id: agent.agentId,
        pipeline_id: c.pipeline_id,
        behavior_type: 'TOOL_CALL',
        outcome: 'block',
        reason: recordable(err instanceof Error ? err.message : String(err)),
        details: Object.assign(callerDetails(agent), {
          tool: recordable(name),
          mandate_jti: c.jti,
          mandate_used: false,
        }),
      });
      throw err;
    }
    // A mandate runs its call once: it is revoked as it is used, and only the call whose
    // revocation is the first to commit runs (others presenting it at once passed verify too).
    const claimed = await mandates.revoke(
      c.jti,
      agent.orgId,
      agent.agentUuid,
      'consumed by /v1/tools/execute',
    );
    if (!claimed.created) return refuse('revoked');
    // The args go as the body, except to a GET tool (docs/api.md): they are recorded either way,
    // as what the mandate covered, and body_sent says whether the tool got them.
    const sendsBody = tool.method !== 'GET';
    // In the trail before the tool may act: a call that outlives the process (or a shutdown's
    // drain, or whose final event cannot be written) still shows it was made, under which mandate.
    await audit.append({
      org_id: agent.orgId,
      event_type: 'tool.execution_started',
      agent_id: agent.agentId,
      pipeline_id: c.pipeline_id,
      behavior_type: 'TOOL_CALL',
      outcome: 'allow',
      details: Object.assign(callerDetails(agent), { tool: name, method: tool.method, mandate_jti: c.jti }),
    });
    // Not cancelled when the agent goes away: once dispatched, a tool may act (a payment, a
    // write), so the call runs to its end and what the tool answered is recorded. The answer to a
    // gone agent is dropped (ctx writes nothing to a closed response).
    const started = performance.now();
    let result: Awaited<ReturnType<ToolRegistry['execute']>>;
    try {
      result = await tools.execute(agent.orgId, tool, args);
    } catch (err) {
      // An error other than a ToolCallError came before anything was dispatched.
      const failed = err instanceof ToolCallError ? err : undefined;
      const requestSent = failed?.requestSent ?? false;
      await audit.append({
        org_id: agent.orgId,
        event_type: 'tool.execution',
        agent_id: agent.agentId,
        pipeline_id: c.pipeline_id,
        behavior_type: 'TOOL_CALL',
        outcome: 'error',
        reason: err instanceof Error ? err.message : String(err),
        details: Object.assign(callerDetails(agent), {
          tool: name,
          method: tool.method,
          request_sent: requestSent,
          body_sent: sendsBody && requestSent,
          status: failed?.toolStatus ?? null,
          mandate_jti: c.jti,
          duration_ms: performance.now() - started,
          client_disconnected: ctx.res.aborted && !ctx.res.cut,
        }),
        personal: { args },
      });
      throw err;
    }
    const ref = await audit.append({
      org_id: agent.orgId,
      event_type: 'tool.execution',
      agent_id: agent.agentId,
      pipeline_id: c.pipeline_id,
      behavior_type: 'TOOL_CALL',
      outcome: result.status < 400 ? 'ok' : 'failed',
      details: Object.assign(callerDetails(agent), {
        tool: name,
        method: tool.method,
        request_sent: true,
        body_sent: sendsBody,
        status: result.status,
        mandate_jti: c.jti,
        duration_ms: performance.now() - started,
        client_disconnected: ctx.res.aborted && !ctx.res.cut,
      }),
      personal: { args },
    });
    ctx.json(200, { status: result.status, body: result.body, event_id: ref.id });
  });

  router.add('GET', '/api/settings/tools', (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    ctx.json(200, { tools: tools.view(targetOrg(ctx, p, undefined, deps.orgExists)) });
  });

  router.add('PUT', '/api/settings/tools', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const body = strictBody<{ tools: unknown[]; org_id?: string }>(ctx.jsonObject(), {
      tools: { type: 'array', required: true },
      org_id: { type: 'string' },
    });
    const orgId = targetOrg(ctx, p, body.org_id, deps.orgExists);
    const list = body.tools.map((raw, i) => {
      if (!isObject(raw))
        throw new ServiceError('invalid_request', `tools[${i}] must be an object`, { param: `tools[${i}]` });
      return strictBody<{
        name: string;
        url: string;
        method?: string;
        headers?: Record<string, string>;
        timeout_ms?: number;
      }>(raw, {
        name: { type: 'string', required: true, maxLength: 200 },
        url: { type: 'string', required: true, maxLength: 2000 },
        method: { type: 'string', enum: ['POST', 'PUT', 'PATCH', 'GET', 'post', 'put', 'patch', 'get'] },
        headers: { type: 'object' },
        timeout_ms: { type: 'integer', min: 100, max: 120000 },
      });
    });
    // Every name before any URL is checked: a tool is configured under a name it can be governed by.
    for (const [i, t] of list.entries()) toolName(t.name, `tools[${i}].name`);
    await tools.replace(orgId, list);
    // Where each tool sends its calls, and which headers it adds (never their values).
    await adminEvent(audit, orgId, p, 'tools_updated', {
      tools: list.map((t) =>
        Object.assign({ name: t.name }, recordedUrl(t.url), {
          method: (t.method ?? 'POST').toUpperCase(),
          headers: Object.keys(t.headers ?? {}).map((h) => h.toLowerCase()),
        }),
      ),
    });
    ctx.json(200, { tools: tools.view(orgId) });
  });
}
