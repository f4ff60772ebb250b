import { Agent } from 'undici';
import type { AuditEvent } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import type { Store } from '../store/db.js';
import { assertOrgLive, orgDeleted } from '../store/org-tombstone.js';
import type { SettingsRepo } from '../store/settings.js';
import { sortableId } from '../util/ids.js';
import { postWithRetries } from './deliver.js';
import { outboundEvent, type Severity, scrubText, severityOf } from './formats.js';
import { OrgBound } from './org-bound.js';
import type { EgressPolicy } from './ssrf.js';

export { type Severity, severityOf } from './formats.js';
export const WEBHOOK_TYPES = ['chat1', 'chat2', 'generic'] as const;
export type WebhookType = (typeof WEBHOOK_TYPES)[number];
export const MIN_SEVERITIES = ['block', 'detect', 'all'] as const;
export type MinSeverity = (typeof MIN_SEVERITIES)[number];

/** The org id the deployment-wide alerting configuration is kept under. */
export const SYSTEM = '_system';
const GLOBAL_ID = 'alerting';

/** Where alerts of one org (or of every org: the deployment-wide one) go. */
export interface AlertDestination {
  readonly id: string;
  /** The org whose events it gets; `_system` for the deployment-wide destination (every org). */
  readonly org_id: string;
  readonly enabled: boolean;
  readonly webhook_type: WebhookType;
  readonly min_severity: MinSeverity;
  /** The URL's last four characters (the URL itself is sealed in the vault). */
  readonly url_last4: string;
  readonly created_at: string;
  readonly updated_at: string;
}

/** One delivery's outcome, as the delivery log shows it. */
export interface DeliveryRecord {
  readonly at: string;
  readonly event_id: string | null;
  readonly event_type: string;
  readonly severity: Severity | 'test';
  readonly status: 'delivered' | 'failed' | 'dropped';
  readonly http_status: number | null;
  readonly attempts: number;
  readonly error: string | null;
}

export function meets(severity: Severity, min: MinSeverity): boolean {
  if (min === 'all') return true;
  if (min === 'detect') return severity !== 'info';
  return severity === 'block';
}

/**
 * The body posted for an event. `chat1` is a chat tool's incoming-webhook message (`{text}`),
 * `chat2` a connector card (`MessageCard`), `generic` the raw event JSON (spec 2.10; its severity
 * and link go in headers: alertHeaders). None carries personal
 * values: `personal` fields go as their commitments only, so an alert never copies a person's data
 * out of the trail (erasure could not reach it there).
 */
export function alertBody(
  type: WebhookType,
  e: AuditEvent,
  severity: Severity | 'test',
  auditUrl: string,
): unknown {
  if (type === 'generic') return outboundEvent(e);
  const why = e.reason ? `: ${scrubText(e.reason)}` : '';
  const who = e.agent_id === null || e.agent_id === undefined ? '' : ` by agent ${e.agent_id}`;
  const rule = e.rule_id ? ` (rule ${e.rule_id})` : '';
  const title = `govgate ${severity.toUpperCase()}: ${e.event_type}${who} in org ${e.org_id}`;
  const text = `${title}${why}${rule}. ${auditUrl}`;
  if (type === 'chat1') return { text };
  return {
    '@type': 'MessageCard',
    '@context': 'https://schema.org/extensions',
    summary: title,
    themeColor: severity === 'block' ? 'C4314B' : severity === 'detect' ? 'F2C744' : '6264A7',
    title,
    text: `${why.slice(2) || e.event_type}${rule}`,
    potentialAction: [
      { '@type': 'OpenUri', name: 'Open in the audit trail', targets: [{ os: 'default', uri: auditUrl }] },
    ],
  };
}

/**
 * The headers of an alert post: a `generic` one also names its severity and the event's receipt
 * (`X-Service-Severity`, `X-Service-Audit-Url`), since its body is the event alone.
 */
export function alertHeaders(
  type: WebhookType,
  severity: Severity | 'test',
  auditUrl: string,
): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': 'govgate-alerts',
  };
  if (type === 'generic') {
    headers['x-service-severity'] = severity;
    headers['x-service-audit-url'] = auditUrl;
  }
  return headers;
}

export interface AlertDeskDeps {
  readonly store: Pick<Store, 'settings' | 'writer' | 'orgs'>;
  readonly settings: SettingsRepo;
  readonly egress: EgressPolicy;
  /** Where `audit_url` points: `{base}/api/audit/events/{id}`. */
  readonly baseUrl: () => string;
  readonly retries?: number;
  readonly backoffMs?: number;
  readonly timeoutMs?: number;
}

