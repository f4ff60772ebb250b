import type { AuditInput, AuditSink } from '../audit/types.js';
import { canonicalize } from '../core/chain/jcs.js';
import type { Finding } from '../core/detect/index.js';
import { isServiceError, ServiceError, UnsentError } from '../core/errors.js';
import {
  anthropicRequestTexts,
  argsDigest,
  costOf,
  decodedJson,
  embeddingTexts,
  estimateCost,
  guardText,
  type KeyWatch,
  type OutputGuard,
  outputGuard,
  prescannedGuard,
  priceOf,
  type Redaction,
  recordable,
  recordingGuard,
  redactAnthropicRequest,
  redactRequest,
  requestTexts,
} from '../core/guardrails/index.js';
import type { Governor, GovernResult } from '../govern/governor.js';
import { decisionRecord, detectionRecord } from '../govern/governor.js';
import { isLargeText, type ScanPool } from '../govern/scan-pool.js';
import type { ApprovalRequest } from '../govern/types.js';
import type { Ctx } from '../http/context.js';
import type { Metrics } from '../metrics/index.js';
import type { MessagesCall, Provider } from '../providers/types.js';
import { PROVIDER_KEY_DETECTION } from '../providers/upstream.js';
import {
  ANTHROPIC_STOP,
  type AnthropicMessage,
  type AnthropicMessagesRequest,
  anthropicRequestToOpenai,
  anthropicResponseToOpenai,
  CACHE_WRITE_TOKENS,
  type ChatCompletion,
  type ChatCompletionRequest,
  type EmbeddingRequest,
  forwardedAnthropicRequest,
  type OpenaiUsage,
} from '../providers/wire/index.js';
import type { Snapshot } from '../snapshot/types.js';
import type { IdempotencyStore, StoredResponse } from '../store/idempotency.js';
import { sha256Hex } from '../util/ids.js';
import { type ActingAgent, actingAgent, callerDetails } from './acting-agent.js';
import { guardAnthropicMessage } from './anthropic-output.js';
import { type ApprovalRef, blockedChunks, blockedCompletion, blockMessage } from './blocked.js';
import { type CallIds, callIds } from './call-ids.js';
import { envelope, type ServiceEnvelope } from './envelope.js';
import type { StreamBlock } from './output-stream.js';
import { piiDetectedEvent } from './pii-event.js';
import { anthropicFrontEnd, type FrontEnd, openaiFrontEnd } from './renderers.js';
import { anthropicWire, canonicalWire, estimatedUsage, promptChars, type StreamWire } from './stream-wire.js';
import { auditUndecided, earlyEnd } from './undecided.js';
import {
  LIMITS,
  takesDefaultTemperature,
  validateChatRequest,
  validateEmbeddingRequest,
  validateMessagesRequest,
} from './validate.js';

/** Creates a pending approval for a call the policy wants a human to approve. */
export type ApprovalRequester = (input: ApprovalRequest) => Promise<ApprovalRef>;

export interface GatewayDeps {
  readonly snapshot: Snapshot;
  readonly audit: AuditSink;
  readonly metrics: Metrics;
  readonly idempotency: IdempotencyStore;
  readonly governor: Governor;
  readonly requestApproval: ApprovalRequester;
  /** Base of `service.audit_url`. */
  readonly baseUrl: string;
  /** A streamed answer's client that takes nothing for this long while behind is let go. */
  readonly clientStallMs: number;
  /** Scans a large answer off the event loop (without it, every answer is scanned inline). */
  readonly scans?: ScanPool;
}

/**
 * A stream reads on from its provider only while its client's connection holds less than this
 * much unsent (docs/ops.md, "Slow clients"): past it, it waits for the client, so the provider's
 * connection is paused (undici's queue fills) instead of govgate buffering the answer.
 */
export const STREAM_BACKLOG_BYTES = 256 * 1024;

const TEMPERATURE_PREFIX = Buffer.from(`{"temperature":${LIMITS.defaultTemperature},`);

/** The caller's exact bytes with the default temperature spliced in (no re-serialisation). */
function withDefaultTemperature(body: Buffer): Buffer {
  let i = 0;
  while (i < body.length && body[i] !== 0x7b) i++;
  return Buffer.concat([TEMPERATURE_PREFIX, body.subarray(i + 1)]);
}

function usageOf(u: OpenaiUsage | null | undefined): AuditInput['usage'] {
  if (!u) return null;
  return {
    prompt_tokens: u.prompt_tokens ?? 0,
    completion_tokens: u.completion_tokens ?? 0,
    total_tokens: u.total_tokens ?? 0,
  };
}

/** What the call cost at list prices, from its usage (null when the price or usage is unknown). */
function callCost(model: string, u: OpenaiUsage | null | undefined): number | null {
  const price = priceOf(model);
  if (!price || !u) return null;
  const cost = costOf(
    price,
    u.prompt_tokens ?? 0,
    u.completion_tokens ?? 0,
    u.prompt_tokens_details?.cached_tokens ?? 0,
    u[CACHE_WRITE_TOKENS] ?? 0,
  );
  return Math.round(cost * 1e9) / 1e9;
}

/**
 * A finding the policy wants redacted sits where the text cannot be rewritten in place (a tool's
 * parameters schema, another free-text field): the call is refused rather than forwarded.
 */
function refuseUnredactable(gov: GovernResult, stuck: NonNullable<Redaction['stuck']>): GovernResult {
  const what = stuck.category === 'pii' ? 'personal data' : 'a secret';
  return blockedBy(
    gov,
    stuck.category === 'pii' ? 'detector:pii' : 'detector:secrets',
    `${what} was detected in ${stuck.path}, which cannot be redacted in place`,
  );
}

/** `gov` with its decision turned into a block by `ruleId` (a step after the policy's own). */
function blockedBy(gov: GovernResult, ruleId: string, reason: string): GovernResult {
  return {
    ...gov,
    decision: { ...gov.decision, outcome: 'block', effect: 'block', rule_id: ruleId, reason },
  };
}

/**
 * Token-id inputs cannot be inspected: while the pii or secrets detector would act on a finding
 * (block or redact, or any finding in lockdown) they are refused rather than forwarded unseen.
 */
function refuseTokenInputs(gov: GovernResult): GovernResult {
  const { mode, pii, secrets } = gov.flags;
  if (gov.decision.outcome !== 'allow' || (mode !== 'enforce' && mode !== 'lockdown')) return gov;
  const acts = (a: string): boolean => mode === 'lockdown' || a === 'block' || a === 'redact';
  const detector = acts(pii) ? 'pii' : acts(secrets) ? 'secrets' : null;
  if (detector === null) return gov;
  return blockedBy(
    gov,
    `detector:${detector}`,
    `inputs given as token ids cannot be inspected for ${detector === 'pii' ? 'personal data' : 'secrets'}; send them as text`,
  );
}

