import type { ChainLog } from '../audit/chain-log.js';
import type { Rollup } from '../audit/rollups.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { AgentRecord } from '../identity/types.js';
import type { Snapshot } from '../snapshot/types.js';

const DAY_MS = 86_400_000;
/** Below this many events in the window a score is reported with `confidence: "low"`. */
const CONFIDENT_AT = 20;
/** Alerts: a score this low (with at least ALERT_MIN events), or a fall of this many points. */
const LOW_SCORE = 50;
const DROP_POINTS = 20;
const ALERT_MIN = 5;

export type TrustLevel = 'trusted' | 'watch' | 'restricted' | 'unknown';

export interface TrustScore {
  readonly agent_uuid: string;
  readonly agent_id: string;
  readonly org_id: string;
  /** 0–100; null when the agent did nothing in the window. */
  readonly score: number | null;
  readonly level: TrustLevel;
  readonly confidence: 'low' | 'normal';
  readonly window: { readonly since: string; readonly until: string; readonly days: number };
  readonly events: number;
  readonly counts: {
    readonly allowed: number;
    readonly blocked: number;
    readonly errors: number;
    readonly detections: number;
  };
  readonly rates: { readonly block: number; readonly detection: number; readonly error: number };
  readonly reasons: readonly string[];
}

export interface TrustAlert {
  readonly kind: 'low_score' | 'score_drop';
  readonly agent_uuid: string;
  readonly agent_id: string;
  readonly score: number;
  readonly previous_score: number | null;
  readonly level: TrustLevel;
  readonly reasons: readonly string[];
}

/** An agent's counts in a rollup. */
function countsOf(r: Rollup, agentId: string) {
  const o = r.by_agent_outcome[agentId] ?? {};
  const events = r.by_agent[agentId] ?? 0;
  return {
    events,
    allowed: o.allow ?? 0,
    blocked: o.block ?? 0,
    errors: o.error ?? 0,
    detections: r.by_agent_detected[agentId] ?? 0,
  };
}

/**
 * The score (docs/api.md "Trust"): 100 × (1 − min(1, block rate + ½ detection rate + ¼ error
 * rate)), rates over the agent's events in the window; trusted ≥ 80, watch ≥ 50, else restricted.
 */
export function scoreOf(c: ReturnType<typeof countsOf>): {
  score: number | null;
  level: TrustLevel;
  rates: TrustScore['rates'];
  reasons: string[];
} {
  if (c.events === 0)
    return {
      score: null,
      level: 'unknown',
      rates: { block: 0, detection: 0, error: 0 },
      reasons: ['no events in the window'],
    };
  const rates = {
    block: c.blocked / c.events,
    detection: c.detections / c.events,
    error: c.errors / c.events,
  };
  const penalty = Math.min(1, rates.block + 0.5 * rates.detection + 0.25 * rates.error);
  const score = Math.round(100 * (1 - penalty));
  const reasons: string[] = [];
  const pct = (x: number) => `${Math.round(x * 100)}%`;
  if (c.blocked > 0)
    reasons.push(`${pct(rates.block)} of its events were blocked (${c.blocked} of ${c.events})`);
  if (c.detections > 0) reasons.push(`detections in ${pct(rates.detection)} of its events (${c.detections})`);
  if (c.errors > 0) reasons.push(`${pct(rates.error)} of its events ended in an error (${c.errors})`);
  if (reasons.length === 0) reasons.push(`nothing blocked or detected in ${c.events} events`);
  return {
    score,
    level: score >= 80 ? 'trusted' : score >= LOW_SCORE ? 'watch' : 'restricted',
    rates,
    reasons,
  };
}

export interface TrustDeps {
  readonly snapshot: Snapshot;
  readonly identity: IdentityRepo;
  readonly log: Pick<ChainLog, 'rollup'>;
  readonly orgExists: (id: string) => boolean;
  readonly clock?: () => number;
}

/**
 * Trust scores (spec 4.6, auditor and up): each agent's score over a window (`?days=`, 1–365,
 * default 30) from the audit trail's per-minute and per-hour counters, so a score reads
 * O(buckets), not the agent's events; and alerts for agents whose score is low or fell sharply in
 * the last 24 hours.
 */
