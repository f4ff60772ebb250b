import { ServiceError } from '../core/errors.js';
import {
  type CompiledPolicy,
  compilePolicy,
  DEFAULT_POLICY,
  type Effect,
  type FailClosedCondition,
} from '../core/policy/index.js';
import { newId } from '../util/ids.js';
import { OrgGenerations } from '../util/org-generations.js';
import type { Store } from './db.js';

/** A policy: a name and a line of versions, at most one of them published and one a draft. */
export interface PolicyRecord {
  readonly id: string;
  readonly org_id: string;
  readonly name: string;
  readonly description: string | null;
  readonly created_at: string;
  readonly created_by: string;
  /** The version in effect (status `published`), or null. */
  readonly active_version: number | null;
  /** The open draft, or null. */
  readonly draft_version: number | null;
  /** The highest version number handed out so far (0 before the first draft). */
  readonly latest_version: number;
}

export type VersionStatus = 'draft' | 'published' | 'superseded' | 'pulled_back';

export interface PolicyVersionRecord {
  readonly policy_id: string;
  readonly version_no: number;
  readonly status: VersionStatus;
  /** The whole rule set, validated when it was stored. */
  readonly rules: unknown;
  readonly change_note: string | null;
  readonly created_at: string;
  readonly created_by: string;
  readonly updated_at: string | null;
  readonly updated_by: string | null;
  readonly published_at: string | null;
  readonly published_by: string | null;
  readonly pulled_back_at: string | null;
  readonly pulled_back_by: string | null;
}

export type ScopeType = 'org' | 'agent';
export const SCOPE_TYPES: readonly ScopeType[] = ['org', 'agent'];

/** Which policy applies to a scope. One per scope: a newer assignment replaces the older one. */
export interface AssignmentRecord {
  readonly id: string;
  readonly org_id: string;
  readonly policy_id: string;
  readonly scope_type: ScopeType;
  readonly scope_id: string;
  readonly created_at: string;
  readonly created_by: string;
}

/** The policy the request path applies to one agent, and where it came from. */
export interface EffectivePolicy {
  readonly policy: CompiledPolicy;
  readonly policy_id: string | null;
  readonly version_no: number | null;
}

const DEFAULT_EFFECTIVE: EffectivePolicy = Object.freeze({
  policy: DEFAULT_POLICY,
  policy_id: null,
  version_no: null,
});

const MAX_MEMO_AGENTS = 100_000;
const MAX_COMPILED = 10_000;
const MAX_VERSION = Number.MAX_SAFE_INTEGER;

interface OrgMemo {
  generation: number;
  readonly agents: Map<string, EffectivePolicy>;
}

/** A stored version with conditions that fail closed, as compiled by this process. */
interface FailingVersion {
  readonly org_id: string;
  readonly policy_id: string;
  readonly version_no: number;
  readonly conditions: readonly FailClosedCondition[];
}

export interface PolicyRepoOptions {
  /** Told once per version (per process) that holds conditions that fail closed, when it is compiled. */
  warn?: (msg: string, fields: Record<string, unknown>) => void;
}

/**
 * Policies, their versions and assignments in LMDB:
 * `policies` [org, policy] → PolicyRecord, `policyVersions` [org, policy, n] → PolicyVersionRecord,
 * `policyAssignments` [org, scope_type, scope_id] → AssignmentRecord.
 *
 * `effective` is on the request path: compiled policies are cached per (policy, version) and the
 * resolution per (org, agent) is memoized until `generation` moves (every publish, pull-back and
 * assignment), so a published version takes effect on the next request.
 */
export class PolicyRepo {
  generation = 0;
  /** Changes per org (`generation` counts them all): see OrgGenerations. */
  readonly orgGenerations = new OrgGenerations();
  private readonly compiledCache = new Map<string, CompiledPolicy>();
  private readonly memo = new Map<string, OrgMemo>();
  /** Versions compiled with conditions that fail closed, by org and cache key; each warned of once. */
  private readonly failing = new Map<string, FailingVersion>();

  constructor(
    private readonly store: Store,
    private readonly clock: () => Date = () => new Date(),
    private readonly options: PolicyRepoOptions = {},
  ) {}

  private now(): string {
    return this.clock().toISOString();
  }

  private bump(orgId: string): void {
    this.generation++;
    this.orgGenerations.bump(orgId);
  }

  // ---- policies
  get(orgId: string, policyId: string): PolicyRecord | undefined {
    return this.store.policies.get([orgId, policyId]);
  }

  /** The org's policies, oldest first. */
  list(orgId: string): PolicyRecord[] {
    const out: PolicyRecord[] = [];
    for (const { value } of this.store.policies.getRange({ start: [orgId], end: [orgId, '\uffff'] })) {
      out.push(value as PolicyRecord);
    }
    return out.sort((a, b) =>
      a.created_at === b.created_at ? (a.id < b.id ? -1 : 1) : a.created_at < b.created_at ? -1 : 1,
    );
  }