/**
 * What an approval of a model call is for: the whole request as the caller sent it, canonical
 * (JCS), hashed. Roles, message boundaries and every setting are part of it: an approved prompt
 * cannot be re-roled into a system prompt, nor the approved call asked for `n` times over.
 */
function requestDigest(request: unknown): string {
  return argsDigest(request);
}

/** Beta feature names, comma-separated, as Anthropic spells them: `name-of-feature-YYYY-MM-DD`. */
const BETA_NAME = '[a-z0-9]+(?:-[a-z0-9]+)*-\\d{4}-\\d{2}-\\d{2}';
const ANTHROPIC_BETA = new RegExp(`^${BETA_NAME}(?:\\s*,\\s*${BETA_NAME})*$`);

/**
 * A forwarded Anthropic call's cancellation and the caller's `anthropic-beta` header, which asks
 * the provider for beta features (interleaved thinking, longer contexts, ...): passed on when it
 * is a list of feature names (the features that need a field govgate does not forward stay off).
 */
function messagesCall(ctx: Ctx): MessagesCall {
  const beta = ctx.header('anthropic-beta');
  if (beta !== undefined && (beta.length > 1024 || !ANTHROPIC_BETA.test(beta)))
    throw new ServiceError(
      'invalid_request',
      'anthropic-beta must be a comma-separated list of feature names',
      {
        param: 'anthropic-beta',
      },
    );
  return { cancel: ctx.res, beta };
}

function asServiceError(err: unknown): ServiceError {
  return isServiceError(err)
    ? err
    : new ServiceError('upstream_error', 'provider call failed', { cause: err });
}

type Choice = ChatCompletion['choices'][number];
type AnswerMessage = Choice['message'] & { function_call?: { name: string; arguments: string } };

/**
 * A guarded answer's choice as the guard read it, as a guarded stream's chunks are: the message's
 * text, refusal and calls (each from the member its type names), the finish. `logprobs` would
 * repeat the tokens of text the guard redacted, and members govgate does not know (an `audio`
 * transcript, `annotations`, a `function` member on a custom call) were never scanned.
 */
function guardedChoice(c: Choice): Choice {
  const m = c.message as AnswerMessage;
  const message: AnswerMessage = { role: 'assistant', content: m.content ?? null };
  if (m.refusal !== undefined) message.refusal = m.refusal;
  if (m.tool_calls !== undefined)
    message.tool_calls = m.tool_calls.map((tc) =>
      tc.type === 'custom'
        ? { id: tc.id, type: 'custom', custom: { name: tc.custom.name, input: tc.custom.input } }
        : {
            id: tc.id,
            type: 'function',
            function: { name: tc.function.name, arguments: tc.function.arguments },
          },
    );
  const legacy = m.function_call;
  if (legacy) message.function_call = { name: legacy.name, arguments: legacy.arguments };
  const out: Choice = { index: c.index, message, finish_reason: c.finish_reason, logprobs: null };
  const stop = c[ANTHROPIC_STOP];
  if (stop !== undefined) out[ANTHROPIC_STOP] = stop;
  return out;
}

/** The tools an answer calls (functions and custom tools), over all its choices. */
function toolCallNames(choices: ChatCompletion['choices']): string[] {
  const names: string[] = [];
  for (const c of choices)
    for (const tc of c.message?.tool_calls ?? [])
      names.push(tc.type === 'custom' ? tc.custom.name : tc.function.name);
  return names;
}

/** A call's Idempotency-Key, and the hashes that bind it to the request (idempotencyKey). */
interface IdemKey {
  readonly key: string;
  readonly hash: string;
  /** The hash of the body's bytes, as records kept before keys bound canonical JSON hold it. */
  readonly legacyHash: () => string;
}

/** Keeps an allowed answer for its Idempotency-Key's replays; resolves once it is committed. */
type Keep = (response: StoredResponse) => Promise<void>;

/**
 * The call's Idempotency-Key (1-255 characters) and the hash binding it to the endpoint, the body
 * and the `bound` header; undefined when the call has none.
 */
function idempotencyKey(ctx: Ctx, endpoint: string, bound?: string): IdemKey | undefined {
  const key = ctx.header('idempotency-key');
  if (key === undefined) return undefined;
  if (key.length === 0 || key.length > 255)
    throw new ServiceError('invalid_request', 'Idempotency-Key must be 1-255 characters', {
      param: 'Idempotency-Key',
    });
  const extra = bound === undefined ? undefined : ctx.header(bound);
  const tail = extra === undefined ? '' : `\0${extra}`;
  const raw = ctx.req.body.toString('utf8');
  return {
    key,
    hash: sha256Hex(`${endpoint}\0${canonicalBody(raw)}${tail}`),
    legacyHash: () => sha256Hex(`${endpoint}\0${raw}${tail}`),
  };
}

/**
 * The body a key binds: its JSON canonical (RFC 8785), so a client that re-serializes the same
 * request (members in another order, other spacing) replays it. A body JCS cannot write (a number
 * beyond a double's range, nesting past its depth) binds as it came.
 */
function canonicalBody(raw: string): string {
  try {
    return canonicalize(JSON.parse(raw));
  } catch {
    return raw;
  }
}

interface CallRecord {
  readonly base: Omit<AuditInput, 'event_type'>;
  readonly details: Record<string, unknown>;
  readonly gov: GovernResult;
  readonly service: ServiceEnvelope;
  readonly ids: CallIds;
}

/**
 * `record` for a call no provider received (spec 2.7: `provider` is the one that did): no
 * provider, and the one it was routed to as a detail.
 */
function unsentRecord(record: CallRecord): CallRecord {
  return Object.assign({}, record, {
    base: Object.assign({}, record.base, { provider: null }),
    details: Object.assign({ routed_provider: record.base.provider }, record.details),
  });
}

function piiValues(texts: GovernResult['scan']['texts']): { type: string; value: string }[] {
  const out: { type: string; value: string }[] = [];
  for (const t of texts)
    for (const f of t.findings)
      if (f.category === 'pii') out.push({ type: f.type, value: t.text.slice(f.start, f.end) });
  return out;
}

/** A call's personal audit fields (members set one by one: spreads are slow here, docs/ops.md). */
function callPersonal(endUser: string | null, scan: GovernResult['scan']): Record<string, unknown> {
  const personal: Record<string, unknown> = {};
  if (endUser !== null) personal.end_user = endUser;
  if (scan.counts.pii > 0) personal.detected_values = piiValues(scan.texts);
  return personal;
}

export class GatewayService {
  constructor(private readonly deps: GatewayDeps) {}