/** Deliveries waiting per destination at most; past it the oldest is dropped (and logged). */
const QUEUE_MAX = 1_000;
/** Delivery records kept per destination. */
const LOG_MAX = 100;
/** The settings key of a delivery record: [org, LOG_KIND, destination id, its number]. */
const LOG_KIND = 'alert_log';
const URL_MAX = 2_048;
/**
 * Alert destinations an org may hold, enabled or not (the deployment-wide webhook is not one). Each
 * committed event of the org is matched against every one, and each it meets costs a POST and a
 * stored delivery record: without a bound, an org_admin could make every event cost any number of
 * requests and writes. Twenty is more than a team's channels and receivers; one receiver that fans
 * out serves more.
 */
export const MAX_ALERT_DESTINATIONS_PER_ORG = 20;

/** The fields of a destination an API call sets. */
interface DestinationInput {
  webhook_type?: WebhookType;
  webhook_url?: string;
  min_severity?: MinSeverity;
  enabled?: boolean;
}

interface Pending {
  readonly event: AuditEvent;
  readonly severity: Severity;
}

/**
 * Alert destinations (spec 2.10, 2.12, 4.7, 4.8) and their delivery. Committed events are matched
 * against the org's destinations and the deployment-wide one by severity and queued; each
 * destination delivers its queue in order, one request at a time, through the egress policy (so
 * a URL that was public when it was configured and resolves to a private address now reaches
 * nothing), retrying failures with backoff. Delivery never slows the request path: a commit only
 * queues, and a full queue drops its oldest delivery, which the delivery log says.
 */
export class AlertDesk {
  readonly #deps: AlertDeskDeps;
  readonly #agent: Agent;
  /** Destinations by org (`_system`: the deployment-wide one), read from the store at start. */
  readonly #byOrg = new Map<string, AlertDestination[]>();
  readonly #queues = new Map<string, Pending[]>();
  readonly #running = new Set<string>();
  readonly #logs = new Map<string, DeliveryRecord[]>();
  /** The number of each destination's last stored delivery record. */
  readonly #logSeq = new Map<string, number>();
  readonly #counts = { delivered: 0, failed: 0, dropped: 0 };
  readonly #bound = new OrgBound(MAX_ALERT_DESTINATIONS_PER_ORG, 'alert destinations');
  #closed = false;

  constructor(deps: AlertDeskDeps) {
    this.#deps = deps;
    this.#agent = new Agent({ connect: deps.egress.connector(deps.timeoutMs ?? 10_000) });
    for (const { key, value } of deps.store.settings.getRange()) {
      const d = value as Partial<AlertDestination> & { kind?: string };
      if (d !== null && typeof d === 'object' && d.kind === 'alert_destination')
        this.#index(d as AlertDestination);
      // The delivery logs, kept in the store across restarts (in key order: oldest first).
      const k = key as unknown[];
      if (k[1] === LOG_KIND && typeof k[3] === 'number' && d !== null && typeof d === 'object') {
        const logKey = `${String(k[0])}/${String(k[2])}`;
        let log = this.#logs.get(logKey);
        if (log === undefined) this.#logs.set(logKey, (log = []));
        log.push(value as DeliveryRecord);
        this.#logSeq.set(logKey, k[3]);
      }
    }
  }

  /** For `ChainLog.onCommitted`: queues the alerts a batch of committed events raises. */
  readonly onCommitted = (org: string, events: readonly AuditEvent[]): void => {
    const own = this.#byOrg.get(org);
    const global = this.#byOrg.get(SYSTEM);
    if (own === undefined && global === undefined) return;
    for (const e of events) {
      const severity = severityOf(e);
      for (const d of own ?? [])
        if (d.enabled && meets(severity, d.min_severity)) this.#enqueue(d, { event: e, severity });
      for (const d of global ?? [])
        if (d.enabled && meets(severity, d.min_severity)) this.#enqueue(d, { event: e, severity });
    }
  };

