// POST /api/audit/replay, /api/audit/replay/batch and /api/audit/playground/test: what-if
// decisions against a candidate policy. Read-only: nothing is appended, approved or issued.

import { setImmediate as nextTurn } from 'node:timers/promises';

import { strictBody } from '../control/body.js';
import { ServiceError } from '../core/errors.js';
import { type ContentScan, scanTexts, stringsIn } from '../core/guardrails/index.js';
import {
  type Action,
  type CompiledPolicy,
  compilePolicy,
  evaluate,
  mergeFlags,
  type Problem,
  parseFlags,
  parseRuleSetText,
  policyFlags,
} from '../core/policy/index.js';
import { blockingStep, obligationsOf, parseAction } from '../govern/action.js';
import { detectOptions } from '../govern/governor.js';
import { isLarge, type ScanPool } from '../govern/scan-pool.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import type { PolicyRepo } from '../store/policies.js';
import { JobDropped } from '../util/job-worker.js';
import { type ReplayResult, ReplayRun } from './replay.js';
import type { AuditLog, AuditQuery } from './types.js';

export interface ReplayDeps {
  readonly snapshot: Snapshot;
  readonly log: AuditLog;
  readonly policies: PolicyRepo;
  readonly orgExists: (orgId: string) => boolean;
  /** Scans a large playground payload off the event loop (inline without it). */
  readonly scans?: ScanPool;
}

/** At most this many events are read per replay (the result says `truncated` beyond it). */
export const MAX_REPLAY_EVENTS = 100_000;
/** At most this many changes are listed per candidate. */
export const MAX_LISTED_CHANGES = 1000;
export const MAX_CANDIDATES = 10;
/** Events re-decided between two turns of the event loop. */
const YIELD_EVERY = 2000;

const ISO_DATE = /^\d{4}-\d{2}-\d{2}([T ][0-9:.]+(Z|[+-]\d{2}:?\d{2})?)?$/;

const FILTER_SPEC = {
  agent_id: { type: 'string', maxLength: 200 },
  session_id: { type: 'string', maxLength: 200 },
  event_type: { type: 'string', maxLength: 200 },
  since: { type: 'string', maxLength: 64 },
  until: { type: 'string', maxLength: 64 },
  limit: { type: 'integer', min: 1, max: MAX_LISTED_CHANGES },
  org_id: { type: 'string' },
} as const;

const SOURCE_SPEC = {
  policy_id: { type: 'string', maxLength: 200 },
  version_no: { type: 'integer', min: 1 },
} as const;

interface FilterBody {
  agent_id?: string;
  session_id?: string;
  event_type?: string;
  since?: string;
  until?: string;
  limit?: number;
  org_id?: string;
}

