import { createHash, randomBytes } from 'node:crypto';
import { Agent } from 'undici';
import type { AuditEvent } from '../audit/types.js';
import { VERSION } from '../version.js';
import { postWithRetries } from './deliver.js';
import { scrubText } from './formats.js';

/** Spans per OTLP request at most, and how long the first of a batch waits. */
const BATCH_MAX = 512;
const FLUSH_MS = 1_000;
/** Spans waiting at most; past it the oldest are dropped (counted). */
const QUEUE_MAX = 8_192;
const RETRIES = 3;
const TIMEOUT_MS = 10_000;
/**
 * The events that are governance decisions: a model call, an embedding, a governed action. Other
 * events also name a behavior type (the call's `pii_detected`, an approval's transitions, an
 * execution report, a tool run, an idempotent replay) but decide nothing: a span each would count
 * one decision several times, under verdicts such as `redacted` or `pending`.
 */
const DECISION_EVENTS: ReadonlySet<string> = new Set(['llm_call', 'embedding_call', 'govern.decision']);

export interface SpanStats {
  sent: number;
  failed_batches: number;
  dropped: number;
  last_error: string | null;
}

/**
 * OpenTelemetry spans of governance decisions (spec 6.2): with `OTEL_EXPORTER_OTLP_ENDPOINT` and
 * `SERVICE_OTLP_AUDIT_SPANS=1`, every committed event that is a governance decision
 * (`DECISION_EVENTS`: a model call, an embedding, a governed action) becomes one span, posted as
 * OTLP/HTTP JSON to `<endpoint>/v1/traces` with `OTEL_EXPORTER_OTLP_HEADERS`, in batches (512
 * spans, or 1 s after the first), retried 3 times. A deployment-wide sink (spec 6.2, layer 1): it
 * sees every org's decisions, and the collector is the operator's, so it is not SSRF-checked.
 *
 * A span carries the verdict, reason (scrubbed), rule id, behavior type, agent, org, model,
 * provider, tokens and cost; a block is a span error. Its trace id is derived from the pipeline id,
 * so the spans of one call share a trace; its time is the event's (a span of no duration: the
 * trail records when a decision was made, not how long it took).
 */
export class SpanExporter {
  readonly #url: string;
  readonly #headers: Record<string, string>;
  readonly #agent = new Agent();
  #queue: AuditEvent[] = [];
  #timer: NodeJS.Timeout | undefined;
  #sending = false;
  #closed = false;
  readonly stats: SpanStats = { sent: 0, failed_batches: 0, dropped: 0, last_error: null };

  constructor(endpoint: string, headers: Readonly<Record<string, string>>) {
    const base = endpoint.replace(/\/+$/, '');
    this.#url = base.endsWith('/v1/traces') ? base : `${base}/v1/traces`;
    this.#headers = { ...headers, 'content-type': 'application/json', 'user-agent': `govgate/${VERSION}` };
  }

  /** For `ChainLog.onCommitted`. */
  readonly onCommitted = (_org: string, events: readonly AuditEvent[]): void => {
    if (this.#closed) return;
    for (const e of events) {
      if (!DECISION_EVENTS.has(e.event_type)) continue;
      if (this.#queue.length >= QUEUE_MAX) {
        this.#queue.shift();
        this.stats.dropped++;
      }
      this.#queue.push(e);
    }
    if (this.#queue.length >= BATCH_MAX) void this.#flush();
    else if (this.#queue.length > 0 && this.#timer === undefined) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        void this.#flush();
      }, FLUSH_MS);
      this.#timer.unref();
    }
  };

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#queue = [];
    await this.#agent.destroy();
  }

  async #flush(): Promise<void> {
    if (this.#sending) return;
    this.#sending = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    try {
      while (this.#queue.length > 0 && !this.#closed) await this.#send(this.#queue.splice(0, BATCH_MAX));
    } finally {
      this.#sending = false;
    }
  }

  async #send(events: readonly AuditEvent[]): Promise<void> {
    const body = JSON.stringify(traces(events));
    const { error } = await postWithRetries(this.#agent, this.#url, {
      headers: this.#headers,
      body,
      tries: RETRIES + 1,
      backoffMs: 1_000,
      timeoutMs: TIMEOUT_MS,
      stopped: () => this.#closed,
    });
    if (error === null) {
      this.stats.sent += events.length;
      return;
    }
    this.stats.failed_batches++;
    this.stats.last_error = error;
  }
}

type Attr = { key: string; value: { stringValue: string } | { intValue: string } | { doubleValue: number } };

function attr(key: string, v: unknown): Attr[] {
  if (v === null || v === undefined || v === '') return [];
  if (typeof v === 'number')
    return [{ key, value: Number.isInteger(v) ? { intValue: String(v) } : { doubleValue: v } }];
  return [{ key, value: { stringValue: String(v) } }];
}

/** The OTLP/HTTP JSON request for a batch of decisions. */
export function traces(events: readonly AuditEvent[]): unknown {
  return {
    resourceSpans: [
      {
        resource: { attributes: [...attr('service.name', 'govgate'), ...attr('service.version', VERSION)] },
        scopeSpans: [{ scope: { name: 'govgate.governance', version: VERSION }, spans: events.map(span) }],
      },
    ],
  };
}

function span(e: AuditEvent): unknown {
  const ns = `${BigInt(Date.parse(e.ts)) * 1_000_000n}`;
  const decision = (e.details as { decision?: { policy_version?: unknown } } | null)?.decision;
  const usage = e.usage as { prompt_tokens?: number; completion_tokens?: number } | null;
  const blocked = e.outcome === 'block';
  const reason = e.reason === null || e.reason === undefined ? undefined : scrubText(e.reason);
  return {
    traceId: createHash('sha256')
      .update(e.pipeline_id ?? e.id)
      .digest('hex')
      .slice(0, 32),
    spanId: randomBytes(8).toString('hex'),
    name: `govgate.decision ${e.behavior_type}`,
    kind: 1, // INTERNAL
    startTimeUnixNano: ns,
    endTimeUnixNano: ns,
    attributes: [
      ...attr('govgate.verdict', e.outcome),
      ...attr('govgate.reason', reason),
      ...attr('govgate.rule_id', e.rule_id),
      ...attr('govgate.behavior_type', e.behavior_type),
      ...attr('govgate.event_type', e.event_type),
      ...attr('govgate.event_id', e.id),
      ...attr('govgate.agent_id', e.agent_id),
      ...attr('govgate.org_id', e.org_id),
      ...attr('govgate.policy_version', decision?.policy_version),
      ...attr('gen_ai.system', e.provider),
      ...attr('gen_ai.request.model', e.model),
      ...attr('gen_ai.usage.input_tokens', usage?.prompt_tokens),
      ...attr('gen_ai.usage.output_tokens', usage?.completion_tokens),
      ...attr('govgate.cost', e.cost),
    ],
    // STATUS_CODE_ERROR (2) for a block; UNSET otherwise.
    status: blocked ? { code: 2, message: reason ?? 'blocked' } : { code: 0 },
  };
}