  /** 409 when the org has a policy of that name (case-insensitive). */
  create(
    orgId: string,
    input: { name: string; description?: string | undefined },
    actor: string,
  ): PolicyRecord {
    const record: PolicyRecord = {
      id: newId('pol_', 16),
      org_id: orgId,
      name: input.name,
      description: input.description ?? null,
      created_at: this.now(),
      created_by: actor,
      active_version: null,
      draft_version: null,
      latest_version: 0,
    };
    const lower = input.name.toLowerCase();
    this.store.root.transactionSync(() => {
      for (const { value } of this.store.policies.getRange({ start: [orgId], end: [orgId, '\uffff'] })) {
        if ((value as PolicyRecord).name.toLowerCase() === lower)
          throw new ServiceError('conflict', `a policy named "${input.name}" exists in this org`, {
            param: 'name',
          });
      }
      this.store.policies.putSync([orgId, record.id], record);
    });
    return record;
  }

  // ---- versions
  version(orgId: string, policyId: string, versionNo: number): PolicyVersionRecord | undefined {
    return this.store.policyVersions.get([orgId, policyId, versionNo]);
  }

  /** Every version of the policy, oldest first. */
  versions(orgId: string, policyId: string): PolicyVersionRecord[] {
    const out: PolicyVersionRecord[] = [];
    for (const { value } of this.store.policyVersions.getRange({
      start: [orgId, policyId, 0],
      end: [orgId, policyId, MAX_VERSION],
    })) {
      out.push(value as PolicyVersionRecord);
    }
    return out;
  }

  private mustGet(orgId: string, policyId: string): PolicyRecord {
    const policy = this.get(orgId, policyId);
    if (!policy) throw new ServiceError('not_found', `policy ${policyId} not found`);
    return policy;
  }

  private mustGetVersion(orgId: string, policyId: string, versionNo: number): PolicyVersionRecord {
    const v = this.version(orgId, policyId, versionNo);
    if (!v) throw new ServiceError('not_found', `version ${versionNo} of policy ${policyId} not found`);
    return v;
  }

  /** Opens a draft with an already validated rule set; 409 while another draft is open. */
  createDraft(
    orgId: string,
    policyId: string,
    rules: unknown,
    changeNote: string | null,
    actor: string,
  ): PolicyVersionRecord {
    return this.store.root.transactionSync(() => {
      const policy = this.mustGet(orgId, policyId);
      if (policy.draft_version !== null)
        throw new ServiceError(
          'conflict',
          `policy ${policyId} already has an open draft (version ${policy.draft_version}); edit or publish it`,
        );
      const versionNo = policy.latest_version + 1;
      const version: PolicyVersionRecord = {
        policy_id: policyId,
        version_no: versionNo,
        status: 'draft',
        rules,
        change_note: changeNote,
        created_at: this.now(),
        created_by: actor,
        updated_at: null,
        updated_by: null,
        published_at: null,
        published_by: null,
        pulled_back_at: null,
        pulled_back_by: null,
      };
      this.store.policyVersions.putSync([orgId, policyId, versionNo], version);
      this.store.policies.putSync([orgId, policyId], {
        ...policy,
        draft_version: versionNo,
        latest_version: versionNo,
      });
      return version;
    });
  }

  /** Replaces a draft's rule set (already validated); 409 when the version is not a draft. */
  updateDraft(
    orgId: string,
    policyId: string,
    versionNo: number,
    rules: unknown,
    actor: string,
  ): PolicyVersionRecord {
    return this.store.root.transactionSync(() => {
      this.mustGet(orgId, policyId);
      const v = this.mustGetVersion(orgId, policyId, versionNo);
      if (v.status !== 'draft')
        throw new ServiceError('conflict', `version ${versionNo} is ${v.status}; only a draft can be edited`);
      const updated: PolicyVersionRecord = { ...v, rules, updated_at: this.now(), updated_by: actor };
      this.store.policyVersions.putSync([orgId, policyId, versionNo], updated);
      return updated;
    });
  }