interface Candidate {
  readonly policy: CompiledPolicy;
  readonly policy_id: string | null;
  readonly version_no: number | null;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function invalidPolicy(problems: readonly Problem[], param: string): ServiceError {
  const first = problems[0];
  const where = first === undefined || first.path === '' ? '' : `${first.path}: `;
  return new ServiceError(
    'invalid_policy',
    `the rule set has ${problems.length} problem${problems.length === 1 ? '' : 's'}` +
      (first === undefined ? '' : `; first: ${where}${first.message}`),
    { param, problems },
  );
}

function isoBound(v: string | undefined, field: string): string | undefined {
  if (v === undefined) return undefined;
  const ms = Date.parse(v);
  if (!ISO_DATE.test(v) || Number.isNaN(ms))
    throw new ServiceError('invalid_request', `${field} must be an ISO 8601 date or time`, { param: field });
  return new Date(ms).toISOString();
}

/** The scan filters of a replay body (already strictly checked). */
function scanFilters(b: FilterBody): Omit<AuditQuery, 'cursor' | 'limit'> {
  const since = isoBound(b.since, 'since');
  const until = isoBound(b.until, 'until');
  return {
    ...(b.agent_id !== undefined ? { agent_id: b.agent_id } : {}),
    ...(b.session_id !== undefined ? { session_id: b.session_id } : {}),
    ...(b.event_type !== undefined ? { event_type: b.event_type } : {}),
    ...(since !== undefined ? { since } : {}),
    ...(until !== undefined ? { until } : {}),
  };
}

/** The action of a playground test: a govern request body (spec 2.4), parsed as /v1/govern does. */
function playgroundAction(raw: unknown): Action {
  if (!isObject(raw)) throw new ServiceError('invalid_request', 'action is required', { param: 'action' });
  const parsed = parseAction(raw, 'action.');
  const agentId = raw.agent_id ?? 'playground';
  if (typeof agentId !== 'string' || agentId === '')
    throw new ServiceError('invalid_request', 'action.agent_id must be a string', {
      param: 'action.agent_id',
    });
  const action: Action = { type: parsed.type, agent_id: agentId, payload: parsed.payload };
  if (parsed.tool) action.tool = parsed.tool;
  if (parsed.server) action.server = parsed.server;
  if (parsed.model) action.model = parsed.model;
  if (parsed.provider) action.provider = parsed.provider;
  if (parsed.args !== null) action.args = parsed.args;
  return action;
}

export function registerReplayRoutes(router: Router<RouteHandler>, deps: ReplayDeps): void {
  const { snapshot, log, policies, orgExists } = deps;

  /** `rules` (object or YAML/JSON text) or `policy_id` + `version_no` (drafts included). */
  const candidateOf = (orgId: string, src: Record<string, unknown>, where: string): Candidate => {
    const rules = src.rules;
    const hasRules = rules !== undefined && rules !== null;
    const hasRef = (src.policy_id ?? null) !== null || (src.version_no ?? null) !== null;
    if (hasRules === hasRef)
      throw new ServiceError('invalid_request', `${where}give either rules or policy_id with version_no`, {
        param: `${where}rules`,
      });
    if (hasRules) {
      let ruleSet: unknown = rules;
      if (typeof rules === 'string') {
        const parsed = parseRuleSetText(rules);
        if (!parsed.ok) throw invalidPolicy(parsed.problems, `${where}rules`);
        ruleSet = parsed.value;
      }
      const compiled = compilePolicy(ruleSet);
      if (!compiled.ok) throw invalidPolicy(compiled.problems, `${where}rules`);
      return { policy: compiled.policy, policy_id: null, version_no: null };
    }
    const policyId = src.policy_id;
    const versionNo = src.version_no;
    if (typeof policyId !== 'string' || typeof versionNo !== 'number')
      throw new ServiceError('invalid_request', `${where}policy_id and version_no go together`, {
        param: `${where}${typeof policyId !== 'string' ? 'policy_id' : 'version_no'}`,
      });
    if (!policies.get(orgId, policyId))
      throw new ServiceError('not_found', `policy ${policyId} not found`, { param: `${where}policy_id` });
    const version = policies.version(orgId, policyId, versionNo);
    if (!version)
      throw new ServiceError('not_found', `version ${versionNo} of policy ${policyId} not found`, {
        param: `${where}version_no`,
      });
    // A draft can still change, so it is compiled here rather than through the request-path cache.
    let policy: CompiledPolicy | undefined;
    if (version.status === 'draft') {
      const compiled = compilePolicy(version.rules);
      if (!compiled.ok) throw invalidPolicy(compiled.problems, `${where}version_no`);
      policy = compiled.policy;
    } else policy = policies.compiled(orgId, policyId, versionNo);
    if (policy === undefined)
      throw new ServiceError('not_found', `version ${versionNo} of policy ${policyId} not found`);
    return { policy, policy_id: policyId, version_no: versionNo };
  };

  /**
   * Scans the org's events once for every candidate. The scan gives the event loop back every
   * YIELD_EVERY events, so a long replay does not stall the request path; it stops when the
   * client goes away (undefined then).
   */
  const run = async (
    ctx: Ctx,
    orgId: string,
    filters: FilterBody,
    candidates: readonly Candidate[],
  ): Promise<ReplayResult[] | undefined> => {
    const events = log.scanEvents(orgId, scanFilters(filters), MAX_REPLAY_EVENTS + 1);
    const replay = new ReplayRun(
      candidates.map((c) => c.policy),
      { limit: filters.limit ?? MAX_LISTED_CHANGES, maxEvents: MAX_REPLAY_EVENTS },
    );
    let n = 0;
    for (const e of events) {
      if (!replay.add(e)) break;
      if (++n % YIELD_EVERY === 0) {
        await nextTurn();
        if (ctx.res.aborted) return undefined;
      }
    }
    return replay.results();
  };

  router.add('POST', '/api/audit/replay', async (ctx: Ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const { rules, ...rest } = ctx.jsonObject();
    const body = strictBody<FilterBody & { policy_id?: string; version_no?: number }>(rest, {
      ...FILTER_SPEC,
      ...SOURCE_SPEC,
    });
    const orgId = targetOrg(ctx, p, body.org_id, orgExists);
    const candidate = candidateOf(orgId, { ...body, rules }, '');
    const results = await run(ctx, orgId, body, [candidate]);
    if (results !== undefined) ctx.json(200, results[0]);
  });

  router.add('POST', '/api/audit/replay/batch', async (ctx: Ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const body = strictBody<FilterBody & { candidates: unknown[] }>(ctx.jsonObject(), {
      ...FILTER_SPEC,
      candidates: { type: 'array', required: true },
    });
    if (body.candidates.length === 0 || body.candidates.length > MAX_CANDIDATES)
      throw new ServiceError('invalid_request', `candidates must hold 1 to ${MAX_CANDIDATES} entries`, {
        param: 'candidates',
      });
    const orgId = targetOrg(ctx, p, body.org_id, orgExists);
    const names: string[] = [];
    const candidates = body.candidates.map((raw, i) => {
      const where = `candidates[${i}].`;
      if (!isObject(raw))
        throw new ServiceError('invalid_request', `candidates[${i}] must be an object`, {
          param: `candidates[${i}]`,
        });
      const { rules, ...rest } = raw;
      let src: { name?: string; policy_id?: string; version_no?: number };
      try {
        src = strictBody(rest, { name: { type: 'string', maxLength: 200 }, ...SOURCE_SPEC });
      } catch (err) {
        if (!(err instanceof ServiceError)) throw err;
        throw new ServiceError('invalid_request', `candidates[${i}]: ${err.message}`, {
          param: `${where}${err.param ?? ''}`,
        });
      }
      const c = candidateOf(orgId, { ...src, rules }, where);
      names.push(
        src.name ?? (c.policy_id !== null ? `${c.policy_id}@${c.version_no}` : `candidate ${i + 1}`),
      );
      return c;
    });
    const results = await run(ctx, orgId, body, candidates);
    if (results === undefined) return;
    ctx.json(200, {
      results: results.map((r, i) => ({ name: names[i], ...r })),
      impact: results.map((r, i) => ({
        name: names[i],
        evaluated: r.evaluated,
        changed: r.changed,
        ...r.summary,
      })),
    });
  });

  router.add('POST', '/api/audit/playground/test', async (ctx: Ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const { rules, action: rawAction, ...rest } = ctx.jsonObject();
    const body = strictBody<{ policy_id?: string; version_no?: number; org_id?: string }>(rest, {
      ...SOURCE_SPEC,
      org_id: { type: 'string' },
    });
    const orgId = targetOrg(ctx, p, body.org_id, orgExists);
    const candidate = candidateOf(orgId, { ...body, rules }, '');
    const action = playgroundAction(rawAction);
    const policy = candidate.policy;
    let flags = policyFlags(policy);
    let ignored: readonly { flag: string; reason: string }[] = [];
    const header = ctx.header('x-service-flags')?.trim();
    if (header) {
      const parsed = parseFlags(header);
      if (!parsed.ok)
        throw new ServiceError(
          'invalid_flags',
          `X-Service-Flags: ${parsed.problems.map((x) => x.message).join('; ')}`,
          { param: 'X-Service-Flags', problems: parsed.problems },
        );
      const merged = mergeFlags(policy, parsed.flags);
      flags = merged.flags;
      ignored = merged.ignored;
    }
    const texts = stringsIn(action.payload, 'payload').map((text, i) => ({ message: i, part: -1, text }));
    const opts = detectOptions(policy, flags);
    // A large payload is scanned off the event loop, as /v1/govern's is (ScanPool), within the
    // org's share of the scan queue; dropped from it if the caller leaves first (nobody to answer).
    let scan: ContentScan;
    if (deps.scans !== undefined && isLarge(texts)) {
      try {
        scan = await deps.scans.scan(texts, opts, { org: orgId, cancel: ctx.res });
      } catch (err) {
        if (err instanceof JobDropped) return;
        throw err;
      }
    } else scan = scanTexts(texts, opts);
    action.detections = scan.summary;
    const d = evaluate(policy, action, flags);
    ctx.json(200, {
      outcome: d.outcome,
      reason: d.reason,
      rule_id: d.rule_id,
      obligations: obligationsOf(d),
      details: {
        blocking_step: blockingStep(d.outcome, d.rule_id),
        mode: d.mode,
        would_outcome: d.would_outcome ?? null,
        detections: scan.summary,
        matched: d.matched,
        redact: d.redact,
        policy_id: candidate.policy_id,
        policy_version: candidate.version_no,
        flags_ignored: ignored,
      },
    });
  });
}
