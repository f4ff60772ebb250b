import { Agent } from 'undici';
import type { AuditEvent } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import type { Store } from '../store/db.js';
import type { SettingsRepo } from '../store/settings.js';
import { sortableId } from '../util/ids.js';
import { VERSION } from '../version.js';
import { postWithRetries } from './deliver.js';
import {
  type ExportFormat,
  formatEvent,
  outboundEvent,
  passes,
  type SeverityFilter,
  severityOf,
} from './formats.js';
import { type EgressPolicy, originOf } from './ssrf.js';

export const SIEM_KINDS = ['collector_hec', 'cloud_siem', 'webhook'] as const;
export type SiemKind = (typeof SIEM_KINDS)[number];
export const DESTINATION_KINDS = ['otlp', ...SIEM_KINDS] as const;
export type DestinationKind = (typeof DESTINATION_KINDS)[number];

/** The formats each SIEM kind accepts (spec 2.9). */
export const FORMATS_OF: Readonly<Record<SiemKind, readonly ExportFormat[]>> = {
  collector_hec: ['cef', 'json'],
  cloud_siem: ['json'],
  webhook: ['json', 'cef', 'ocsf'],
};

/** The org id the deployment-wide SIEM export is kept under, and its id. */
export const SYSTEM = '_system';
export const SIEM_ID = 'siem';

/**
 * One export target: the deployment-wide SIEM export (spec 2.9, every org's events) or an org's
 * export destination (spec 2.11, that org's). The token is sealed in the vault.
 */
export interface ExportTarget {
  readonly id: string;
  readonly org_id: string;
  readonly enabled: boolean;
  readonly kind: DestinationKind;
  readonly url: string;
  /** The header the token goes in; null: `Authorization` with the kind's scheme. */
  readonly secret_header: string | null;
  readonly token_last4: string | null;
  readonly format: ExportFormat;
  readonly severity_filter: SeverityFilter;
  readonly event_types: readonly string[];
  readonly exclude_event_types: readonly string[];
  readonly buffer_size: number;
  readonly flush_interval_seconds: number;
  readonly max_retries: number;
  readonly retry_backoff_seconds: number;
  readonly source_name: string;
  readonly environment: string;
  readonly created_at: string;
  readonly updated_at: string;
}

export type TargetInput = Partial<
  Omit<ExportTarget, 'id' | 'org_id' | 'token_last4' | 'created_at' | 'updated_at'>
> & {
  token?: string | null;
};

export const DEFAULTS = {
  enabled: true,
  secret_header: null,
  format: 'json',
  severity_filter: 'all',
  event_types: [],
  exclude_event_types: [],
  buffer_size: 100,
  flush_interval_seconds: 1,
  max_retries: 3,
  retry_backoff_seconds: 1,
  source_name: 'govgate',
  environment: 'production',
} as const;

/** The API's names of the kind, URL and token fields (an org's export destination). */
const FIELD_NAMES = { kind: 'kind', url: 'endpoint', token: 'token' } as const;
/** The SIEM configuration's names for them (spec 2.9). */
export const SIEM_FIELD_NAMES = { kind: 'destination', url: 'url', token: 'auth_token' } as const;

/** Events waiting per target at most; past it the oldest are dropped (and counted). */
const QUEUE_MAX = 10_000;
const TIMEOUT_MS = 10_000;

export interface TargetStats {
  queued: number;
  sent_events: number;
  sent_batches: number;
  failed_batches: number;
  dropped_events: number;
  last_success_at: string | null;
  last_error: string | null;
  last_error_at: string | null;
}

/** The outcome of one batch (a test's answer). */
export interface BatchResult {
  readonly status: 'delivered' | 'failed';
  readonly http_status: number | null;
  readonly attempts: number;
  readonly events: number;
  readonly error: string | null;
}

class Exporter {
  queue: AuditEvent[] = [];
  stats: TargetStats = {
    queued: 0,
    sent_events: 0,
    sent_batches: 0,
    failed_batches: 0,
    dropped_events: 0,
    last_success_at: null,
    last_error: null,
    last_error_at: null,
  };
  timer: NodeJS.Timeout | undefined;
  sending = false;
  constructor(public target: ExportTarget) {}
}

export interface ExportDeskDeps {
  readonly store: Pick<Store, 'settings' | 'writer'>;
  readonly settings: SettingsRepo;
  readonly egress: EgressPolicy;
}

/**
 * SIEM export and per-org export destinations (spec 2.9, 2.11, 4.7, 4.8). Committed events that
 * pass a target's filters are queued; a target sends a batch when `buffer_size` events wait or
 * `flush_interval_seconds` after the first, one batch at a time, in order, retrying a failed
 * batch `max_retries` times (`retry_backoff_seconds` doubling), through the egress policy. Events
 * leave with their personal fields as commitments only (`outboundEvent`). Best effort: a full
 * queue drops its oldest events, counted in the stats; the trail is the record.
 */