  /**
   * Publishes a draft: it becomes the active version and the previously published one becomes
   * `superseded`. The rule set is compiled here, once, for the request path.
   */
  publish(
    orgId: string,
    policyId: string,
    versionNo: number,
    actor: string,
  ): { version: PolicyVersionRecord; superseded: number | null } {
    let compiled: CompiledPolicy | undefined;
    const result = this.store.root.transactionSync(() => {
      const policy = this.mustGet(orgId, policyId);
      const v = this.mustGetVersion(orgId, policyId, versionNo);
      if (v.status !== 'draft')
        throw new ServiceError(
          'conflict',
          `version ${versionNo} is ${v.status}; only a draft can be published`,
        );
      const c = compilePolicy(v.rules);
      if (!c.ok)
        throw new ServiceError('invalid_policy', 'the stored rule set no longer compiles', {
          problems: c.problems,
        });
      compiled = c.policy;
      const at = this.now();
      const previous = policy.active_version;
      if (previous !== null) {
        const old = this.version(orgId, policyId, previous);
        if (old)
          this.store.policyVersions.putSync([orgId, policyId, previous], { ...old, status: 'superseded' });
      }
      const published: PolicyVersionRecord = {
        ...v,
        status: 'published',
        published_at: at,
        published_by: actor,
      };
      this.store.policyVersions.putSync([orgId, policyId, versionNo], published);
      this.store.policies.putSync([orgId, policyId], {
        ...policy,
        active_version: versionNo,
        draft_version: null,
      });
      return { version: published, superseded: previous };
    });
    if (compiled) this.compiledCache.set(cacheKey(policyId, versionNo), compiled);
    if (result.superseded !== null) this.compiledCache.delete(cacheKey(policyId, result.superseded));
    this.bump(orgId);
    return result;
  }

  /**
   * Pulls back the published version: it becomes `pulled_back` and the newest earlier superseded
   * version is published again; with none, the policy has no active version.
   */
  pullBack(
    orgId: string,
    policyId: string,
    versionNo: number,
    actor: string,
  ): { version: PolicyVersionRecord; active_version: number | null } {
    const result = this.store.root.transactionSync(() => {
      const policy = this.mustGet(orgId, policyId);
      const v = this.mustGetVersion(orgId, policyId, versionNo);
      if (v.status !== 'published')
        throw new ServiceError(
          'conflict',
          `version ${versionNo} is ${v.status}; only the published version can be pulled back`,
        );
      let restored: PolicyVersionRecord | undefined;
      for (const { value } of this.store.policyVersions.getRange({
        start: [orgId, policyId, versionNo - 1],
        end: [orgId, policyId, 0],
        reverse: true,
      })) {
        const candidate = value as PolicyVersionRecord;
        if (candidate.status === 'superseded') {
          restored = candidate;
          break;
        }
      }
      const pulled: PolicyVersionRecord = {
        ...v,
        status: 'pulled_back',
        pulled_back_at: this.now(),
        pulled_back_by: actor,
      };
      this.store.policyVersions.putSync([orgId, policyId, versionNo], pulled);
      if (restored)
        this.store.policyVersions.putSync([orgId, policyId, restored.version_no], {
          ...restored,
          status: 'published',
        });
      const active = restored?.version_no ?? null;
      this.store.policies.putSync([orgId, policyId], { ...policy, active_version: active });
      return { version: pulled, active_version: active };
    });
    this.compiledCache.delete(cacheKey(policyId, versionNo));
    this.bump(orgId);
    // Compile the restored version now, so the next request does not pay for it.
    if (result.active_version !== null) this.compiled(orgId, policyId, result.active_version);
    return result;
  }

  // ---- assignments
  /** Assigns the policy to a scope (checked by the caller), replacing that scope's assignment. */
  assign(
    orgId: string,
    policyId: string,
    scopeType: ScopeType,
    scopeId: string,
    actor: string,
  ): { assignment: AssignmentRecord; replaced: string | null } {
    const assignment: AssignmentRecord = {
      id: newId('pas_', 16),
      org_id: orgId,
      policy_id: policyId,
      scope_type: scopeType,
      scope_id: scopeId,
      created_at: this.now(),
      created_by: actor,
    };
    const replaced = this.store.root.transactionSync(() => {
      this.mustGet(orgId, policyId);
      const key = [orgId, scopeType, scopeId];
      const before = this.store.policyAssignments.get(key) as AssignmentRecord | undefined;
      this.store.policyAssignments.putSync(key, assignment);
      return before?.policy_id ?? null;
    });
    this.bump(orgId);
    return { assignment, replaced };
  }

  /** The scopes this policy is currently assigned to. */
  /** Every assignment of the org (org and agent scope), for the sidecar snapshot. */
  allAssignments(orgId: string): AssignmentRecord[] {
    const out: AssignmentRecord[] = [];
    for (const { value } of this.store.policyAssignments.getRange({ start: [orgId], end: [orgId, '\uffff'] }))
      out.push(value as AssignmentRecord);
    return out;
  }

  assignments(orgId: string, policyId: string): AssignmentRecord[] {
    const out: AssignmentRecord[] = [];
    for (const { value } of this.store.policyAssignments.getRange({
      start: [orgId],
      end: [orgId, '\uffff'],
    })) {
      const a = value as AssignmentRecord;
      if (a.policy_id === policyId) out.push(a);
    }
    return out;
  }

