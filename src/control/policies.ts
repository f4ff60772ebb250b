import type { AuditSink } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import { argsDigest } from '../core/guardrails/index.js';
import {
  compilePolicy,
  type FailClosedCondition,
  type Problem,
  parseRuleSetText,
} from '../core/policy/index.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { IdentityRepo } from '../identity/repo.js';
import type { Principal } from '../identity/types.js';
import type { Snapshot } from '../snapshot/types.js';
import {
  type AssignmentRecord,
  type PolicyRecord,
  type PolicyRepo,
  type PolicyVersionRecord,
  SCOPE_TYPES,
  type ScopeType,
} from '../store/policies.js';
import { adminEvent as recordAdminEvent } from './admin-event.js';
import { type FieldSpec, strictBody } from './body.js';

export interface PoliciesDeps {
  readonly snapshot: Snapshot;
  readonly identity: IdentityRepo;
  readonly policies: PolicyRepo;
  readonly audit: AuditSink;
}

const BASE = '/api/v2/policies';
const VERSION_NO_RE = /^[1-9][0-9]{0,14}$/;

/** Something a reader of a version should know about it; only `regex_fails_closed` so far. */
interface Warning {
  rule_id: string;
  path: string;
  code: 'regex_fails_closed';
  message: string;
}

/**
 * The conditions of a stored version that fail closed (docs/policy.md, "Versions published before
 * this check"), one warning each.
 */
function warningsOf(conditions: readonly FailClosedCondition[]): Warning[] {
  return conditions.map((c) => ({
    rule_id: c.rule_id,
    path: c.path,
    code: 'regex_fails_closed',
    message:
      `${c.reason}. Published before regexes were checked, this condition fails closed (it is taken as ` +
      `${c.taken_as}): ${
        c.effect === 'allow'
          ? `the allow rule ${c.rule_id} never matches through it`
          : `the ${c.effect} rule ${c.rule_id} applies to every action its other conditions select`
      }, until a corrected version is published`,
  }));
}

/** A policy as the API shows it, with the warnings of its active version. */
function policyView(p: PolicyRecord, warnings: readonly Warning[]): Record<string, unknown> {
  return {
    id: p.id,
    name: p.name,
    description: p.description,
    org_id: p.org_id,
    created_at: p.created_at,
    active_version: p.active_version,
    draft_version: p.draft_version,
    warnings,
  };
}

/** A version as the API shows it; publication and pull-back fields only once they happened. */
function versionView(v: PolicyVersionRecord, warnings: readonly Warning[]): Record<string, unknown> {
  const out: Record<string, unknown> = {
    policy_id: v.policy_id,
    version_no: v.version_no,
    status: v.status,
    rules: v.rules,
    change_note: v.change_note,
    created_at: v.created_at,
    created_by: v.created_by,
    warnings,
  };
  if (v.updated_at !== null) {
    out.updated_at = v.updated_at;
    out.updated_by = v.updated_by;
  }
  if (v.published_at !== null) {
    out.published_at = v.published_at;
    out.published_by = v.published_by;
  }
  if (v.pulled_back_at !== null) {
    out.pulled_back_at = v.pulled_back_at;
    out.pulled_back_by = v.pulled_back_by;
  }
  return out;
}

function assignmentView(a: AssignmentRecord): AssignmentRecord {
  return a;
}

function invalidPolicy(problems: readonly Problem[]): ServiceError {
  const first = problems[0];
  const where = first === undefined || first.path === '' ? '' : `${first.path}: `;
  return new ServiceError(
    'invalid_policy',
    `the rule set has ${problems.length} problem${problems.length === 1 ? '' : 's'}` +
      (first === undefined ? '' : `; first: ${where}${first.message}`),
    { param: 'rules', problems },
  );
}

/**
 * `rules` is a whole rule set object or its YAML/JSON text. Returns the rule set as stored (the
 * parsed object); anything invalid is refused with every problem.
 */
