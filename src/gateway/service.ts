import type { AuditSink } from '../audit/types.js';
import { isServiceError, ServiceError } from '../core/errors.js';
import type { Ctx } from '../http/context.js';
import type { Metrics } from '../metrics/index.js';
import type { Provider } from '../providers/types.js';
import {
  anthropicRequestToOpenai,
  type ChatCompletion,
  type ChatCompletionChunk,
  type ChatCompletionRequest,
  type OpenaiUsage,
} from '../providers/wire/index.js';
import type { Snapshot } from '../snapshot/types.js';
import type { IdempotencyStore, StoredResponse } from '../store/idempotency.js';
import { newId, sha256Hex } from '../util/ids.js';
import { type ActingAgent, actingAgent } from './acting-agent.js';
import { envelope } from './envelope.js';
import { anthropicFrontEnd, type FrontEnd, openaiFrontEnd } from './renderers.js';
import {
  LIMITS,
  takesDefaultTemperature,
  validateChatRequest,
  validateEmbeddingRequest,
  validateMessagesRequest,
} from './validate.js';

export interface GatewayDeps {
  readonly snapshot: Snapshot;
  readonly audit: AuditSink;
  readonly metrics: Metrics;
  readonly idempotency: IdempotencyStore;
  /** Base of `service.audit_url`. */
  readonly baseUrl: string;
}

/** Per-call identifiers: the session pins across calls, task and pipeline are this call's. */
interface CallIds {
  readonly sessionId: string;
  readonly taskId: string;
  readonly pipelineId: string;
}

const SESSION_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const TEMPERATURE_PREFIX = Buffer.from(`{"temperature":${LIMITS.defaultTemperature},`);

function callIds(ctx: Ctx): CallIds {
  const given = ctx.header('x-session-id');
  if (given !== undefined && !SESSION_ID_RE.test(given)) {
    throw new ServiceError('invalid_request', 'X-Session-Id must be 1-128 characters of [A-Za-z0-9._:-]', {
      param: 'X-Session-Id',
    });
  }
  const task = ctx.header('x-task-id');
  return {
    sessionId: given ?? newId('ses_'),
    taskId: task !== undefined && SESSION_ID_RE.test(task) ? task : newId('tsk_'),
    pipelineId: newId('pl_'),
  };
}

/**
 * X-Service-Flags: comma-separated `key=value` pairs. Parsed and recorded; the policy engine
 * decides what each flag does.
 */
export function parseFlagsHeader(raw: string | undefined): Record<string, string> | null {
  if (raw === undefined || raw.trim() === '') return null;
  const out: Record<string, string> = {};
  for (const part of raw.split(',')) {
    const item = part.trim();
    if (item === '') continue;
    const eq = item.indexOf('=');
    const key = eq > 0 ? item.slice(0, eq).trim() : '';
    if (!/^[a-z_]{1,32}$/.test(key) || eq === item.length - 1) {
      throw new ServiceError('invalid_flags', `X-Service-Flags: "${item}" is not key=value`, {
        param: 'X-Service-Flags',
      });
    }
    out[key] = item.slice(eq + 1).trim();
  }
  return out;
}

/** The caller's exact bytes with the default temperature spliced in (no re-serialisation). */
function withDefaultTemperature(body: Buffer): Buffer {
  let i = 0;
  while (i < body.length && body[i] !== 0x7b) i++;
  return Buffer.concat([TEMPERATURE_PREFIX, body.subarray(i + 1)]);
}