  readonly chatCompletions = async (ctx: Ctx): Promise<void> => {
    const agent = actingAgent(ctx, this.deps.snapshot);
    const request = validateChatRequest(ctx.jsonBody());
    let rawBody: Buffer | undefined = ctx.req.body;
    if (takesDefaultTemperature(request)) {
      // A client's `"temperature": null` would follow the spliced member and win (the last of
      // duplicate keys does): that rare request is re-serialised instead of spliced.
      rawBody = request.temperature === null ? undefined : withDefaultTemperature(ctx.req.body);
      request.temperature = LIMITS.defaultTemperature;
    }
    await this.runChat(ctx, openaiFrontEnd, agent, request, rawBody, request.user ?? null, undefined);
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
      anthropicRequest,
    );
  };

  private async runChat(
    ctx: Ctx,
    fe: FrontEnd,
    agent: ActingAgent,
    request: ChatCompletionRequest,
    rawBody: Buffer | undefined,
    endUser: string | null,
    anthropicRequest: AnthropicMessagesRequest | undefined,
  ): Promise<void> {
    const ids = callIds(ctx);
    // The beta features asked for change the answer as much as the body does.
    const idem = idempotencyKey(ctx, fe.endpoint, 'anthropic-beta');
    if (idem !== undefined) {
      const stored = this.beginIdempotent(agent, idem);
      if (stored) {
        this.replay(ctx, agent, stored, idem.key);
        return;
      }
    }
    const keep = idem === undefined ? undefined : this.keeper(agent, idem);
    try {
      let provider = this.deps.snapshot.providers(agent.orgId).resolve(request.model);
      const t0 = performance.now();
      // An Anthropic client's call to an Anthropic upstream goes as the caller wrote it
      // (anthropic-forward.ts): its own texts are scanned and redacted, not the canonical copy's.
      const forwarded =
        anthropicRequest && provider.messagesApi ? forwardedAnthropicRequest(anthropicRequest) : undefined;
      const forward = forwarded ? { request: forwarded, call: messagesCall(ctx) } : undefined;
      const texts = forwarded ? anthropicRequestTexts(forwarded) : requestTexts(request);
      const payload = {
        // Rules read the declared tools by name, custom (freeform) tools as function tools.
        tools: request.tools?.map((t) => (t.type === 'custom' ? t.custom.name : t.function.name)) ?? [],
        stream: request.stream === true,
      };
      const deciding = this.deps.governor.decideOrDefer(
        agent,
        {
          type: 'LLM_CALL',
          model: request.model,
          provider: provider.name,
          texts,
          flagsHeader: ctx.header('x-service-flags'),
          payload,
          // An approval is for this call: the same model, provider and request, beta features
          // included (hashed only when an approval is looked up).
          context: () => ({
            model: request.model,
            provider: provider.name,
            payload,
            content: requestDigest(forwarded ?? request),
            beta: forward?.call.beta ?? null,
          }),
          pipelineId: ids.pipelineId,
          cancel: ctx.res,
        },
        // Steps after the policy, before an approval is spent on the call (see decide).
        (result) => {
          const checked = this.checkBudget(result, request, texts);
          if (checked.decision.outcome !== 'allow' || checked.decision.redact.length === 0) return checked;
          const redaction = forwarded
            ? redactAnthropicRequest(forwarded, checked.scan, checked.decision.redact)
            : redactRequest(request, checked.scan, checked.decision.redact);
          // The caller's bytes still hold what was redacted: the request is serialised afresh.
          if (redaction.changed > 0) rawBody = undefined;
          return redaction.stuck ? refuseUnredactable(checked, redaction.stuck) : checked;
        },
      );
      // A large call's content is scanned off the event loop (ScanPool); what may have changed
      // while it was is read again.
      let gov: GovernResult;
      if (deciding instanceof Promise) {
        try {
          gov = await deciding;
        } catch (err) {
          const details = Object.assign(callerDetails(agent), {
            endpoint: fe.endpoint,
            format: fe.format,
            stream: request.stream === true,
            tools: payload.tools.length === 0 ? payload.tools : payload.tools.map(recordable),
            idempotency_key: idem === undefined ? null : recordable(idem.key),
          });
          const base = undecidedBase('LLM_CALL', agent, ids, request.model, endUser ?? undefined);
          await this.notDecided(ctx, err, base, provider.name, details);
          return;
        }
        provider = this.stillValid(ctx, agent, provider, request.model);
      } else gov = deciding;
      this.deps.metrics.phase('govern', (performance.now() - t0) / 1000);
      const decision = gov.decision;
      const record: CallRecord = {
        base: {
          org_id: agent.orgId,
          agent_id: agent.agentId,
          session_id: ids.sessionId,
          task_id: ids.taskId,
          pipeline_id: ids.pipelineId,
          behavior_type: 'LLM_CALL',
          provider: provider.name,
          // A model id can hold a secret (it passes `gpt-*`): recorded as event details are.
          model: recordable(request.model),
          rule_id: decision.rule_id,
          detections:
            gov.scan.counts.pii +
              gov.scan.counts.secret +
              gov.scan.counts.injection +
              gov.scan.counts.unicode >
            0
              ? { input: detectionRecord(gov.scan) }
              : null,
          personal: callPersonal(endUser, gov.scan),
        },
        details: {
          endpoint: fe.endpoint,
          format: fe.format,
          stream: request.stream === true,
          // What the policy read of the call besides its texts (its payload), for replay.
          tools: payload.tools.length === 0 ? payload.tools : payload.tools.map(recordable),
          credential_id: agent.principal.credential_id,
          acting_admin: agent.actingAdmin,
          idempotency_key: idem === undefined ? null : recordable(idem.key),
          decision: decisionRecord(gov),
        },
        gov,
        service: envelope(this.deps.baseUrl, ids.sessionId, ids.taskId, ids.pipelineId, false),
        ids,
      };
      if (decision.outcome !== 'allow') {
        await this.answerBlocked(ctx, fe, agent, request, record);
        return;
      }
      const guard = outputGuard(gov.policy, gov.flags, provider.keyScrub);
      if (request.stream === true) {
        if (forward && provider.messagesApi)
          await this.stream(
            ctx,
            provider,
            request.model,
            record,
            anthropicWire(provider.messagesApi.stream(forward.request, forward.call), guard),
            keep,
            guard.keys,
          );
        else
          await this.stream(
            ctx,
            provider,
            request.model,
            record,
            canonicalWire(fe, provider, request, ctx.res, guard),
            keep,
            guard.keys,
          );
        return;
      }
      await this.complete(ctx, fe, provider, request, rawBody, forward, record, guard, keep);
    } finally {
      if (idem !== undefined) this.deps.idempotency.release(agent.orgId, agent.agentUuid, idem.key);
    }
  }

  /** The stored answer to replay, or undefined once the key is reserved for this call. */
  private beginIdempotent(agent: ActingAgent, idem: IdemKey): StoredResponse | undefined {
    return this.deps.idempotency.begin(agent.orgId, agent.agentUuid, idem.key, idem.hash, idem.legacyHash);
  }

  /**
   * What keeps an allowed answer for its Idempotency-Key's replays, awaited before the answer is
   * sent (IdempotencyStore.keep).
   */
  private keeper(agent: ActingAgent, idem: IdemKey): Keep {
    return (response) =>
      this.deps.idempotency.keep(agent.orgId, agent.agentUuid, idem.key, idem.hash, response);
  }

  /**
   * The budget (policy `budget.max_usd_per_call`, tightened by the `budget=` flag) caps what one
   * call may cost: prompt estimated at four characters a token, the completion at its
   * max_tokens. A model without a known price cannot be checked, so it is refused (fail closed).
   */
  private checkBudget(
    gov: GovernResult,
    request: ChatCompletionRequest,
    texts: readonly { text: string }[],
  ): GovernResult {
    const budget = gov.flags.budget_usd;
    const enforcing = gov.flags.mode === 'enforce' || gov.flags.mode === 'lockdown';
    if (budget === null || !enforcing || gov.decision.outcome !== 'allow') return gov;
    let chars = 0;
    for (const t of texts) chars += t.text.length;
    // With both limits set, the larger is what a provider may honour (Anthropic gets
    // max_completion_tokens first): price that one.
    const limit = Math.max(request.max_tokens ?? 0, request.max_completion_tokens ?? 0);
    const estimate = estimateCost(request.model, chars, limit > 0 ? limit : undefined, request.n ?? 1);
    if (estimate !== undefined && estimate <= budget) return gov;
    const reason =
      estimate === undefined
        ? `no price is known for ${recordable(request.model)}, so the budget of $${budget} per call cannot be checked`
        : `the call may cost up to $${estimate.toFixed(6)}, over the budget of $${budget} per call`;
    return blockedBy(gov, 'budget', reason);
  }

  private async appendCall(
    record: CallRecord,
    event: Partial<AuditInput>,
    inputPiiAction: string,
    outputPii?: { types: string[]; action: string },
  ): Promise<void> {
    const events: Promise<unknown>[] = [
      // Object.assign, not spreads: on Node 20 `{ ...a, k: v, ...b }` takes V8's slow path,
      // ~9 µs here against ~0.7 (docs/ops.md, "Object spreads on the request path").
      this.deps.audit.append(
        Object.assign({ event_type: 'llm_call' }, record.base, event, {
          details: Object.assign({}, record.details, event.details),
        }),
      ),
    ];
    if (record.gov.scan.summary.pii.length > 0)
      events.push(
        this.deps.audit.append(
          piiDetectedEvent(record.base, record.details, 'input', record.gov.scan.summary.pii, inputPiiAction),
        ),
      );
    if (outputPii && outputPii.types.length > 0)
      events.push(
        this.deps.audit.append(
          piiDetectedEvent(record.base, record.details, 'output', outputPii.types, outputPii.action),
        ),
      );
    await Promise.all(events);
  }

  /**
   * A decision that stops a model call: the approval it asks for (if it does) and the envelope
   * that says so, the same for chat, messages and embeddings.
   */
  private async stopped(
    ctx: Ctx,
    agent: ActingAgent,
    gov: GovernResult,
    pipelineId: string,
    behaviorType: 'LLM_CALL' | 'EMBEDDING_CALL',
    what: string,
    base: ServiceEnvelope,
  ): Promise<{ service: ServiceEnvelope; approval: ApprovalRef | undefined; failure?: ServiceError }> {
    const decision = gov.decision;
    ctx.reason = decision.outcome === 'needs_approval' ? 'needs_approval' : 'policy_block';
    let approval: ApprovalRef | undefined;
    if (decision.outcome === 'needs_approval') {
      // A sidecar asks its control plane; when that cannot be heard the call is refused (503),
      // and the caller audits it as such before it answers.
      const asked = this.deps.requestApproval({
        org_id: agent.orgId,
        agent_id: agent.agentId,
        agent_uuid: agent.agentUuid,
        fingerprint: gov.fingerprint,
        tier: decision.tier ?? 'standard',
        summary: `${what}: ${decision.reason}`,
        matched_rule: decision.rule_id,
        pipeline_id: pipelineId,
        behavior_type: behaviorType,
        tool: null,
        credential_id: agent.principal.credential_id,
      });
      try {
        approval = await asked;
      } catch (err) {
        if (!isServiceError(err)) throw err;
        return { service: base, approval: undefined, failure: err };
      }
    }
    const service: ServiceEnvelope = {
      ...base,
      blocked: true,
      outcome: decision.outcome,
      reason: decision.reason,
      rule_id: decision.rule_id,
    };
    if (approval) service.approval = approval;
    return { service, approval };
  }

  private async answerBlocked(
    ctx: Ctx,
    fe: FrontEnd,
    agent: ActingAgent,
    request: ChatCompletionRequest,
    record: CallRecord,
  ): Promise<void> {
    const decision = record.gov.decision;
    const { service, approval, failure } = await this.stopped(
      ctx,
      agent,
      record.gov,
      record.ids.pipelineId,
      'LLM_CALL',
      `LLM call to ${record.base.model}`,
      record.service,
    );
    if (failure) {
      await this.appendCall(
        unsentRecord(record),
        {
          outcome: 'error',
          reason: failure.message,
          details: {
            status: failure.status,
            error_code: failure.code,
            client_disconnected: false,
            blocked: true,
            approval_id: null,
          },
        },
        'blocked',
      );
      throw failure;
    }
    const text = blockMessage(decision, approval);
    // No provider received anything.
    await this.appendCall(
      unsentRecord(record),
      {
        outcome: decision.outcome,
        reason: decision.reason,
        details: { status: 200, blocked: true, approval_id: approval?.request_id ?? null },
      },
      'blocked',
    );
    if (request.stream === true) {
      const renderer = fe.streamRenderer(request.model, false);
      ctx.startStream(200, 'text/event-stream; charset=utf-8');
      let out = '';
      for (const c of blockedChunks(request.model, text)) out += renderer.chunk(c);
      ctx.endStream(out + renderer.finish(service));
      return;
    }
    ctx.json(200, fe.renderCompletion(blockedCompletion(request.model, text), service, request.model));
  }

  private async complete(
    ctx: Ctx,
    fe: FrontEnd,
    provider: Provider,
    request: ChatCompletionRequest,
    rawBody: Buffer | undefined,
    forward: { request: AnthropicMessagesRequest; call: MessagesCall } | undefined,
    record: CallRecord,
    guard: OutputGuard,
    keep: Keep | undefined,
  ): Promise<void> {
    const t0 = performance.now();
    let completion: ChatCompletion;
    // The provider's own answer, for a forwarded Anthropic call (given back as it came, guarded).
    let message: AnthropicMessage | undefined;
    try {
      if (forward && provider.messagesApi) {
        message = await provider.messagesApi.create(forward.request, forward.call);
        completion = anthropicResponseToOpenai(message, Math.floor(Date.now() / 1000));
      } else {
        completion = await provider.chat({
          request,
          rawBody: fe.format === 'openai' && provider.name === 'openai' ? rawBody : undefined,
          cancel: ctx.res,
        });
      }
    } catch (err) {
      const upstreamS = (performance.now() - t0) / 1000;
      const e = asServiceError(err);
      // The client went away (and the call was aborted for it): not a provider failure.
      const early = earlyEnd(ctx.res);
      const unsent = e instanceof UnsentError;
      if (!unsent) this.deps.metrics.upstreamCall(provider.name, early ? 'cancelled' : 'error', upstreamS);
      await this.appendCall(
        unsent ? unsentRecord(record) : record,
        {
          outcome: 'error',
          reason: early ? early.reason : e.message,
          details: {
            status: early ? early.status : e.status,
            error_code: early ? early.code : e.code,
            upstream_ms: upstreamS * 1000,
            client_disconnected: early?.client ?? false,
          },
        },
        'allowed',
      );
      throw e;
    }
    const upstreamS = (performance.now() - t0) / 1000;
    this.deps.metrics.upstreamCall(provider.name, 'ok', upstreamS);
    const t1 = performance.now();
    const choices = completion.choices;
    // Spec 2.2: the answer has a usage; an upstream that sent none gets an estimate, so marked.
    const usageEstimated = completion.usage === undefined || completion.usage === null;
    if (usageEstimated) completion.usage = estimatedUsage(promptChars(record.gov.scan.texts), choices);
    let service = record.service;
    let outcome = 'allow';
    let reason: string | null = null;
    const outputTypes = new Set<string>();
    let outputAction = 'allowed';
    let body: string;
    let audited = false;
    try {
      if (guard.active) {
        // A large answer is scanned in the scan worker: the texts the guard reads are gathered by
        // a pass that finds nothing (it changes nothing), scanned off the event loop, and the
        // guard's pass below is answered from the results (ScanPool).
        let g = guard;
        const scans = this.deps.scans;
        if (scans !== undefined) {
          const texts: string[] = [];
          this.guardAnswer(recordingGuard(guard, texts), message, choices, new Set());
          if (isLargeText(texts)) {
            const results = await scans.detectAll(texts, guard.detectOptions);
            g = prescannedGuard(guard, texts, results);
          }
        }
        const guarded = this.guardAnswer(g, message, choices, outputTypes);
        const blocked = guarded.blocked;
        if (message) {
          if (guarded.message) message = guarded.message;
        } else if (!blocked) completion.choices = choices.map(guardedChoice);
        outputAction = blocked ? 'blocked' : outputTypes.size > 0 ? 'redacted' : 'allowed';
        if (blocked) {
          outcome = 'block';
          reason = `model output contained ${blocked.category} (${blocked.type})`;
          const text = blockMessage({
            outcome: 'block',
            reason,
            rule_id: `detector:${blocked.category === 'secret' ? 'secrets' : blocked.category}`,
          });
          completion = { ...blockedCompletion(request.model, text), usage: completion.usage ?? null };
          message = undefined;
          service = { ...service, blocked: true, outcome: 'block', reason, stage: 'output' };
          ctx.reason = 'output_block';
        }
      }
      // Rendered before the audit append, so a failure here is audited as the error it is.
      if (message) {
        message.service = service;
        body = JSON.stringify(message);
      } else body = JSON.stringify(fe.renderCompletion(completion, service, request.model));
      // The guard redacted the key in the texts it reads; anywhere else in the answer (an id, a
      // member govgate passes on) it is replaced here.
      const unkeyed = provider.keyScrub?.scrub(body) ?? body;
      if (unkeyed !== body || guard.keys?.found) {
        body = unkeyed;
        outputTypes.add(PROVIDER_KEY_DETECTION);
      }
      audited = true;
      await this.appendCall(
        record,
        {
          outcome,
          reason,
          usage: usageOf(completion.usage),
          cost: callCost(request.model, completion.usage),
          details: {
            status: 200,
            finish_reason: choices[0]?.finish_reason ?? null,
            tool_calls: toolCallNames(choices),
            upstream_ms: upstreamS * 1000,
            output_detections: [...outputTypes],
            usage_estimated: usageEstimated ? true : undefined,
          },
        },
        record.gov.decision.redact.includes('pii') ? 'redacted' : 'allowed',
        { types: [...outputTypes].filter((t) => !t.startsWith('secret:')), action: outputAction },
      );
    } catch (err) {
      // The provider answered (and was paid for): whatever failed after that, the call is audited.
      if (!audited) {
        const e = isServiceError(err) ? err : undefined;
        await this.appendCall(
          record,
          {
            outcome: 'error',
            reason: e?.message ?? 'the answer could not be processed',
            details: {
              status: e?.status ?? 500,
              error_code: e?.code ?? 'internal_error',
              upstream_ms: upstreamS * 1000,
            },
          },
          'allowed',
        );
      }
      throw err;
    }
    this.deps.metrics.phase('audit', (performance.now() - t1) / 1000);
    if (keep !== undefined && outcome === 'allow')
      await keep({ status: 200, content_type: 'application/json', body, pipeline_id: record.ids.pipelineId });
    ctx.sendRaw(200, 'application/json', body);
  }

  /**
   * A call that was never decided (auditUndecided: refused by the scan queue, an approval the
   * control plane could not be asked about, or dropped from the scan queue because its client
   * went away): its event, with no provider (the one it was routed to is a detail).
   */
  private notDecided(
    ctx: Ctx,
    err: unknown,
    base: AuditInput,
    routedProvider: string,
    details: Record<string, unknown>,
  ): Promise<void> {
    details.routed_provider = routedProvider;
    return auditUndecided(
      this.deps.audit,
      ctx.res,
      err,
      Object.assign({}, base, { provider: null, details }),
    );
  }

  /**
   * After a wait for the scan worker: the caller's credential still acts for the same agent (a
   * key revoked or disabled meanwhile is refused as it would have been on arrival), and the
   * model's provider is the one configured now (a provider re-pointed or given a new key
   * meanwhile is called as it is now). A model now routed to another provider was decided for
   * the old one: the call is refused (503) rather than sent where its decision did not look.
   */
  private stillValid(ctx: Ctx, agent: ActingAgent, provider: Provider, model: string): Provider {
    const now = actingAgent(ctx, this.deps.snapshot);
    if (now.agentUuid !== agent.agentUuid || now.orgId !== agent.orgId)
      throw new ServiceError('forbidden', 'the credential no longer acts for this agent');
    const current = this.deps.snapshot.providers(agent.orgId).resolve(model);
    if (current.name !== provider.name) {
      throw new ServiceError(
        'unavailable',
        `model ${recordable(model)} was routed to another provider while this call was being scanned; retry the call`,
      );
    }
    return current;
  }

  /**
   * Guards a whole answer: the Anthropic message (rebuilt, or blocked), or every choice of the
   * completion (`n` > 1, not just the first: one blocked choice blocks the answer), in place.
   */
  private guardAnswer(
    guard: OutputGuard,
    message: AnthropicMessage | undefined,
    choices: ChatCompletion['choices'],
    types: Set<string>,
  ): { blocked: Finding | undefined; message: AnthropicMessage | undefined } {
    if (message) {
      const guarded = guardAnthropicMessage(guard, message, types);
      return 'blocked' in guarded
        ? { blocked: guarded.blocked.finding, message: undefined }
        : { blocked: undefined, message: guarded.message };
    }
    for (const choice of choices) {
      const m = choice.message;
      const blocked = m ? this.guardMessage(guard, m, types) : undefined;
      if (blocked) return { blocked, message: undefined };
    }
    return { blocked: undefined, message: undefined };
  }

  /**
   * Scans a whole answer in place (content, refusal, tool arguments and custom tool input);
   * returns the blocking finding, if any.
   */
  private guardMessage(
    guard: OutputGuard,
    message: NonNullable<ChatCompletion['choices'][number]['message']>,
    types: Set<string>,
  ): Finding | undefined {
    const note = (findings: readonly Finding[]): void => {
      for (const f of findings) if (f.category === 'pii') types.add(f.type);
    };
    if (typeof message.content === 'string' && message.content.length > 0) {
      const r = guardText(guard, message.content);
      note(r.findings);
      if (r.kind === 'block') return r.finding;
      message.content = r.text;
    }
    // A refusal is the model's text too (and /v1/messages answers with it).
    if (typeof message.refusal === 'string' && message.refusal.length > 0) {
      const r = guardText(guard, message.refusal);
      note(r.findings);
      if (r.kind === 'block') return r.finding;
      message.refusal = r.text;
    }
    for (const tc of message.tool_calls ?? []) {
      if (tc.type === 'custom') {
        // A custom tool's input is free text: scanned and redacted as the text it is.
        const r = guardText(guard, tc.custom.input);
        note(r.findings);
        if (r.kind === 'block') return r.finding;
        tc.custom.input = r.text;
        continue;
      }
      // Scanned as the tool will read them: JSON escapes (\u0041KIA…) decoded.
      const r = guardText(guard, decodedJson(tc.function.arguments));
      note(r.findings);
      if (r.kind === 'block') return r.finding;
      tc.function.arguments = r.text;
    }
    // The legacy single call (a request with `functions`), read as a tool call is.
    const legacy = (message as AnswerMessage).function_call;
    if (legacy) {
      const r = guardText(guard, decodedJson(legacy.arguments));
      note(r.findings);
      if (r.kind === 'block') return r.finding;
      legacy.arguments = r.text;
    }
    return undefined;
  }

  /**
   * Streams the answer. Headers wait for the first batch, so an early failure is a plain error.
   * With `keep` (an Idempotency-Key was sent) the rendered stream is also collected and kept for
   * replay before its end is sent; without it nothing of the answer is held beyond the event being
   * written.
   */
  private async stream<E>(
    ctx: Ctx,
    provider: Provider,
    model: string,
    record: CallRecord,
    wire: StreamWire<E>,
    keep: Keep | undefined,
    keys: KeyWatch | undefined,
  ): Promise<void> {
    const t0 = performance.now();
    const iterator = wire.events;
    const metrics = this.deps.metrics;
    const governor = wire.governor;
    let transcript = '';
    let first: IteratorResult<readonly E[]>;
    try {
      first = await iterator.next();
    } catch (err) {
      const e = asServiceError(err);
      const early = earlyEnd(ctx.res);
      const unsent = e instanceof UnsentError;
      if (!unsent)
        metrics.upstreamCall(provider.name, early ? 'cancelled' : 'error', (performance.now() - t0) / 1000);
      await this.appendCall(
        unsent ? unsentRecord(record) : record,
        {
          outcome: 'error',
          reason: early ? early.reason : e.message,
          details: {
            status: early ? early.status : e.status,
            error_code: early ? early.code : e.code,
            client_disconnected: early?.client ?? false,
            delivered: { chars: 0, complete: false },
          },
        },
        'allowed',
      );
      throw e;
    }
    ctx.startStream(200, 'text/event-stream; charset=utf-8', { connection: 'keep-alive' });
    metrics.openStreams.inc();
    const res = ctx.res;
    const stallMs = this.deps.clientStallMs;
    let failure: ServiceError | undefined;
    // The client took nothing for `stallMs` while behind: its connection is closed.
    let stalled = false;
    const scrub = provider.keyScrub;
    // The answer held the provider's own key (KeyScrub): replaced, and recorded.
    let keyEchoed = false;
    const emit = (events: readonly E[]): boolean => {
      for (const e of events) {
        let text = wire.render(e);
        if (text === '') continue;
        if (scrub !== undefined) {
          const unkeyed = scrub.scrub(text);
          if (unkeyed !== text) {
            text = unkeyed;
            keyEchoed = true;
          }
        }
        if (keep !== undefined) transcript += text;
        if (!res.write(text)) return false;
        wire.written(e);
      }
      return true;
    };
    const scans = this.deps.scans;
    try {
      let step = first;
      reading: while (!step.done) {
        for (const e of step.value) {
          wire.observe(e);
          if (governor === undefined) {
            if (!emit([e])) break reading;
            continue;
          }
          // An event with a large text is scanned off the event loop first (ScanPool).
          const prescan = scans === undefined ? undefined : governor.prescan(e, scans);
          if (prescan !== undefined) {
            await prescan;
            if (res.aborted) break reading;
          }
          if (!emit(governor.push(e))) break reading;
          if (governor.blocked) break reading;
        }
        // Back-pressure: the next read waits for the client (once per network read, not per chunk).
        if (res.backlog > STREAM_BACKLOG_BYTES && !(await res.drain(stallMs))) {
          stalled = !res.aborted;
          break;
        }
        step = await iterator.next();
      }
      if (governor && !governor.blocked && !res.aborted && !stalled) {
        const prescan = scans === undefined ? undefined : governor.prescan(undefined, scans);
        if (prescan !== undefined) await prescan;
        emit(governor.end());
      }
    } catch (err) {
      failure = asServiceError(err);
    } finally {
      metrics.openStreams.dec();
      if (governor?.blocked || stalled) void iterator.return?.();
    }
    const upstreamS = (performance.now() - t0) / 1000;
    // A stream that ends as it should, to a client still behind (its connection holds what it has
    // not taken): waited for, at most the stall limit, before the audit event, which then says the
    // answer was delivered only if the client took all of it. The end follows the event at once.
    if (failure === undefined && !governor?.blocked && !res.aborted && !stalled && res.backlog > 0)
      stalled = !(await res.drain(stallMs)) && !res.aborted;
    const aborted = res.aborted;
    // A client that went away before the answer was delivered ended the call (the upstream read
    // was aborted for it): an error of the client's, not the provider's.
    const failed = failure !== undefined && !aborted && !stalled;
    metrics.upstreamCall(
      provider.name,
      failed ? 'error' : aborted || stalled ? 'cancelled' : 'ok',
      upstreamS,
    );
    const blocked: StreamBlock | undefined = governor?.blocked;
    const reason = blocked
      ? `model output contained ${blocked.finding.category} (${blocked.finding.type})`
      : null;
    // The provider's usage, or (the stream ended before it) an estimate of what it will bill.
    const stated = wire.usage();
    const usage = stated ?? wire.estimate(promptChars(record.gov.scan.texts));
    const sent = wire.delivered();
    const outputPii = governor && governor.pii.size > 0 ? [...governor.pii] : [];
    if (keys?.found) keyEchoed = true;
    let tail = failure || blocked || aborted || stalled ? '' : wire.finish(record.service);
    const unkeyedTail = scrub?.scrub(tail) ?? tail;
    if (unkeyedTail !== tail) {
      tail = unkeyedTail;
      keyEchoed = true;
    }
    const early = earlyEnd(res);
    const details: Record<string, unknown> = {
      status: early ? early.status : stalled ? 408 : 200,
      finish_reason: wire.finishReason(),
      tool_calls: wire.toolCalls,
      upstream_ms: upstreamS * 1000,
      client_disconnected: early?.client ?? false,
      error_code: failed ? (failure?.code ?? null) : (early?.code ?? null),
      blocked_stage: blocked ? `output_${blocked.where}` : null,
      output_detections: keyEchoed ? [...outputPii, PROVIDER_KEY_DETECTION] : outputPii,
      // Complete (docs/audit.md, "Streamed model calls"): a stream that ended as it should, its
      // client having taken everything before its end, which follows this event; or the finish of
      // every choice written and taken when the stream stopped.
      delivered: {
        chars: sent.chars,
        complete: (sent.ended && res.backlog === 0) || !(failed || blocked || aborted || stalled),
      },
    };
    if (stalled) details.client_stalled = true;
    if (!stated) details.usage_estimated = true;
    const tAudit = performance.now();
    await this.appendCall(
      record,
      {
        outcome: failed ? 'error' : blocked ? 'block' : aborted || stalled ? 'error' : 'allow',
        reason: failed
          ? (failure?.message ?? null)
          : (reason ?? (early ? early.reason : stalled ? 'client stopped reading the answer' : null)),
        usage: usageOf(usage),
        cost: callCost(model, usage),
        details,
      },
      record.gov.decision.redact.includes('pii') ? 'redacted' : 'allowed',
      // As for a whole answer: the PII the guard found in the output, redacted or blocked.
      blocked?.finding.category === 'pii'
        ? { types: [blocked.finding.type], action: 'blocked' }
        : outputPii.length > 0
          ? { types: outputPii, action: blocked ? 'blocked' : 'redacted' }
          : undefined,
    );
    metrics.phase('audit', (performance.now() - tAudit) / 1000);
    if (aborted) return undefined;
    if (stalled) {
      ctx.clientStalled();
      return undefined;
    }
    if (failure) {
      ctx.reason = failure.code;
      ctx.error = failure.message;
      ctx.endStream(wire.error(failure, ctx.requestId));
      return undefined;
    }
    if (blocked && reason) {
      ctx.reason = 'output_block';
      const text = blockMessage({
        outcome: 'block',
        reason,
        rule_id: `detector:${blocked.finding.category === 'secret' ? 'secrets' : blocked.finding.category}`,
      });
      ctx.endStream(
        wire.blocked(text, { ...record.service, blocked: true, outcome: 'block', reason, stage: 'output' }),
      );
      return undefined;
    }
    if (keep !== undefined)
      await keep({
        status: 200,
        content_type: 'text/event-stream; charset=utf-8',
        body: transcript + tail,
        pipeline_id: record.ids.pipelineId,
      });
    ctx.endStream(tail);
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
        details: {
          idempotency_key: recordable(key),
          endpoint: ctx.route,
          credential_id: agent.principal.credential_id,
          acting_admin: agent.actingAdmin,
        },
      })
      .then(() =>
        ctx.sendRaw(stored.status, stored.content_type, stored.body, { 'idempotent-replayed': 'true' }),
      )
      .catch((err: unknown) => ctx.fail(err));
  }

  readonly embeddings = async (ctx: Ctx): Promise<void> => {
    const agent = actingAgent(ctx, this.deps.snapshot);
    const request = validateEmbeddingRequest(ctx.jsonBody());
    const ids = callIds(ctx); // checked before a replay too, as on chat
    const idem = idempotencyKey(ctx, '/v1/embeddings');
    if (idem === undefined) {
      await this.embed(ctx, agent, request, ids, undefined);
      return;
    }
    const stored = this.beginIdempotent(agent, idem);
    if (stored) {
      this.replay(ctx, agent, stored, idem.key);
      return;
    }
    try {
      await this.embed(ctx, agent, request, ids, idem.key, this.keeper(agent, idem));
    } finally {
      this.deps.idempotency.release(agent.orgId, agent.agentUuid, idem.key);
    }
  };

  /** One embeddings call; its answer, when it is one an Idempotency-Key replays (allowed, 200). */
  private async embed(
    ctx: Ctx,
    agent: ActingAgent,
    request: EmbeddingRequest,
    ids: CallIds,
    idemKey: string | undefined,
    keep?: Keep,
  ): Promise<void> {
    let provider = this.deps.snapshot.providers(agent.orgId).resolve(request.model);
    const inputs =
      typeof request.input === 'string'
        ? [request.input]
        : (request.input as unknown[]).filter((x): x is string => typeof x === 'string');
    const endUser = request.user;
    const deciding = this.deps.governor.decideOrDefer(
      agent,
      {
        type: 'EMBEDDING_CALL',
        model: request.model,
        provider: provider.name,
        texts: embeddingTexts(request, inputs),
        flagsHeader: ctx.header('x-service-flags'),
        // An approval is for this call: the same model, provider and request (inputs, user,
        // dimensions, ...), hashed only when an approval is looked up.
        context: () => ({ model: request.model, provider: provider.name, content: requestDigest(request) }),
        pipelineId: ids.pipelineId,
        cancel: ctx.res,
      },
      // Steps after the policy, before an approval is spent on the call (see decide).
      (result) => {
        // Token-id inputs (number arrays) were not scanned.
        const checked =
          typeof request.input !== 'string' && inputs.length < (request.input as unknown[]).length
            ? refuseTokenInputs(result)
            : result;
        if (checked.decision.outcome !== 'allow' || checked.decision.redact.length === 0) return checked;
        const held = { messages: inputs.map((content) => ({ role: 'user', content })), user: request.user };
        const redaction = redactRequest(held, checked.scan, checked.decision.redact);
        if (redaction.stuck) return refuseUnredactable(checked, redaction.stuck);
        if (redaction.changed > 0) {
          const redacted = held.messages.map((m) => m.content);
          request.input = typeof request.input === 'string' ? (redacted[0] ?? '') : redacted;
          if (held.user !== undefined) request.user = held.user as string;
        }
        return checked;
      },
    );
    // A large call's content is scanned off the event loop (ScanPool); what may have changed
    // while it was is read again.
    let gov: GovernResult;
    if (deciding instanceof Promise) {
      try {
        gov = await deciding;
      } catch (err) {
        const base = undecidedBase(
          'EMBEDDING_CALL',
          agent,
          ids,
          request.model,
          typeof endUser === 'string' ? endUser : undefined,
        );
        const details = callerDetails(agent);
        if (idemKey !== undefined) details.idempotency_key = recordable(idemKey);
        await this.notDecided(ctx, err, base, provider.name, details);
        return;
      }
      provider = this.stillValid(ctx, agent, provider, request.model);
    } else gov = deciding;
    const decision = gov.decision;
    const base: AuditInput = {
      org_id: agent.orgId,
      event_type: 'embedding_call',
      agent_id: agent.agentId,
      session_id: ids.sessionId,
      task_id: ids.taskId,
      pipeline_id: ids.pipelineId,
      behavior_type: 'EMBEDDING_CALL',
      provider: provider.name,
      model: recordable(request.model),
      rule_id: decision.rule_id,
      detections:
        gov.scan.summary.pii.length + gov.scan.summary.secrets.length > 0
          ? { input: detectionRecord(gov.scan) }
          : null,
      personal: typeof endUser === 'string' ? { end_user: endUser } : {},
    };
    const service = envelope(this.deps.baseUrl, ids.sessionId, ids.taskId, ids.pipelineId, false);
    // Who made the call (the one event this call writes starts its details from it).
    const caller = callerDetails(agent);
    if (idemKey !== undefined) caller.idempotency_key = recordable(idemKey);
    // The call's event, and the spec's pii_detected event when the inputs held PII (the action
    // taken on it: blocked with the call, redacted, or let through).
    const pii = gov.scan.summary.pii;
    const piiAction =
      decision.outcome !== 'allow' ? 'blocked' : decision.redact.includes('pii') ? 'redacted' : 'allowed';
    const record = (event: AuditInput): Promise<unknown> =>
      pii.length === 0
        ? this.deps.audit.append(event)
        : Promise.all([
            this.deps.audit.append(event),
            this.deps.audit.append(piiDetectedEvent(event, caller, 'input', pii, piiAction)),
          ]);
    if (decision.outcome !== 'allow') {
      // An embedding has no assistant message: the blocked answer is an empty list with the
      // envelope, which says it as a chat call's does (the bare reason, the rule, the approval).
      const {
        service: blocked,
        approval,
        failure,
      } = await this.stopped(
        ctx,
        agent,
        gov,
        ids.pipelineId,
        'EMBEDDING_CALL',
        `embedding call to ${base.model}`,
        service,
      );
      if (failure) {
        await record(
          Object.assign({}, base, {
            provider: null,
            outcome: 'error',
            reason: failure.message,
            details: Object.assign(caller, {
              routed_provider: provider.name,
              status: failure.status,
              error_code: failure.code,
              client_disconnected: false,
              blocked: true,
              decision: decisionRecord(gov),
              approval_id: null,
            }),
          }),
        );
        throw failure;
      }
      await record(
        Object.assign({}, base, {
          // No provider received anything (spec 2.7); the one it was routed to is a detail.
          provider: null,
          outcome: decision.outcome,
          reason: decision.reason,
          details: Object.assign(caller, {
            routed_provider: provider.name,
            status: 200,
            blocked: true,
            decision: decisionRecord(gov),
            approval_id: approval?.request_id ?? null,
          }),
        }),
      );
      ctx.json(200, {
        object: 'list',
        data: [],
        model: request.model,
        usage: { prompt_tokens: 0, total_tokens: 0 },
        service: blocked,
      });
      return;
    }
    const ac = new AbortController();
    ctx.res.onAbort(() => ac.abort());
    const t0 = performance.now();
    let result: Awaited<ReturnType<Provider['embed']>>;
    try {
      result = await provider.embed(request, ac.signal);
    } catch (err) {
      const e = asServiceError(err);
      // The client went away (and the call was aborted for it): not a provider failure (as chat).
      const early = earlyEnd(ctx.res);
      this.deps.metrics.upstreamCall(
        provider.name,
        early ? 'cancelled' : 'error',
        (performance.now() - t0) / 1000,
      );
      await record(
        Object.assign({}, base, {
          outcome: 'error',
          reason: early ? early.reason : e.message,
          details: Object.assign(caller, {
            status: early ? early.status : e.status,
            error_code: early ? early.code : e.code,
            client_disconnected: early?.client ?? false,
            decision: decisionRecord(gov),
          }),
        }),
      );
      throw e;
    }
    this.deps.metrics.upstreamCall(provider.name, 'ok', (performance.now() - t0) / 1000);
    // Object.assign, not a spread plus members: V8's slow path on Node 20 (docs/ops.md).
    await record(
      Object.assign({}, base, {
        outcome: 'allow',
        usage: {
          prompt_tokens: result.usage?.prompt_tokens ?? 0,
          completion_tokens: 0,
          total_tokens: result.usage?.total_tokens ?? 0,
        },
        details: Object.assign(caller, { status: 200, inputs: inputs.length, decision: decisionRecord(gov) }),
      }),
    );
    result.service = service;
    const body = JSON.stringify(result);
    if (keep !== undefined)
      await keep({ status: 200, content_type: 'application/json', body, pipeline_id: ids.pipelineId });
    ctx.sendRaw(200, 'application/json', body);
  }

  readonly models = async (ctx: Ctx): Promise<void> => {
    const agent = actingAgent(ctx, this.deps.snapshot);
    const ac = new AbortController();
    ctx.res.onAbort(() => ac.abort());
    // Logged as a provider failure (warn `request failed`, reason upstream_models_unavailable).
    const models = await this.deps.snapshot.providers(agent.orgId).listModels(ac.signal, (provider, err) => {
      ctx.reason = 'upstream_models_unavailable';
      const why = `${provider}: ${err instanceof Error ? err.message : String(err)}`;
      ctx.error = ctx.error ? `${ctx.error}; ${why}` : why;
    });
    ctx.json(200, {
      object: 'list',
      data: models.map((m) => ({ id: m.id, object: 'model', created: 0, owned_by: m.owned_by })),
    });
  };
}

/** The event of a model call never decided (GatewayService.notDecided), before its outcome. */
function undecidedBase(
  type: 'LLM_CALL' | 'EMBEDDING_CALL',
  agent: ActingAgent,
  ids: { sessionId: string; taskId: string; pipelineId: string },
  model: string,
  endUser: unknown,
): AuditInput {
  return {
    org_id: agent.orgId,
    event_type: type === 'LLM_CALL' ? 'llm_call' : 'embedding_call',
    agent_id: agent.agentId,
    session_id: ids.sessionId,
    task_id: ids.taskId,
    pipeline_id: ids.pipelineId,
    behavior_type: type,
    model: recordable(model),
    personal: endUser === undefined ? {} : { end_user: endUser },
  };
}