function readRules(value: unknown): unknown {
  if (value === undefined || value === null)
    throw new ServiceError('invalid_request', 'rules is required', { param: 'rules' });
  let ruleSet: unknown = value;
  if (typeof value === 'string') {
    const parsed = parseRuleSetText(value);
    if (!parsed.ok) throw invalidPolicy(parsed.problems);
    ruleSet = parsed.value;
  }
  const compiled = compilePolicy(ruleSet);
  if (!compiled.ok) throw invalidPolicy(compiled.problems);
  return ruleSet;
}

/** A body of `{rules, …}`: `rules` is checked by readRules, the other fields strictly. */
function rulesBody<T>(
  body: Record<string, unknown>,
  spec: Readonly<Record<string, FieldSpec>>,
): { rules: unknown; rest: T } {
  const { rules, ...rest } = body;
  const fields = strictBody<T>(rest, spec);
  return { rules: readRules(rules), rest: fields };
}

function emptyBody(ctx: Ctx): void {
  strictBody(ctx.req.body.length === 0 ? {} : ctx.jsonObject(), {});
}

export function registerPolicies(router: Router<RouteHandler>, deps: PoliciesDeps): void {
  const { snapshot, identity, policies, audit } = deps;
  const orgExists = (id: string): boolean => identity.getOrg(id) !== undefined;

  const adminEvent = (orgId: string, p: Principal, type: string, details: Record<string, unknown>) =>
    recordAdminEvent(audit, orgId, p, type, details);

  /** A version with the warnings of its stored rule set (compiled once, as the gateway does). */
  const showVersion = (v: PolicyVersionRecord, orgId: string): Record<string, unknown> =>
    versionView(v, warningsOf(policies.failClosedIn(orgId, v.policy_id, v.version_no)));
  /** A policy with the warnings of its active version. */
  const showPolicy = (p: PolicyRecord): Record<string, unknown> =>
    policyView(
      p,
      p.active_version === null ? [] : warningsOf(policies.failClosedIn(p.org_id, p.id, p.active_version)),
    );

  /** The policy named in the path, in the org the request acts on (another org's is missing). */
  const policyOf = (ctx: Ctx, p: Principal): PolicyRecord => {
    const orgId = targetOrg(ctx, p, undefined, orgExists);
    const policy = policies.get(orgId, ctx.params.id as string);
    if (!policy) throw new ServiceError('not_found', `policy ${ctx.params.id} not found`);
    return policy;
  };

  const versionNoOf = (ctx: Ctx): number => {
    const raw = ctx.params.n as string;
    if (!VERSION_NO_RE.test(raw))
      throw new ServiceError('not_found', `version ${raw} of policy ${ctx.params.id} not found`);
    return Number(raw);
  };

  router.add('POST', BASE, async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const body = strictBody<{ name: string; description?: string; org_id?: string }>(ctx.jsonObject(), {
      name: { type: 'string', required: true, maxLength: 200 },
      description: { type: 'string', maxLength: 2000 },
      org_id: { type: 'string' },
    });
    const orgId = targetOrg(ctx, p, body.org_id, orgExists);
    const policy = policies.create(orgId, { name: body.name.trim(), description: body.description }, p.id);
    await adminEvent(orgId, p, 'policy_created', {
      policy_id: policy.id,
      version_no: null,
      name: policy.name,
    });
    ctx.json(201, {
      id: policy.id,
      name: policy.name,
      description: policy.description,
      org_id: policy.org_id,
      created_at: policy.created_at,
    });
  });

  router.add('GET', BASE, (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const orgId = targetOrg(ctx, p, undefined, orgExists);
    ctx.json(200, { data: policies.list(orgId).map(showPolicy), next_cursor: null });
  });

  router.add('GET', `${BASE}/:id`, (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    ctx.json(200, showPolicy(policyOf(ctx, p)));
  });

  router.add('POST', `${BASE}/:id/versions`, async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const policy = policyOf(ctx, p);
    const { rules, rest } = rulesBody<{ change_note?: string }>(ctx.jsonObject(), {
      change_note: { type: 'string', maxLength: 2000 },
    });
    const version = policies.createDraft(policy.org_id, policy.id, rules, rest.change_note ?? null, p.id);
    await adminEvent(policy.org_id, p, 'policy_version_drafted', {
      policy_id: policy.id,
      version_no: version.version_no,
      rules_sha256: argsDigest(version.rules),
    });
    ctx.json(201, showVersion(version, policy.org_id));
  });

  router.add('GET', `${BASE}/:id/versions`, (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const { org_id: orgId, id } = policyOf(ctx, p);
    ctx.json(200, { data: policies.versions(orgId, id).map((v) => showVersion(v, orgId)) });
  });

  router.add('PUT', `${BASE}/:id/versions/:n/rules`, async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const policy = policyOf(ctx, p);
    const versionNo = versionNoOf(ctx);
    const { rules } = rulesBody(ctx.jsonObject(), {});
    const version = policies.updateDraft(policy.org_id, policy.id, versionNo, rules, p.id);
    await adminEvent(policy.org_id, p, 'policy_draft_updated', {
      policy_id: policy.id,
      version_no: versionNo,
      rules_sha256: argsDigest(version.rules),
    });
    ctx.json(200, showVersion(version, policy.org_id));
  });

  router.add('POST', `${BASE}/:id/versions/:n/publish`, async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const policy = policyOf(ctx, p);
    const versionNo = versionNoOf(ctx);
    emptyBody(ctx);
    const { version, superseded } = policies.publish(policy.org_id, policy.id, versionNo, p.id);
    await adminEvent(policy.org_id, p, 'policy_published', {
      policy_id: policy.id,
      version_no: versionNo,
      superseded_version: superseded,
      rules_sha256: argsDigest(version.rules),
    });
    ctx.json(200, { ...showVersion(version, policy.org_id), superseded_version: superseded });
  });

  router.add('POST', `${BASE}/:id/versions/:n/pull-back`, async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const policy = policyOf(ctx, p);
    const versionNo = versionNoOf(ctx);
    emptyBody(ctx);
    const { version, active_version } = policies.pullBack(policy.org_id, policy.id, versionNo, p.id);
    await adminEvent(policy.org_id, p, 'policy_pulled_back', {
      policy_id: policy.id,
      version_no: versionNo,
      active_version,
    });
    ctx.json(200, { ...showVersion(version, policy.org_id), active_version });
  });

  router.add('POST', `${BASE}/:id/assignments`, async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const policy = policyOf(ctx, p);
    const body = strictBody<{ scope_type: ScopeType; scope_id: string }>(ctx.jsonObject(), {
      scope_type: { type: 'string', required: true, enum: SCOPE_TYPES },
      scope_id: { type: 'string', required: true, maxLength: 200 },
    });
    const orgId = policy.org_id;
    let scopeId = body.scope_id;
    if (body.scope_type === 'agent') {
      // Named by its agent_id (as an operator writes it everywhere else) or its UUID; recorded by
      // the UUID. Another org's agent is reported as missing, as everywhere else.
      const byUuid = identity.getAgent(scopeId);
      const agent = byUuid?.org_id === orgId ? byUuid : identity.getAgentByName(orgId, scopeId);
      if (agent === undefined)
        throw new ServiceError(
          'not_found',
          `agent ${body.scope_id} not found (give its agent_id or agent_uuid)`,
          {
            param: 'scope_id',
          },
        );
      scopeId = agent.agent_uuid;
    } else if (scopeId !== orgId) {
      throw new ServiceError('not_found', `org ${body.scope_id} not found`, { param: 'scope_id' });
    }
    const { assignment, replaced } = policies.assign(orgId, policy.id, body.scope_type, scopeId, p.id);
    await adminEvent(orgId, p, 'policy_assigned', {
      policy_id: policy.id,
      version_no: policies.get(orgId, policy.id)?.active_version ?? null,
      assignment_id: assignment.id,
      scope_type: assignment.scope_type,
      scope_id: assignment.scope_id,
      replaced_policy_id: replaced,
    });
    ctx.json(201, assignmentView(assignment));
  });

  router.add('GET', `${BASE}/:id/assignments`, (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const policy = policyOf(ctx, p);
    ctx.json(200, { data: policies.assignments(policy.org_id, policy.id).map(assignmentView) });
  });
}