  list(org: string): AlertDestination[] {
    return (this.#byOrg.get(org) ?? []).filter((d) => d.id !== GLOBAL_ID);
  }

  get(org: string, id: string): AlertDestination | undefined {
    return this.#byOrg.get(org)?.find((d) => d.id === id);
  }

  /** The deployment-wide destination, if configured. */
  global(): AlertDestination | undefined {
    return this.get(SYSTEM, GLOBAL_ID);
  }

  /**
   * Adds (no `id`) or updates a destination. A URL equal to the masked one shown (`****last4`)
   * keeps the URL in force; any other is checked against the egress policy (400 when refused). An
   * org that holds MAX_ALERT_DESTINATIONS_PER_ORG gets no more (409).
   */
  async put(org: string, id: string | undefined, input: DestinationInput): Promise<AlertDestination> {
    if (id !== undefined) return this.#put(org, id, input);
    return this.#bound.add(org, this.list(org).length, () => this.#put(org, undefined, input));
  }

  async #put(org: string, id: string | undefined, input: DestinationInput): Promise<AlertDestination> {
    const before = id === undefined ? undefined : this.get(org, id);
    if (id !== undefined && before === undefined && id !== GLOBAL_ID)
      throw new ServiceError('not_found', `no alert destination ${id} in this org`);
    let url: string | undefined;
    if (
      input.webhook_url !== undefined &&
      !(before !== undefined && input.webhook_url === mask(before.url_last4))
    ) {
      if (input.webhook_url.length > URL_MAX)
        throw new ServiceError('invalid_request', `webhook_url is longer than ${URL_MAX} characters`, {
          param: 'webhook_url',
        });
      const problem = await this.#deps.egress.check(input.webhook_url);
      if (problem !== undefined)
        throw new ServiceError('invalid_request', `webhook_url ${problem}`, { param: 'webhook_url' });
      url = input.webhook_url;
    }
    if (before === undefined && url === undefined)
      throw new ServiceError('invalid_request', 'webhook_url is required', { param: 'webhook_url' });
    const now = new Date().toISOString();
    const record: AlertDestination & { kind: string } = {
      kind: 'alert_destination',
      id: before?.id ?? id ?? sortableId('ad_'),
      org_id: org,
      enabled: input.enabled ?? before?.enabled ?? true,
      webhook_type: input.webhook_type ?? before?.webhook_type ?? 'generic',
      min_severity: input.min_severity ?? before?.min_severity ?? 'block',
      url_last4: url === undefined ? (before?.url_last4 ?? '') : url.slice(-4),
      created_at: before?.created_at ?? now,
      updated_at: now,
    };
    const { settings, writer } = this.#deps.store;
    await writer.enqueue(() => {
      assertOrgLive(this.#deps.store, org);
      if (url !== undefined) this.#deps.settings.sealSecret(org, slot(record.id), url);
      settings.putSync([org, 'alert', record.id], record);
    });
    const { kind: _k, ...view } = record;
    this.#index(view);
    return view;
  }

  async remove(org: string, id: string): Promise<boolean> {
    if (this.get(org, id) === undefined) return false;
    const { settings, writer } = this.#deps.store;
    const last = this.#logSeq.get(`${org}/${id}`) ?? 0;
    await writer.enqueue(() => {
      settings.removeSync([org, 'alert', id]);
      for (let n = Math.max(1, last - LOG_MAX + 1); n <= last; n++)
        settings.removeSync([org, LOG_KIND, id, n]);
    });
    this.#logSeq.delete(`${org}/${id}`);
    this.#deps.settings.removeSecret(org, slot(id));
    this.#byOrg.set(
      org,
      (this.#byOrg.get(org) ?? []).filter((d) => d.id !== id),
    );
    this.#queues.delete(`${org}/${id}`);
    this.#logs.delete(`${org}/${id}`);
    return true;
  }

  /** The org is being deleted: each of its destinations is removed (as `remove` does). Returns how many. */
  async dropOrg(org: string): Promise<number> {
    let n = 0;
    for (const d of [...(this.#byOrg.get(org) ?? [])]) if (await this.remove(org, d.id)) n++;
    this.#byOrg.delete(org);
    return n;
  }

  /** Sends a test alert now (no retries) and answers how it went; it is logged like any delivery. */
  async test(d: AlertDestination, org: string): Promise<DeliveryRecord> {
    const event = {
      id: 'ae_test',
      org_id: org,
      seq: 0,
      ts: new Date().toISOString(),
      event_type: 'alert.test',
      agent_id: null,
      outcome: 'block',
      reason: 'a test alert sent from govgate',
      rule_id: null,
      personal: {},
      details: {},
      detections: null,
    } as unknown as AuditEvent;
    return this.#deliver(d, { event, severity: 'block' }, 1, 'test');
  }

  deliveryLog(d: AlertDestination): DeliveryRecord[] {
    return [...(this.#logs.get(`${d.org_id}/${d.id}`) ?? [])].reverse();
  }

  /** Deliveries by outcome so far, and those waiting (all destinations): the metrics. */
  stats(): { delivered: number; failed: number; dropped: number; queued: number } {
    let queued = 0;
    for (const q of this.#queues.values()) queued += q.length;
    return { ...this.#counts, queued };
  }

  /** Stops delivering: what is queued is dropped (alerts are best effort; the trail is the record). */
  async close(): Promise<void> {
    this.#closed = true;
    this.#queues.clear();
    await this.#agent.destroy(); // requests in flight end now
  }

  #index(d: AlertDestination): void {
    const list = (this.#byOrg.get(d.org_id) ?? []).filter((x) => x.id !== d.id);
    list.push(d);
    this.#byOrg.set(d.org_id, list);
  }

  #enqueue(d: AlertDestination, p: Pending): void {
    if (this.#closed) return;
    const key = `${d.org_id}/${d.id}`;
    let q = this.#queues.get(key);
    if (q === undefined) this.#queues.set(key, (q = []));
    if (q.length >= QUEUE_MAX) {
      const dropped = q.shift() as Pending;
      this.#log(d, {
        at: new Date().toISOString(),
        event_id: dropped.event.id,
        event_type: dropped.event.event_type,
        severity: dropped.severity,
        status: 'dropped',
        http_status: null,
        attempts: 0,
        error: `the destination's queue held ${QUEUE_MAX} alerts`,
      });
    }
    q.push(p);
    if (!this.#running.has(key)) void this.#drain(d, key);
  }

  async #drain(d: AlertDestination, key: string): Promise<void> {
    this.#running.add(key);
    try {
      for (;;) {
        const q = this.#queues.get(key);
        const next = q?.shift();
        if (next === undefined || this.#closed) return;
        const current = this.get(d.org_id, d.id);
        if (current === undefined || !current.enabled) continue;
        await this.#deliver(current, next, (this.#deps.retries ?? 3) + 1, next.severity);
      }
    } finally {
      this.#running.delete(key);
    }
  }

  async #deliver(
    d: AlertDestination,
    p: Pending,
    tries: number,
    severity: Severity | 'test',
  ): Promise<DeliveryRecord> {
    const url = this.#deps.settings.openSecret(d.org_id, slot(d.id));
    const auditUrl = `${this.#deps.baseUrl()}/api/audit/events/${p.event.id}/receipt`;
    const body = JSON.stringify(alertBody(d.webhook_type, p.event, severity, auditUrl));
    const { status, attempts, error } =
      url === undefined
        ? { status: null, attempts: 0, error: 'the destination has no URL in the vault' }
        : await postWithRetries(this.#agent, url, {
            headers: alertHeaders(d.webhook_type, severity, auditUrl),
            body,
            tries,
            backoffMs: this.#deps.backoffMs ?? 1_000,
            timeoutMs: this.#deps.timeoutMs ?? 10_000,
            stopped: () => this.#closed,
          });
    const record: DeliveryRecord = {
      at: new Date().toISOString(),
      event_id: severity === 'test' ? null : p.event.id,
      event_type: p.event.event_type,
      severity,
      status: error === null ? 'delivered' : 'failed',
      http_status: status,
      attempts,
      error,
    };
    this.#log(d, record);
    return record;
  }

  #log(d: AlertDestination, r: DeliveryRecord): void {
    const key = `${d.org_id}/${d.id}`;
    let log = this.#logs.get(key);
    if (log === undefined) this.#logs.set(key, (log = []));
    log.push(r);
    if (log.length > LOG_MAX) log.shift();
    this.#counts[r.status]++;
    // Stored too (the last LOG_MAX), off the delivery's way: a log that cannot be written only
    // loses its history at the next restart.
    const n = (this.#logSeq.get(key) ?? 0) + 1;
    this.#logSeq.set(key, n);
    const { settings, writer } = this.#deps.store;
    void writer
      .enqueue(() => {
        // A deleted org's settings are gone for good: a delivery that ends after it logs nothing.
        if (orgDeleted(this.#deps.store, d.org_id)) return;
        settings.putSync([d.org_id, LOG_KIND, d.id, n], r);
        if (n > LOG_MAX) settings.removeSync([d.org_id, LOG_KIND, d.id, n - LOG_MAX]);
      })
      .catch(() => {});
  }
}

export function mask(last4: string): string {
  return `****${last4}`;
}

function slot(id: string): string {
  return `alert:${id}`;
}

export { GLOBAL_ID };
