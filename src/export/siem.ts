import { createHmac } from 'node:crypto';
import { Agent } from 'undici';
import type { AuditEvent, AuditLog } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import { headerSecretProblem, maskedEcho } from '../crypto/vault.js';
import type { Store } from '../store/db.js';
import { assertOrgLive, orgDeleted } from '../store/org-tombstone.js';
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
import { OrgBound } from './org-bound.js';
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

/** The settings key of a target's cursor on one chain: [target org, CURSOR, target id, chain org]. */
const CURSOR = 'export_cursor';

/** What an API calls the kind, URL and token fields of a target (for its errors). */
type FieldNames = { readonly kind: string; readonly url: string; readonly token: string };
/** The API's names of the kind, URL and token fields (an org's export destination). */
const FIELD_NAMES: FieldNames = { kind: 'kind', url: 'endpoint', token: 'token' };
/** The SIEM configuration's names for them (spec 2.9). */
export const SIEM_FIELD_NAMES = { kind: 'destination', url: 'url', token: 'auth_token' } as const;

/** Events read from the chain per pass at most (those a target's filters leave out included). */
const SCAN_MAX = 5_000;
/**
 * Export destinations an org may hold, enabled or not (the deployment-wide SIEM export is not one).
 * Each committed event of the org wakes every one, and each reads the chain, keeps a cursor in the
 * store and posts its batches: without a bound, an org_admin could make every event cost any number
 * of reads, writes and requests. Twenty is more than a SOC's collectors; one collector that fans out
 * serves more.
 */
export const MAX_EXPORT_DESTINATIONS_PER_ORG = 20;
const TIMEOUT_MS = 10_000;
/** A cursor moved past events a target does not take is stored this long after (one write). */
const SKIP_STORE_MS = 2_000;
/** A batch that failed after its retries is tried again after this (doubling), at most `RETRY_MAX_MS`. */
const RETRY_MIN_MS = 1_000;
const RETRY_MAX_MS = 60_000;

export interface TargetStats {
  /** Events of the chains it reads committed after its cursor: not yet read (filtered or sent). */
  queued: number;
  sent_events: number;
  sent_batches: number;
  failed_batches: number;
  /** Events retention pruned before this target read them. */
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

/** A target's stats before it sent anything (and the stats of none configured). */
export function emptyStats(): TargetStats {
  return {
    queued: 0,
    sent_events: 0,
    sent_batches: 0,
    failed_batches: 0,
    dropped_events: 0,
    last_success_at: null,
    last_error: null,
    last_error_at: null,
  };
}

/** One target's reading of the chains: per chain org, the last seq it has read (persisted). */
class Exporter {
  stats: TargetStats = emptyStats();
  readonly cursors = new Map<string, number>();
  /** Per chain org: a partial batch's flush, or a failed batch's next try. */
  readonly timers = new Map<string, NodeJS.Timeout>();
  readonly failures = new Map<string, number>();
  /** Per chain: the selected events read past the cursor and not sent yet, and the seq read to. */
  readonly pending = new Map<string, { events: AuditEvent[]; to: number }>();
  /** Chains whose cursor moved past skipped events and is stored soon. */
  readonly unstored = new Set<string>();
  /** Chains whose timer is a failed batch's next try (a commit does not hurry it). */
  readonly backoff = new Set<string>();
  readonly reading = new Set<string>();
  /** Orgs committed to while being read: read again when the pass ends. */
  readonly again = new Set<string>();
  constructor(public target: ExportTarget) {}
}

export interface ExportDeskDeps {
  readonly store: Pick<Store, 'settings' | 'writer' | 'orgs'>;
  readonly settings: SettingsRepo;
  readonly egress: EgressPolicy;
  /** The org chains, read from each target's cursor on. */
  readonly log: Pick<AuditLog, 'scanEvents' | 'lastSeq'>;
  /** The orgs that have a chain (a new target starts at their heads). */
  readonly orgs: () => Iterable<string>;
}

/**
 * SIEM export and per-org export destinations (spec 2.9, 2.11, 4.7, 4.8), read from the org
 * chains: each target keeps, per chain, the seq it has read to (in the store), so a restart, an
 * outage of the receiver or a failed batch loses nothing: what was committed after the cursor is
 * sent when the target can take it. A commit wakes the targets that read its org; a target sends
 * a batch of the events that pass its filters when `buffer_size` of them wait, or
 * `flush_interval_seconds` after a smaller batch is found at the head; one batch at a time per
 * chain, in order, retried `max_retries` times (`retry_backoff_seconds` doubling), then again
 * later (from 1 s, doubling to 60 s) until it is taken. At least once: a batch taken whose cursor
 * could not be stored is sent again. A target that is caught up takes the committed events as
 * they are (two batches at most); a backlog is read from the store. Events leave with their
 * personal fields as commitments only (`outboundEvent`). Events retention prunes before a target
 * read them are counted (`dropped_events`).
 */
export class ExportDesk {
  readonly #deps: ExportDeskDeps;
  readonly #agent: Agent;
  readonly #byOrg = new Map<string, Exporter[]>();
  readonly #bound = new OrgBound(MAX_EXPORT_DESTINATIONS_PER_ORG, 'export destinations');
  #closed = false;