  // ---- request path
  /**
   * The compiled rule set of one version, compiled at most once while it stays cached. Undefined
   * when the version does not exist.
   */
  compiled(orgId: string, policyId: string, versionNo: number): CompiledPolicy | undefined {
    const key = cacheKey(policyId, versionNo);
    const hit = this.compiledCache.get(key);
    if (hit !== undefined) return hit;
    const v = this.version(orgId, policyId, versionNo);
    if (!v) return undefined;
    // Published before the linear-time regex engine, a version may hold a regex it refuses: that
    // condition fails closed rather than the whole version (a draft is still refused at publish).
    const c = compilePolicy(v.rules, { stored: v.status !== 'draft' });
    // A stored version that no longer compiles is a bug; failing the request beats a silent
    // fallback to a looser policy.
    if (!c.ok) throw new Error(`policy ${policyId} version ${versionNo} does not compile`);
    if (this.compiledCache.size >= MAX_COMPILED) this.compiledCache.clear();
    this.compiledCache.set(key, c.policy);
    if (c.policy.failClosed.length > 0) this.noteFailing(orgId, policyId, versionNo, c.policy.failClosed);
    return c.policy;
  }

  /**
   * Records a version with conditions that fail closed and warns of it the first time this process
   * compiles it (a version evicted from the cache and compiled again is not warned of again).
   */
  private noteFailing(
    orgId: string,
    policyId: string,
    versionNo: number,
    conditions: readonly FailClosedCondition[],
  ): void {
    const key = `${orgId}\0${cacheKey(policyId, versionNo)}`;
    if (this.failing.has(key)) return;
    this.failing.set(key, { org_id: orgId, policy_id: policyId, version_no: versionNo, conditions });
    this.options.warn?.('policy version has conditions that fail closed', {
      org_id: orgId,
      policy_id: policyId,
      version_no: versionNo,
      conditions: conditions.map((c) => ({ rule_id: c.rule_id, path: c.path, reason: c.reason })),
    });
  }

  /**
   * The conditions that fail closed in a stored version (empty for a draft, which is refused at
   * publish instead, and for a version that does not exist).
   */
  failClosedIn(orgId: string, policyId: string, versionNo: number): readonly FailClosedCondition[] {
    const v = this.version(orgId, policyId, versionNo);
    if (v === undefined || v.status === 'draft') return [];
    return this.compiled(orgId, policyId, versionNo)?.failClosed ?? [];
  }

  /**
   * Conditions that fail closed in the active versions this process has compiled, by the effect of
   * their rule (for the metric; a superseded or pulled-back version no longer counts).
   */
  failClosedActive(): Map<Effect, number> {
    const out = new Map<Effect, number>();
    for (const f of this.failing.values()) {
      if (this.get(f.org_id, f.policy_id)?.active_version !== f.version_no) continue;
      for (const c of f.conditions) out.set(c.effect, (out.get(c.effect) ?? 0) + 1);
    }
    return out;
  }

  /**
   * The policy for one agent: the agent's assignment when its policy has an active version, else
   * the org's, else DEFAULT_POLICY. Memoized per (org, agent) until the org's generation moves.
   */
  effective(orgId: string, agentUuid: string): EffectivePolicy {
    // The org's own changes only: another org's publish does not empty this org's memo.
    const generation = this.orgGenerations.of(orgId);
    let memo = this.memo.get(orgId);
    if (memo === undefined) {
      memo = { generation, agents: new Map() };
      this.memo.set(orgId, memo);
    } else if (memo.generation !== generation) {
      memo.generation = generation;
      memo.agents.clear();
    }
    const hit = memo.agents.get(agentUuid);
    if (hit !== undefined) return hit;
    const result =
      this.fromAssignment(orgId, 'agent', agentUuid) ??
      this.fromAssignment(orgId, 'org', orgId) ??
      DEFAULT_EFFECTIVE;
    if (memo.agents.size >= MAX_MEMO_AGENTS) memo.agents.clear();
    memo.agents.set(agentUuid, result);
    return result;
  }

  private fromAssignment(orgId: string, scopeType: ScopeType, scopeId: string): EffectivePolicy | undefined {
    const a = this.store.policyAssignments.get([orgId, scopeType, scopeId]) as AssignmentRecord | undefined;
    if (!a) return undefined;
    const versionNo = this.get(orgId, a.policy_id)?.active_version ?? null;
    if (versionNo === null) return undefined;
    const policy = this.compiled(orgId, a.policy_id, versionNo);
    return policy === undefined ? undefined : { policy, policy_id: a.policy_id, version_no: versionNo };
  }
}

function cacheKey(policyId: string, versionNo: number): string {
  return `${policyId}#${versionNo}`;
}