export function registerTrustRoutes(router: Router<RouteHandler>, deps: TrustDeps): void {
  const { snapshot, identity, log, orgExists } = deps;
  const clock = deps.clock ?? Date.now;

  const windowOf = (raw: string | null) => {
    const days = raw === null ? 30 : Number(raw);
    if (!Number.isInteger(days) || days < 1 || days > 365)
      throw new ServiceError('invalid_request', 'days must be an integer from 1 to 365', { param: 'days' });
    const until = clock();
    return { days, since: until - days * DAY_MS, until };
  };
  const agentsOf = (org: string): AgentRecord[] => {
    const all: AgentRecord[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = identity.listAgents(org, 1_000, cursor);
      all.push(...page.data);
      if (page.next_cursor === null) return all;
      cursor = page.next_cursor;
    }
  };
  const score = (org: string, a: AgentRecord, r: Rollup, w: ReturnType<typeof windowOf>): TrustScore => {
    const c = countsOf(r, a.agent_id);
    const s = scoreOf(c);
    return {
      agent_uuid: a.agent_uuid,
      agent_id: a.agent_id,
      org_id: org,
      score: s.score,
      level: s.level,
      confidence: c.events < CONFIDENT_AT ? 'low' : 'normal',
      window: {
        since: new Date(w.since).toISOString(),
        until: new Date(w.until).toISOString(),
        days: w.days,
      },
      events: c.events,
      counts: { allowed: c.allowed, blocked: c.blocked, errors: c.errors, detections: c.detections },
      rates: s.rates,
      reasons: s.reasons,
    };
  };
  const rollupOf = (org: string, from: number, to?: number): Rollup =>
    log.rollup(org, {
      since: new Date(from).toISOString(),
      ...(to === undefined ? {} : { until: new Date(to - 1).toISOString() }),
    });

  router.add('GET', '/api/trust/scores', (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const w = windowOf(ctx.query.get('days'));
    const r = rollupOf(org, w.since);
    const data = agentsOf(org).map((a) => score(org, a, r, w));
    // Lowest first: the agents to look at.
    data.sort((x, y) => (x.score ?? 101) - (y.score ?? 101) || x.agent_id.localeCompare(y.agent_id));
    ctx.json(200, { data });
  });

  router.add('GET', '/api/trust/scores/:agent_uuid', (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const a = identity.getAgent(ctx.params.agent_uuid as string);
    if (a === undefined || a.org_id !== org)
      throw new ServiceError('not_found', `no agent ${ctx.params.agent_uuid} in this org`);
    const w = windowOf(ctx.query.get('days'));
    ctx.json(200, score(org, a, rollupOf(org, w.since), w));
  });

  router.add('GET', '/api/trust/alerts', (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const org = targetOrg(ctx, p, undefined, orgExists);
    const w = windowOf(ctx.query.get('days'));
    const dayAgo = w.until - DAY_MS;
    const whole = rollupOf(org, w.since);
    const before = rollupOf(org, w.since, dayAgo);
    const recent = rollupOf(org, dayAgo);
    const data: TrustAlert[] = [];
    for (const a of agentsOf(org)) {
      const all = countsOf(whole, a.agent_id);
      const s = scoreOf(all);
      if (s.score !== null && s.score < LOW_SCORE && all.events >= ALERT_MIN)
        data.push({
          kind: 'low_score',
          agent_uuid: a.agent_uuid,
          agent_id: a.agent_id,
          score: s.score,
          previous_score: null,
          level: s.level,
          reasons: s.reasons,
        });
      const last = countsOf(recent, a.agent_id);
      const prior = scoreOf(countsOf(before, a.agent_id));
      const now = scoreOf(last);
      if (
        now.score !== null &&
        prior.score !== null &&
        last.events >= ALERT_MIN &&
        prior.score - now.score >= DROP_POINTS
      )
        data.push({
          kind: 'score_drop',
          agent_uuid: a.agent_uuid,
          agent_id: a.agent_id,
          score: now.score,
          previous_score: prior.score,
          level: now.level,
          reasons: [
            `its score over the last 24 hours is ${now.score}, against ${prior.score} before`,
            ...now.reasons,
          ],
        });
    }
    ctx.json(200, {
      data,
      window: {
        since: new Date(w.since).toISOString(),
        until: new Date(w.until).toISOString(),
        days: w.days,
      },
    });
  });
}
