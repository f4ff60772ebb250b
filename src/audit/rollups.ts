import { detected } from './severity.js';
import type { AuditEvent, AuditOverview } from './types.js';

/**
 * Overview counters of one minute or one hour of an org chain, kept in memory by the writer and
 * stored with the org's rollup mark once a second (ChainLog `rollupFlushMs`), so `overview` reads
 * O(buckets) records instead of every event. Maps are null-prototype objects: agent ids and event
 * types are caller data.
 */
export interface Rollup {
  events: number;
  by_outcome: Record<string, number>;
  by_type: Record<string, number>;
  by_agent: Record<string, number>;
  by_provider: Record<string, number>;
  /** Per agent, by outcome (trust scores). */
  by_agent_outcome: Record<string, Record<string, number>>;
  /** Per agent, events where a detector found something or a rule asked for an alert. */
  by_agent_detected: Record<string, number>;
  prompt: number;
  completion: number;
  total: number;
  cost: number;
}

export const MINUTE_MS = 60_000;
export const HOUR_MS = 3_600_000;

/** The start of the bucket of `size` ms holding `ms`. */
export function bucketStart(ms: number, size: number): number {
  return Math.floor(ms / size) * size;
}

export function emptyRollup(): Rollup {
  return {
    events: 0,
    by_outcome: Object.create(null),
    by_type: Object.create(null),
    by_agent: Object.create(null),
    by_provider: Object.create(null),
    by_agent_outcome: Object.create(null),
    by_agent_detected: Object.create(null),
    prompt: 0,
    completion: 0,
    total: 0,
    cost: 0,
  };
}

/** A rollup as read back from the store (plain objects) made safe to add to. */
export function reviveRollup(raw: unknown): Rollup {
  const r = emptyRollup();
  if (typeof raw === 'object' && raw !== null) mergeRollup(r, raw as Rollup);
  return r;
}

function bump(map: Record<string, number>, key: string | null | undefined, n = 1): void {
  if (typeof key !== 'string') return;
  map[key] = (map[key] ?? 0) + n;
}

function num(x: unknown): number {
  return typeof x === 'number' && Number.isFinite(x) ? x : 0;
}

export function addEvent(
  r: Rollup,
  e: Pick<
    AuditEvent,
    'outcome' | 'event_type' | 'agent_id' | 'provider' | 'usage' | 'cost' | 'detections' | 'details'
  >,
): void {
  r.events++;
  bump(r.by_outcome, e.outcome);
  bump(r.by_type, e.event_type);
  const agent = e.agent_id;
  if (typeof agent === 'string') {
    bump(r.by_agent, agent);
    bump((r.by_agent_outcome[agent] ??= Object.create(null) as Record<string, number>), e.outcome);
    if (detected(e)) bump(r.by_agent_detected, agent);
  }
  bump(r.by_provider, e.provider);
  const u = e.usage;
  if (u !== null && u !== undefined && typeof u === 'object') {
    r.prompt += num(u.prompt_tokens);
    r.completion += num(u.completion_tokens);
    r.total += num(u.total_tokens);
  }
  r.cost += num(e.cost);
}

function mergeMap(into: Record<string, number>, from: unknown): void {
  if (typeof from !== 'object' || from === null) return;
  for (const [k, v] of Object.entries(from)) bump(into, k, num(v));
}

export function mergeRollup(into: Rollup, from: Rollup): void {
  into.events += num(from.events);
  mergeMap(into.by_outcome, from.by_outcome);
  mergeMap(into.by_type, from.by_type);
  mergeMap(into.by_agent, from.by_agent);
  mergeMap(into.by_provider, from.by_provider);
  mergeMap(into.by_agent_detected, from.by_agent_detected);
  const nested = from.by_agent_outcome;
  if (typeof nested === 'object' && nested !== null)
    for (const [agent, outcomes] of Object.entries(nested))
      mergeMap((into.by_agent_outcome[agent] ??= Object.create(null) as Record<string, number>), outcomes);
  into.prompt += num(from.prompt);
  into.completion += num(from.completion);
  into.total += num(from.total);
  into.cost += num(from.cost);
}

function plain(map: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(map));
}

export function toOverview(r: Rollup): AuditOverview {
  return {
    events: r.events,
    by_outcome: plain(r.by_outcome),
    by_type: plain(r.by_type),
    by_agent: plain(r.by_agent),
    by_provider: plain(r.by_provider),
    tokens: { prompt: r.prompt, completion: r.completion, total: r.total },
    // Sums of small binary fractions drift; 1e-9 of a currency unit is far below any price.
    cost: Math.round(r.cost * 1e9) / 1e9,
  };
}

/**
 * Splits the time range [a, b) (epoch ms, ±Infinity for open ends) into what overview reads:
 * partial minutes at the edges (scanned event by event), whole minutes and whole hours (rollups).
 */
export interface RangePlan {
  scans: Array<[number, number]>;
  minutes: Array<[number, number]>;
  hours: Array<[number, number]>;
}

export function planRange(a: number, b: number): RangePlan {
  const plan: RangePlan = { scans: [], minutes: [], hours: [] };
  if (!(a < b)) return plan;
  const m0 = Number.isFinite(a) ? Math.ceil(a / MINUTE_MS) * MINUTE_MS : a;
  const m1 = Number.isFinite(b) ? bucketStart(b, MINUTE_MS) : b;
  if (!(m0 < m1)) {
    plan.scans.push([a, b]);
    return plan;
  }
  if (a < m0) plan.scans.push([a, m0]);
  const h0 = Number.isFinite(m0) ? Math.ceil(m0 / HOUR_MS) * HOUR_MS : m0;
  const h1 = Number.isFinite(m1) ? bucketStart(m1, HOUR_MS) : m1;
  if (!(h0 < h1)) {
    plan.minutes.push([m0, m1]);
  } else {
    if (m0 < h0) plan.minutes.push([m0, h0]);
    plan.hours.push([h0, h1]);
    if (h1 < m1) plan.minutes.push([h1, m1]);
  }
  if (m1 < b) plan.scans.push([m1, b]);
  return plan;
}