function usageOf(
  u: OpenaiUsage | null | undefined,
): { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null {
  if (!u) return null;
  return {
    prompt_tokens: u.prompt_tokens ?? 0,
    completion_tokens: u.completion_tokens ?? 0,
    total_tokens: u.total_tokens ?? 0,
  };
}

export class GatewayService {
  constructor(private readonly deps: GatewayDeps) {}

  readonly chatCompletions = async (ctx: Ctx): Promise<void> => {
    const agent = actingAgent(ctx, this.deps.snapshot);
    const request = validateChatRequest(ctx.jsonBody());
    let rawBody: Buffer | undefined = ctx.req.body;
    if (takesDefaultTemperature(request)) {
      request.temperature = LIMITS.defaultTemperature;
      rawBody = withDefaultTemperature(ctx.req.body);
    }
    await this.runChat(ctx, openaiFrontEnd, agent, request, rawBody, request.user ?? null);
  };

  readonly messages = async (ctx: Ctx): Promise<void> => {
    const agent = actingAgent(ctx, this.deps.snapshot);
    const anthropicRequest = validateMessagesRequest(ctx.jsonBody());
    const request = anthropicRequestToOpenai(anthropicRequest);
    const endUser = anthropicRequest.metadata?.user_id;
    await this.runChat(
      ctx,
      anthropicFrontEnd,
      agent,
      request,
      undefined,
      typeof endUser === 'string' ? endUser : null,
    );
  };

  private async runChat(
    ctx: Ctx,
    fe: FrontEnd,
    agent: ActingAgent,
    request: ChatCompletionRequest,
    rawBody: Buffer | undefined,
    endUser: string | null,
  ): Promise<void> {
    const flags = parseFlagsHeader(ctx.header('x-service-flags'));
    const ids = callIds(ctx);
    const idemKey = ctx.header('idempotency-key');
    let bodyHash = '';
    if (idemKey !== undefined) {
      if (idemKey.length === 0 || idemKey.length > 255) {
        throw new ServiceError('invalid_request', 'Idempotency-Key must be 1-255 characters', {
          param: 'Idempotency-Key',
        });
      }
      bodyHash = sha256Hex(`${fe.endpoint}\0${ctx.req.body.toString('utf8')}`);
      const stored = this.deps.idempotency.begin(agent.orgId, agent.agentUuid, idemKey, bodyHash);
      if (stored) {
        this.replay(ctx, agent, stored, idemKey);
        return;
      }
    }
    let kept: StoredResponse | undefined;
    try {
      const provider = this.deps.snapshot.providers(agent.orgId).resolve(request.model);
      const base = {
        org_id: agent.orgId,
        agent_id: agent.agentId,
        session_id: ids.sessionId,
        task_id: ids.taskId,
        pipeline_id: ids.pipelineId,
        behavior_type: 'LLM_CALL',
        provider: provider.name,
        model: request.model,
      };
      const details = {
        endpoint: fe.endpoint,
        format: fe.format,
        stream: request.stream === true,
        flags,
        acting_admin: agent.actingAdmin,
        idempotency_key: idemKey ?? null,
      };
      const personal = endUser === null ? undefined : { end_user: endUser };
      const service = envelope(this.deps.baseUrl, ids.sessionId, ids.taskId, ids.pipelineId, false);
      const ac = new AbortController();
      ctx.res.onAbort(() => ac.abort());
      const t0 = performance.now();
      if (request.stream === true) {
        kept = await this.stream(ctx, fe, provider, request, ac.signal, service, base, details, personal, t0);
        return;
      }
      let completion: ChatCompletion;
      try {
        completion = await provider.chat({
          request,
          rawBody: fe.format === 'openai' && provider.name === 'openai' ? rawBody : undefined,
          signal: ac.signal,
        });
      } catch (err) {
        const upstreamS = (performance.now() - t0) / 1000;
        this.deps.metrics.upstreamCall(provider.name, 'error', upstreamS);
        const e = isServiceError(err)
          ? err
          : new ServiceError('upstream_error', 'provider call failed', { cause: err });
        await this.deps.audit.append({
          ...base,
          event_type: 'llm_call',
          outcome: 'error',
          reason: e.message,
          details: { ...details, status: e.status, error_code: e.code, upstream_ms: upstreamS * 1000 },
          personal,
        });
        throw e;
      }
      const upstreamS = (performance.now() - t0) / 1000;
      this.deps.metrics.upstreamCall(provider.name, 'ok', upstreamS);
      const t1 = performance.now();
      await this.deps.audit.append({
        ...base,
        event_type: 'llm_call',
        outcome: 'allow',
        usage: usageOf(completion.usage),
        details: {
          ...details,
          status: 200,
          finish_reason: completion.choices[0]?.finish_reason ?? null,
          tool_calls: completion.choices[0]?.message.tool_calls?.map((t) => t.function.name) ?? [],
          upstream_ms: upstreamS * 1000,
        },
        personal,
      });
      this.deps.metrics.phase('audit', (performance.now() - t1) / 1000);
      const body = JSON.stringify(fe.renderCompletion(completion, service, request.model));
      ctx.sendRaw(200, 'application/json', body);
      kept = { status: 200, content_type: 'application/json', body, pipeline_id: ids.pipelineId };
    } finally {
      if (idemKey !== undefined)
        this.deps.idempotency.complete(agent.orgId, agent.agentUuid, idemKey, bodyHash, kept);
    }
  }

  /** Streams the answer. Headers wait for the first chunk, so an early failure is a plain error. */
  private async stream(
    ctx: Ctx,
    fe: FrontEnd,
    provider: Provider,
    request: ChatCompletionRequest,
    signal: AbortSignal,
    service: ReturnType<typeof envelope>,
    base: Record<string, unknown> & { org_id: string },
    details: Record<string, unknown>,
    personal: Record<string, unknown> | undefined,
    t0: number,
  ): Promise<StoredResponse | undefined> {
    const wantsUsage = request.stream_options?.include_usage === true;
    const renderer = fe.streamRenderer(request.model, wantsUsage);
    const iterator = provider.chatStream({ request, signal })[Symbol.asyncIterator]();
    const metrics = this.deps.metrics;
    let transcript = '';
    let usage: OpenaiUsage | null | undefined;
    let finish: string | null = null;
    const toolCalls: string[] = [];
    const observe = (c: ChatCompletionChunk): void => {
      if (c.usage) usage = c.usage;
      const choice = c.choices[0];
      if (choice?.finish_reason) finish = choice.finish_reason;
      for (const tc of choice?.delta.tool_calls ?? [])
        if (tc.function?.name) toolCalls.push(tc.function.name);
    };
    let first: IteratorResult<ChatCompletionChunk>;
    try {
      first = await iterator.next();
    } catch (err) {
      metrics.upstreamCall(provider.name, 'error', (performance.now() - t0) / 1000);
      const e = isServiceError(err)
        ? err
        : new ServiceError('upstream_error', 'provider call failed', { cause: err });
      await this.deps.audit.append({
        ...base,
        event_type: 'llm_call',
        outcome: 'error',
        reason: e.message,
        details: { ...details, status: e.status, error_code: e.code },
        personal,
      });
      throw e;
    }
    const contentType = 'text/event-stream; charset=utf-8';
    ctx.startStream(200, contentType, { connection: 'keep-alive' });
    metrics.openStreams.inc();
    let failure: ServiceError | undefined;
    try {
      let step = first;
      while (!step.done) {
        observe(step.value);
        const text = renderer.chunk(step.value);
        if (text !== '') {
          transcript += text;
          if (!ctx.res.write(text)) break;
        }
        step = await iterator.next();
      }
    } catch (err) {
      failure = isServiceError(err)
        ? err
        : new ServiceError('upstream_error', 'provider stream failed', { cause: err });
    } finally {
      metrics.openStreams.dec();
    }
    const upstreamS = (performance.now() - t0) / 1000;
    metrics.upstreamCall(provider.name, failure ? 'error' : 'ok', upstreamS);
    const aborted = ctx.res.aborted;
    await this.deps.audit.append({
      ...base,
      event_type: 'llm_call',
      outcome: failure ? 'error' : 'allow',
      reason: failure?.message ?? (aborted ? 'client disconnected' : null),
      usage: usageOf(usage),
      details: {
        ...details,
        status: 200,
        finish_reason: finish,
        tool_calls: toolCalls,
        upstream_ms: upstreamS * 1000,
        client_disconnected: aborted,
        error_code: failure?.code ?? null,
      },
      personal,
    });
    if (aborted) return undefined;
    if (failure) {
      ctx.endStream(renderer.error(failure, ctx.requestId));
      return undefined;
    }
    const tail = renderer.finish(service);
    ctx.endStream(tail);
    return {
      status: 200,
      content_type: contentType,
      body: transcript + tail,
      pipeline_id: service.audit_url.slice(service.audit_url.lastIndexOf('/') + 1),
    };
  }

  private replay(ctx: Ctx, agent: ActingAgent, stored: StoredResponse, key: string): void {
    ctx.reason = 'idempotent_replay';
    void this.deps.audit
      .append({
        org_id: agent.orgId,
        event_type: 'idempotent_replay',
        agent_id: agent.agentId,
        pipeline_id: stored.pipeline_id,
        outcome: 'allow',
        details: { idempotency_key: key, endpoint: ctx.route },
      })
      .then(() =>
        ctx.sendRaw(stored.status, stored.content_type, stored.body, { 'idempotent-replayed': 'true' }),
      )
      .catch((err: unknown) => ctx.fail(err));
  }

  readonly embeddings = async (ctx: Ctx): Promise<void> => {
    const agent = actingAgent(ctx, this.deps.snapshot);
    const request = validateEmbeddingRequest(ctx.jsonBody());
    parseFlagsHeader(ctx.header('x-service-flags'));
    const ids = callIds(ctx);
    const provider = this.deps.snapshot.providers(agent.orgId).resolve(request.model);
    const ac = new AbortController();
    ctx.res.onAbort(() => ac.abort());
    const t0 = performance.now();
    const base = {
      org_id: agent.orgId,
      event_type: 'embedding_call',
      agent_id: agent.agentId,
      session_id: ids.sessionId,
      task_id: ids.taskId,
      pipeline_id: ids.pipelineId,
      behavior_type: 'EMBEDDING_CALL',
      provider: provider.name,
      model: request.model,
      personal: typeof request.user === 'string' ? { end_user: request.user } : undefined,
    };
    let result: Awaited<ReturnType<Provider['embed']>>;
    try {
      result = await provider.embed(request, ac.signal);
    } catch (err) {
      this.deps.metrics.upstreamCall(provider.name, 'error', (performance.now() - t0) / 1000);
      const e = isServiceError(err)
        ? err
        : new ServiceError('upstream_error', 'provider call failed', { cause: err });
      await this.deps.audit.append({
        ...base,
        outcome: 'error',
        reason: e.message,
        details: { status: e.status, error_code: e.code },
      });
      throw e;
    }
    this.deps.metrics.upstreamCall(provider.name, 'ok', (performance.now() - t0) / 1000);
    const inputs = Array.isArray(request.input) ? request.input.length : 1;
    await this.deps.audit.append({
      ...base,
      outcome: 'allow',
      usage: {
        prompt_tokens: result.usage?.prompt_tokens ?? 0,
        completion_tokens: 0,
        total_tokens: result.usage?.total_tokens ?? 0,
      },
      details: { status: 200, inputs },
    });
    result.service = envelope(this.deps.baseUrl, ids.sessionId, ids.taskId, ids.pipelineId, false);
    ctx.json(200, result);
  };

  readonly models = async (ctx: Ctx): Promise<void> => {
    const agent = actingAgent(ctx, this.deps.snapshot);
    const ac = new AbortController();
    ctx.res.onAbort(() => ac.abort());
    const models = await this.deps.snapshot.providers(agent.orgId).listModels(ac.signal);
    ctx.json(200, {
      object: 'list',
      data: models.map((m) => ({ id: m.id, object: 'model', created: 0, owned_by: m.owned_by })),
    });
  };
}