export class ExportDesk {
  readonly #deps: ExportDeskDeps;
  readonly #agent: Agent;
  readonly #byOrg = new Map<string, Exporter[]>();
  #closed = false;

  constructor(deps: ExportDeskDeps) {
    this.#deps = deps;
    this.#agent = new Agent({ connect: deps.egress.connector(TIMEOUT_MS) });
    for (const { value } of deps.store.settings.getRange()) {
      const t = value as (ExportTarget & { record?: string }) | null;
      if (t !== null && typeof t === 'object' && t.record === 'export_target') this.#index(strip(t));
    }
  }

  /** For `ChainLog.onCommitted`. */
  readonly onCommitted = (org: string, events: readonly AuditEvent[]): void => {
    const own = this.#byOrg.get(org);
    const global = this.#byOrg.get(SYSTEM);
    if (own === undefined && global === undefined) return;
    for (const e of events) {
      const severity = severityOf(e);
      for (const x of own ?? []) if (selects(x.target, e, severity)) this.#enqueue(x, e);
      for (const x of global ?? []) if (selects(x.target, e, severity)) this.#enqueue(x, e);
    }
  };

  list(org: string): ExportTarget[] {
    return (this.#byOrg.get(org) ?? []).map((x) => x.target).filter((t) => t.id !== SIEM_ID);
  }

  get(org: string, id: string): ExportTarget | undefined {
    return this.#byOrg.get(org)?.find((x) => x.target.id === id)?.target;
  }

  stats(org: string, id: string): TargetStats | undefined {
    const x = this.#byOrg.get(org)?.find((e) => e.target.id === id);
    return x === undefined ? undefined : { ...x.stats, queued: x.queue.length };
  }

  /** Totals over every target (metrics). */
  totals(): { sent: number; failed: number; dropped: number; queued: number } {
    const t = { sent: 0, failed: 0, dropped: 0, queued: 0 };
    for (const list of this.#byOrg.values())
      for (const x of list) {
        t.sent += x.stats.sent_events;
        t.failed += x.stats.failed_batches;
        t.dropped += x.stats.dropped_events;
        t.queued += x.queue.length;
      }
    return t;
  }

  /**
   * Adds (no `id`) or updates a target, every field checked (400 with the field). A token equal to
   * the masked one shown (`****last4`) keeps the token in force; null removes it. `names`: what
   * the caller's API calls the kind, URL and token fields, for the errors.
   */
  async put(
    org: string,
    id: string | undefined,
    input: TargetInput,
    names: { readonly kind: string; readonly url: string; readonly token: string } = FIELD_NAMES,
  ): Promise<ExportTarget> {
    const before = id === undefined ? undefined : this.get(org, id);
    if (id !== undefined && before === undefined && id !== SIEM_ID)
      throw new ServiceError('not_found', `no export destination ${id} in this org`);
    const merged = { ...DEFAULTS, ...before, ...dropUndefined(input) };
    const kind = merged.kind;
    if (kind === undefined)
      throw new ServiceError('invalid_request', `${names.kind} is required`, { param: names.kind });
    if (merged.url === undefined)
      throw new ServiceError('invalid_request', `${names.url} is required`, { param: names.url });
    if (kind !== 'otlp' && !FORMATS_OF[kind].includes(merged.format))
      throw new ServiceError(
        'invalid_request',
        `format ${merged.format} is not one ${kind} takes (${FORMATS_OF[kind].join(', ')})`,
        { param: 'format' },
      );
    if (input.url !== undefined && input.url !== before?.url) {
      const problem = await this.#deps.egress.check(input.url);
      if (problem !== undefined)
        throw new ServiceError('invalid_request', `${names.url} ${problem}`, { param: names.url });
    }
    let token: string | null | undefined; // undefined: keep
    if (input.token === null) token = null;
    else if (
      input.token !== undefined &&
      !(before?.token_last4 != null && input.token === mask(before.token_last4))
    )
      token = input.token;
    // A stored token does not follow its target to another origin unless it is given again: an
    // admin who can edit the URL cannot send the token where it never went (as provider keys).
    if (
      token === undefined &&
      before?.token_last4 != null &&
      input.url !== undefined &&
      originOf(input.url) !== originOf(before.url)
    )
      throw new ServiceError(
        'invalid_request',
        `the ${names.url} moves to another origin: give the ${names.token} again (or null to send none)`,
        { param: names.token },
      );
    const now = new Date().toISOString();
    const target: ExportTarget = {
      id: before?.id ?? id ?? sortableId('xd_'),
      org_id: org,
      enabled: merged.enabled,
      kind,
      url: merged.url,
      secret_header: merged.secret_header,
      token_last4:
        token === undefined ? (before?.token_last4 ?? null) : token === null ? null : token.slice(-4),
      format: kind === 'otlp' ? 'json' : merged.format,
      severity_filter: merged.severity_filter,
      event_types: [...merged.event_types],
      exclude_event_types: [...merged.exclude_event_types],
      buffer_size: merged.buffer_size,
      flush_interval_seconds: merged.flush_interval_seconds,
      max_retries: merged.max_retries,
      retry_backoff_seconds: merged.retry_backoff_seconds,
      source_name: merged.source_name,
      environment: merged.environment,
      created_at: before?.created_at ?? now,
      updated_at: now,
    };
    const { settings, writer } = this.#deps.store;
    await writer.enqueue(() => {
      if (token === null) this.#deps.settings.removeSecret(org, slot(target.id));
      else if (token !== undefined) this.#deps.settings.sealSecret(org, slot(target.id), token);
      settings.putSync([org, 'export', target.id], { ...target, record: 'export_target' });
    });
    this.#index(target);
    return target;
  }

  async remove(org: string, id: string): Promise<boolean> {
    const list = this.#byOrg.get(org) ?? [];
    const x = list.find((e) => e.target.id === id);
    if (x === undefined) return false;
    const { settings, writer } = this.#deps.store;
    await writer.enqueue(() => {
      settings.removeSync([org, 'export', id]);
    });
    this.#deps.settings.removeSecret(org, slot(id));
    if (x.timer !== undefined) clearTimeout(x.timer);
    x.queue = [];
    this.#byOrg.set(
      org,
      list.filter((e) => e !== x),
    );
    return true;
  }

  /** Sends one test event to a target now (its retries included) and answers how it went. */
  async test(t: ExportTarget): Promise<BatchResult> {
    const event = {
      _chain_version: 2,
      id: 'ae_test',
      org_id: t.org_id,
      seq: 0,
      ts: new Date().toISOString(),
      event_type: 'export.test',
      agent_id: null,
      behavior_type: 'TOOL_CALL',
      outcome: 'block',
      reason: 'a test decision sent from govgate',
      rule_id: null,
      personal: {},
      details: {},
      detections: null,
    } as unknown as AuditEvent;
    const x = this.#byOrg.get(t.org_id)?.find((e) => e.target.id === t.id) ?? new Exporter(t);
    return this.#send(x, [event]);
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const list of this.#byOrg.values())
      for (const x of list) {
        if (x.timer !== undefined) clearTimeout(x.timer);
        x.queue = [];
      }
    await this.#agent.destroy();
  }

  #index(t: ExportTarget): void {
    const list = this.#byOrg.get(t.org_id) ?? [];
    const x = list.find((e) => e.target.id === t.id);
    if (x !== undefined) x.target = t;
    else {
      list.push(new Exporter(t));
      this.#byOrg.set(t.org_id, list);
    }
  }