  constructor(deps: ExportDeskDeps) {
    this.#deps = deps;
    this.#agent = new Agent({ connect: deps.egress.connector(TIMEOUT_MS) });
    const cursors: Array<[string, string, string, number]> = [];
    for (const { key, value } of deps.store.settings.getRange()) {
      const t = value as (ExportTarget & { record?: string }) | null;
      if (t !== null && typeof t === 'object' && t.record === 'export_target') this.#index(strip(t));
      const k = key as unknown[];
      if (k[1] === CURSOR && typeof value === 'number')
        cursors.push([String(k[0]), String(k[2]), String(k[3]), value]);
    }
    for (const [org, id, chain, seq] of cursors) this.#find(org, id)?.cursors.set(chain, seq);
    // What was committed while the process was down, or not taken before it stopped, goes now.
    for (const list of this.#byOrg.values())
      for (const x of list) for (const chain of x.cursors.keys()) this.#wake(x, chain);
  }

  /** For `ChainLog.onCommitted`. */
  readonly onCommitted = (org: string, events: readonly AuditEvent[]): void => {
    const own = this.#byOrg.get(org);
    const global = this.#byOrg.get(SYSTEM);
    if (own === undefined && global === undefined) return;
    const first = events[0];
    if (first === undefined) return;
    for (const x of [...(own ?? []), ...(global ?? [])]) {
      // A chain begun after the target was made (a new org) is read from its start.
      const cursor = x.cursors.get(org) ?? first.seq - 1;
      x.cursors.set(org, cursor);
      // Caught up with the chain: the committed events are taken as they are, not read back.
      let p = x.pending.get(org);
      if (p === undefined && cursor === first.seq - 1) x.pending.set(org, (p = { events: [], to: cursor }));
      // Held in memory up to two batches (a receiver that is down): the rest is read back later.
      if (p !== undefined && p.to === first.seq - 1 && x.target.enabled)
        for (const e of events) {
          if (p.events.length >= 2 * x.target.buffer_size) break;
          if (selects(x.target, e, severityOf(e))) p.events.push(e);
          p.to = e.seq;
        }
      this.#wake(x, org);
    }
  };

  list(org: string): ExportTarget[] {
    return (this.#byOrg.get(org) ?? []).map((x) => x.target).filter((t) => t.id !== SIEM_ID);
  }

  get(org: string, id: string): ExportTarget | undefined {
    return this.#byOrg.get(org)?.find((x) => x.target.id === id)?.target;
  }

  stats(org: string, id: string): TargetStats | undefined {
    const x = this.#find(org, id);
    return x === undefined ? undefined : { ...x.stats, queued: this.#lag(x) };
  }

  /** Totals over every target (metrics). */
  totals(): { sent: number; failed: number; dropped: number; queued: number } {
    const t = { sent: 0, failed: 0, dropped: 0, queued: 0 };
    for (const list of this.#byOrg.values())
      for (const x of list) {
        t.sent += x.stats.sent_events;
        t.failed += x.stats.failed_batches;
        t.dropped += x.stats.dropped_events;
        t.queued += this.#lag(x);
      }
    return t;
  }

  /** Events committed after a target's cursors. */
  #lag(x: Exporter): number {
    let n = 0;
    for (const [chain, seq] of x.cursors) n += Math.max(0, this.#deps.log.lastSeq(chain) - seq);
    return n;
  }

  #find(org: string, id: string): Exporter | undefined {
    return this.#byOrg.get(org)?.find((e) => e.target.id === id);
  }

  /**
   * Adds (no `id`) or updates a target, every field checked (400 with the field). A token equal to
   * the masked one shown (`****last4`) keeps the token in force; null removes it. `names`: what
   * the caller's API calls the kind, URL and token fields, for the errors. An org that holds
   * MAX_EXPORT_DESTINATIONS_PER_ORG gets no more (409).
   */
  async put(
    org: string,
    id: string | undefined,
    input: TargetInput,
    names: FieldNames = FIELD_NAMES,
  ): Promise<ExportTarget> {
    if (id !== undefined) return this.#put(org, id, input, names);
    return this.#bound.add(org, this.list(org).length, () => this.#put(org, undefined, input, names));
  }

  async #put(
    org: string,
    id: string | undefined,
    input: TargetInput,
    names: FieldNames,
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
    if (kind === 'otlp' && input.format !== undefined && input.format !== null)
      throw new ServiceError(
        'invalid_request',
        'format is for the SIEM kinds only: an otlp destination is sent OTLP/HTTP JSON logs',
        { param: 'format' },
      );
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
    if (typeof input.token === 'string' && input.token !== mask(before?.token_last4 ?? '')) {
      if (maskedEcho(input.token, before?.token_last4) === 'foreign')
        throw new ServiceError(
          'invalid_request',
          `${names.token} looks like a mask but is not the stored token's; send the token itself, or its mask as GET shows it`,
          { param: names.token },
        );
      const problem = headerSecretProblem(input.token);
      if (problem !== undefined)
        throw new ServiceError('invalid_request', `${names.token} ${problem}`, { param: names.token });
      // Only its last four characters are ever shown: a shorter token would be shown whole.
      if (input.token.length < TOKEN_MIN)
        throw new ServiceError('invalid_request', `${names.token} must be at least ${TOKEN_MIN} characters`, {
          param: names.token,
        });
      if (kind === 'cloud_siem' && merged.secret_header === null && !isBase64Key(input.token))
        throw new ServiceError(
          'invalid_request',
          `a cloud_siem ${names.token} is the workspace's shared key (base64), which signs each batch`,
          { param: names.token },
        );
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
    // A new target reads what is committed from now on: its cursors start at the chains' heads.
    const heads = new Map<string, number>();
    if (before === undefined)
      for (const chain of org === SYSTEM ? this.#deps.orgs() : [org])
        heads.set(chain, this.#deps.log.lastSeq(chain));
    await writer.enqueue(() => {
      assertOrgLive(this.#deps.store, org);
      if (token === null) this.#deps.settings.removeSecret(org, slot(target.id));
      else if (token !== undefined) this.#deps.settings.sealSecret(org, slot(target.id), token);
      settings.putSync([org, 'export', target.id], { ...target, record: 'export_target' });
      for (const [chain, seq] of heads) settings.putSync([org, CURSOR, target.id, chain], seq);
    });
    const x = this.#index(target);
    for (const [chain, seq] of heads) x.cursors.set(chain, seq);
    // What was selected under the old filters is read again under the new ones.
    x.pending.clear();
    // Re-enabled, or filters changed: what waits is read again with the target as it is now.
    for (const chain of x.cursors.keys()) this.#wake(x, chain);
    return target;
  }

  async remove(org: string, id: string): Promise<boolean> {
    const list = this.#byOrg.get(org) ?? [];
    const x = list.find((e) => e.target.id === id);
    if (x === undefined) return false;
    const { settings, writer } = this.#deps.store;
    await writer.enqueue(() => {
      settings.removeSync([org, 'export', id]);
      for (const chain of x.cursors.keys()) settings.removeSync([org, CURSOR, id, chain]);
    });
    this.#deps.settings.removeSecret(org, slot(id));
    for (const timer of x.timers.values()) clearTimeout(timer);
    x.timers.clear();
    x.target = { ...x.target, enabled: false };
    this.#byOrg.set(
      org,
      list.filter((e) => e !== x),
    );
    return true;
  }

  /** The org is being deleted: each of its destinations is removed (as `remove` does). Returns how many. */
  async dropOrg(org: string): Promise<number> {
    let n = 0;
    for (const x of [...(this.#byOrg.get(org) ?? [])]) if (await this.remove(org, x.target.id)) n++;
    this.#byOrg.delete(org);
    return n;
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
    const x = this.#find(t.org_id, t.id) ?? new Exporter(t);
    return this.#send(x, [event]);
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const list of this.#byOrg.values())
      for (const x of list) {
        for (const timer of x.timers.values()) clearTimeout(timer);
        x.timers.clear();
      }
    await this.#agent.destroy();
  }

  #index(t: ExportTarget): Exporter {
    const list = this.#byOrg.get(t.org_id) ?? [];
    let x = list.find((e) => e.target.id === t.id);
    if (x !== undefined) x.target = t;
    else {
      x = new Exporter(t);
      list.push(x);
      this.#byOrg.set(t.org_id, list);
    }
    return x;
  }

  /** Reads `chain` for `x` now, unless a pass is under way (then again after it) or a retry waits. */
  #wake(x: Exporter, chain: string): void {
    if (this.#closed) return;
    if (x.reading.has(chain)) x.again.add(chain);
    else if (!x.backoff.has(chain)) void this.#read(x, chain, false);
  }

  #later(x: Exporter, chain: string, ms: number, backoff: boolean): void {
    if (this.#closed || x.timers.has(chain)) return;
    if (backoff) x.backoff.add(chain);
    const timer = setTimeout(() => {
      x.timers.delete(chain);
      x.backoff.delete(chain);
      void this.#read(x, chain, true);
    }, ms);
    timer.unref();
    x.timers.set(chain, timer);
  }

  /**
   * One pass over `chain` from the target's cursor: batches of the events its filters take, each
   * sent before the cursor moves past it. A batch smaller than `buffer_size` at the chain's head
   * waits `flush_interval_seconds` first (`force`: it waited already).
   */
  async #read(x: Exporter, chain: string, force: boolean): Promise<void> {
    if (x.reading.has(chain)) return;
    x.reading.add(chain);
    try {
      const { log } = this.#deps;
      while (!this.#closed && x.target.enabled) {
        const t = x.target;
        const cursor = x.cursors.get(chain) ?? 0;
        const last = log.lastSeq(chain);
        // What an earlier pass selected and has not sent, and how far it read: each event is
        // read once, however often commits wake the target while a small batch waits.
        let p = x.pending.get(chain);
        if (p === undefined) x.pending.set(chain, (p = { events: [], to: cursor }));
        if (p.events.length < t.buffer_size && p.to < last)
          for (const e of log.scanEvents(chain, {}, SCAN_MAX, p.to + 1)) {
            // Retention pruned what lies between (the chain resumes after its bridge).
            if (e.seq > p.to + 1) x.stats.dropped_events += e.seq - p.to - 1;
            p.to = e.seq;
            if (selects(t, e, severityOf(e))) p.events.push(e);
            if (p.events.length === t.buffer_size) break;
          }
        if (p.events.length === 0) {
          // Nothing to send: the cursor moves in memory, and is stored at most every few seconds
          // (after a restart, reading those events again only finds nothing to send again).
          if (p.to > cursor) this.#skip(x, chain, p.to);
          if (p.to >= log.lastSeq(chain)) break;
          continue;
        }
        if (p.events.length < t.buffer_size && p.to >= log.lastSeq(chain) && !force) {
          this.#later(x, chain, t.flush_interval_seconds * 1_000, false);
          break;
        }
        const batch = p.events.slice(0, t.buffer_size);
        const r = await this.#send(x, batch);
        if (r.status === 'failed') {
          const n = (x.failures.get(chain) ?? 0) + 1;
          x.failures.set(chain, n);
          this.#later(x, chain, Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** (n - 1)), true);
          break;
        }
        x.failures.delete(chain);
        p.events = p.events.slice(batch.length);
        // The cursor stops before the first selected event not sent yet.
        const next = p.events[0];
        if (!(await this.#advance(x, chain, next === undefined ? p.to : next.seq - 1))) break;
        force = false;
      }
    } catch (err) {
      x.pending.delete(chain);
      x.stats.last_error = `reading the chain: ${(err as Error).message}`;
      x.stats.last_error_at = new Date().toISOString();
      this.#later(x, chain, RETRY_MAX_MS, true);
    } finally {
      x.reading.delete(chain);
      if (x.again.delete(chain)) this.#wake(x, chain);
    }
  }

  /** Moves a target's cursor past events it does not take; stored within `SKIP_STORE_MS`. */
  #skip(x: Exporter, chain: string, to: number): void {
    x.cursors.set(chain, to);
    if (x.unstored.has(chain)) return;
    x.unstored.add(chain);
    setTimeout(() => {
      x.unstored.delete(chain);
      const seq = x.cursors.get(chain);
      const t = x.target;
      if (seq === undefined || this.#find(t.org_id, t.id) !== x) return;
      const { settings, writer } = this.#deps.store;
      void writer
        .enqueue(() => {
          // A deleted org's settings are gone for good: nothing is written back under it.
          if (!orgDeleted(this.#deps.store, t.org_id)) settings.putSync([t.org_id, CURSOR, t.id, chain], seq);
        })
        .catch(() => {});
    }, SKIP_STORE_MS).unref();
  }

  /** Stores a target's cursor on `chain`; false when the target was removed meanwhile. */
  async #advance(x: Exporter, chain: string, to: number): Promise<boolean> {
    const t = x.target;
    if (this.#find(t.org_id, t.id) !== x) return false;
    const { settings, writer } = this.#deps.store;
    await writer.enqueue(() => {
      if (!orgDeleted(this.#deps.store, t.org_id)) settings.putSync([t.org_id, CURSOR, t.id, chain], to);
    });
    x.cursors.set(chain, to);
    return true;
  }

  async #send(x: Exporter, events: readonly AuditEvent[]): Promise<BatchResult> {
    const t = x.target;
    const token = t.token_last4 === null ? undefined : this.#deps.settings.openSecret(t.org_id, slot(t.id));
    if (token === undefined) {
      // Spec 5.8: a destination whose token is missing is skipped, never sent unauthenticated.
      // Nothing is taken: the cursor stays, and the events go once a token is given.
      x.stats.last_error = NO_TOKEN;
      x.stats.last_error_at = new Date().toISOString();
      return { status: 'failed', http_status: null, attempts: 0, events: events.length, error: NO_TOKEN };
    }
    const { body, contentType } = encodeBatch(t, events);
    const headers = deliveryHeaders(t, token, body, contentType);
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

/** Tokens are shown as their last four characters, so they are at least twice that long. */
const TOKEN_MIN = 8;
const NO_TOKEN = 'no token is configured: a destination without one is never sent to';

function isBase64Key(s: string): boolean {
  return /^[A-Za-z0-9+/]+={0,2}$/.test(s) && s.length % 4 === 0;
}

/**
 * A batch's credentials (DESIGN C, "Delivery credentials"). A `secret_header` carries the token
 * as it is. Otherwise, by kind: HEC `Authorization: Splunk <token>`; cloud_siem the Log
 * Analytics shared-key signature (the token is the workspace's key, the workspace id the URL's
 * first host label); webhook `Authorization: Bearer <token>` and `X-Service-Signature:
 * sha256=<HMAC-SHA256 of the body under the token>`, so a receiver can check what it got; OTLP
 * `Authorization: Bearer <token>`.
 */
export function deliveryHeaders(
  t: ExportTarget,
  token: string,
  body: string,
  contentType: string,
  now: Date = new Date(),
): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': contentType, 'user-agent': `govgate/${VERSION}` };
  if (t.kind === 'webhook')
    headers['x-service-signature'] = `sha256=${createHmac('sha256', token).update(body).digest('hex')}`;
  if (t.secret_header !== null) {
    headers[t.secret_header] = token;
    return headers;
  }
  if (t.kind === 'collector_hec') headers.authorization = `Splunk ${token}`;
  else if (t.kind === 'cloud_siem') {
    const date = now.toUTCString();
    const workspace = new URL(t.url).hostname.split('.', 1)[0] ?? '';
    const signed = `POST\n${Buffer.byteLength(body)}\n${contentType}\nx-ms-date:${date}\n/api/logs`;
    const signature = createHmac('sha256', Buffer.from(token, 'base64'))
      .update(signed, 'utf8')
      .digest('base64');
    headers.authorization = `SharedKey ${workspace}:${signature}`;
    headers['x-ms-date'] = date;
    headers['log-type'] = logType(t.source_name);
  } else headers.authorization = `Bearer ${token}`;
  return headers;
}

/** Log Analytics' record type: letters, digits and underscores, at most 100 characters. */
function logType(source: string): string {
  const name = source.replace(/[^A-Za-z0-9_]/g, '_').slice(0, 100);
  return name === '' ? 'govgate' : name;
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

/**
 * A stored target as the desk runs it. A field of the wrong type (a null an earlier build let a PUT
 * store) is read as its default: a null batch size would have the reader loop without end.
 */
function strip(t: ExportTarget & { record?: string }): ExportTarget {
  const { record: _r, ...rest } = t;
  const out = rest as Record<string, unknown>;
  for (const [k, d] of Object.entries(DEFAULTS)) {
    const v = out[k];
    if (d === null) continue;
    const ok = Array.isArray(d)
      ? Array.isArray(v)
      : typeof d === 'number'
        ? Number.isInteger(v) && (v as number) >= (k === 'buffer_size' ? 1 : 0)
        : typeof v === typeof d;
    if (!ok) out[k] = d;
  }
  return rest;
}

function dropUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