  #enqueue(x: Exporter, e: AuditEvent): void {
    if (this.#closed) return;
    if (x.queue.length >= QUEUE_MAX) {
      x.queue.shift();
      x.stats.dropped_events++;
    }
    x.queue.push(e);
    if (x.queue.length >= x.target.buffer_size) void this.#flush(x);
    else if (x.timer === undefined) {
      x.timer = setTimeout(() => {
        x.timer = undefined;
        void this.#flush(x);
      }, x.target.flush_interval_seconds * 1_000);
      x.timer.unref();
    }
  }

  /** Sends what waits, a batch at a time, until the queue is empty. */
  async #flush(x: Exporter): Promise<void> {
    if (x.sending) return;
    x.sending = true;
    if (x.timer !== undefined) clearTimeout(x.timer);
    x.timer = undefined;
    try {
      while (x.queue.length > 0 && !this.#closed && x.target.enabled) {
        const batch = x.queue.splice(0, x.target.buffer_size);
        await this.#send(x, batch);
      }
    } finally {
      x.sending = false;
    }
  }

  async #send(x: Exporter, events: readonly AuditEvent[]): Promise<BatchResult> {
    const t = x.target;
    const token = t.token_last4 === null ? undefined : this.#deps.settings.openSecret(t.org_id, slot(t.id));
    const { body, contentType } = encodeBatch(t, events);
    const headers: Record<string, string> = {
      'content-type': contentType,
      'user-agent': `govgate/${VERSION}`,
    };
    if (token !== undefined)
      headers[t.secret_header ?? 'authorization'] =
        t.secret_header !== null ? token : t.kind === 'collector_hec' ? `Splunk ${token}` : `Bearer ${token}`;
    const { status, attempts, error } = await postWithRetries(this.#agent, t.url, {
      headers,
      body,
      tries: t.max_retries + 1,
      backoffMs: t.retry_backoff_seconds * 1_000,
      timeoutMs: TIMEOUT_MS,
      stopped: () => this.#closed,
    });
    const now = new Date().toISOString();
    if (error === null) {
      x.stats.sent_batches++;
      x.stats.sent_events += events.length;
      x.stats.last_success_at = now;
    } else {
      x.stats.failed_batches++;
      x.stats.last_error = error;
      x.stats.last_error_at = now;
    }
    return {
      status: error === null ? 'delivered' : 'failed',
      http_status: status,
      attempts,
      events: events.length,
      error,
    };
  }
}

/** Whether a target takes an event: enabled, its severity filter, its include and exclude lists. */
function selects(t: ExportTarget, e: AuditEvent, severity: ReturnType<typeof severityOf>): boolean {
  if (!t.enabled || !passes(e, t.severity_filter, severity)) return false;
  if (t.event_types.length > 0 && !t.event_types.includes(e.event_type)) return false;
  return !t.exclude_event_types.includes(e.event_type);
}

/**
 * A batch as its kind posts it. `collector_hec`: one HEC event object per line (`time` in seconds,
 * `source`, `sourcetype` `govgate:audit` or `govgate:cef`, `fields.environment`); `cloud_siem`: a
 * JSON array; `webhook`: `{source, environment, events}`; `otlp`: OTLP/HTTP JSON logs, one log
 * record per event (its body the event as JSON).
 */
export function encodeBatch(
  t: ExportTarget,
  events: readonly AuditEvent[],
): { body: string; contentType: string } {
  const json = 'application/json';
  const fmt = (e: AuditEvent) => formatEvent(e, t.format, t.source_name, t.environment);
  switch (t.kind) {
    case 'collector_hec':
      return {
        contentType: json,
        body: events
          .map((e) =>
            JSON.stringify({
              time: Date.parse(e.ts) / 1_000,
              host: 'govgate',
              source: t.source_name,
              sourcetype: t.format === 'cef' ? 'govgate:cef' : 'govgate:audit',
              event: fmt(e),
              fields: { environment: t.environment, org_id: e.org_id },
            }),
          )
          .join('\n'),
      };
    case 'cloud_siem':
      return { contentType: json, body: JSON.stringify(events.map(fmt)) };
    case 'webhook':
      return {
        contentType: json,
        body: JSON.stringify({ source: t.source_name, environment: t.environment, events: events.map(fmt) }),
      };
    case 'otlp':
      return { contentType: json, body: JSON.stringify(otlpLogs(t, events)) };
  }
}

const attr = (key: string, value: string | number | null | undefined) =>
  value === null || value === undefined
    ? []
    : [{ key, value: typeof value === 'number' ? { intValue: String(value) } : { stringValue: value } }];

function otlpLogs(t: ExportTarget, events: readonly AuditEvent[]): unknown {
  return {
    resourceLogs: [
      {
        resource: {
          attributes: [
            ...attr('service.name', t.source_name),
            ...attr('deployment.environment', t.environment),
            ...attr('govgate.org_id', t.org_id),
          ],
        },
        scopeLogs: [
          {
            scope: { name: 'govgate.audit', version: VERSION },
            logRecords: events.map((e) => {
              const severity = severityOf(e);
              return {
                timeUnixNano: `${BigInt(Date.parse(e.ts)) * 1_000_000n}`,
                severityNumber: severity === 'block' ? 17 : severity === 'detect' ? 13 : 9,
                severityText: severity === 'block' ? 'ERROR' : severity === 'detect' ? 'WARN' : 'INFO',
                body: { stringValue: JSON.stringify(outboundEvent(e)) },
                attributes: [
                  ...attr('event.name', e.event_type),
                  ...attr('govgate.event_id', e.id),
                  ...attr('govgate.seq', e.seq),
                  ...attr('govgate.agent_id', e.agent_id),
                  ...attr('govgate.outcome', e.outcome),
                  ...attr('govgate.rule_id', e.rule_id),
                  ...attr('govgate.pipeline_id', e.pipeline_id),
                ],
              };
            }),
          },
        ],
      },
    ],
  };
}

export function mask(last4: string): string {
  return `****${last4}`;
}

function slot(id: string): string {
  return `export:${id}`;
}

function strip(t: ExportTarget & { record?: string }): ExportTarget {
  const { record: _r, ...rest } = t;
  return rest;
}

function dropUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
