import type { DetectOptions } from '../core/detect/index.js';
import { ServiceError } from '../core/errors.js';
import {
  type ActionIdentity,
  actionIdentity,
  type ContentScan,
  NULL_ARGS_SHA256,
  scanTexts,
  type TextItem,
} from '../core/guardrails/index.js';
import {
  type BehaviorType,
  type CompiledPolicy,
  type Decision,
  type EffectiveFlags,
  evaluate,
  mergeFlags,
  parseFlags,
  policyFlags,
} from '../core/policy/index.js';
import type { EffectivePolicy, Snapshot } from '../snapshot/types.js';
import type { JobCancel } from '../util/job-worker.js';
import { isLarge, type ScanPool } from './scan-pool.js';

export interface GovernAgent {
  readonly orgId: string;
  readonly agentId: string;
  readonly agentUuid: string;
}

export interface GovernInput {
  readonly type: BehaviorType;
  readonly tool?: string | null;
  readonly server?: string | null;
  readonly model?: string | null;
  readonly provider?: string | null;
  readonly args?: unknown;
  readonly payload?: unknown;
  /**
   * What else identifies the call for approvals (see FingerprintInput.context). A function is
   * called only when an approval is looked up: the gateway's model calls need no fingerprint
   * otherwise, and theirs hashes the whole prompt.
   */
  readonly context?: unknown;
  /** Content to scan (prompt messages, tool arguments' strings…). */
  readonly texts: readonly TextItem[];
  readonly flagsHeader: string | undefined;
  /** The call's pipeline, recorded when it consumes an approval. */
  readonly pipelineId?: string;
  /**
   * The caller's request (its server response), when the call dies with it: a large call still
   * waiting for the scan worker when its client goes away is dropped (decideOrDefer rejects with
   * JobDropped) instead of being scanned and decided for nobody.
   */
  readonly cancel?: JobCancel;
}

/** A call with a lazy context that needed no approval: no fingerprint (its args are null). */
const UNUSED_IDENTITY: ActionIdentity = { fingerprint: '', argsSha256: NULL_ARGS_SHA256 };

/** Approval bookkeeping the governor needs; the approval store implements it. */
export interface ApprovalGate {
  /** The approved, unexpired approval `consume` would take now (read only), if there is one. */
  granted(
    orgId: string,
    agentUuid: string,
    fingerprint: string,
    opts?: { minTier?: 'standard' | 'signed' },
  ): { id: string; decided_by: string | null } | undefined;
  /** Consumes an approved, unexpired approval of this fingerprint (once), if there is one. */
  consume(
    orgId: string,
    agentUuid: string,
    fingerprint: string,
    opts?: { pipelineId?: string | null; minTier?: 'standard' | 'signed' },
  ): { id: string; decided_by: string | null } | undefined;
}

/**
 * Approvals kept elsewhere (a sidecar's: at the control plane). `consume` takes an approved,
 * unexpired approval of the action, once, or answers undefined (none, or it cannot be reached:
 * the call then still needs one).
 */
export interface RemoteApprovals {
  consume(
    orgId: string,
    agentUuid: string,
    fingerprint: string,
    opts: { pipelineId: string | null; minTier: 'standard' | 'signed' },
  ): Promise<{ id: string; decided_by: string | null } | undefined>;
}

export interface GovernResult {
  readonly decision: Decision;
  readonly scan: ContentScan;
  readonly policy: CompiledPolicy;
  readonly policyRef: EffectivePolicy;
  readonly flags: EffectiveFlags;
  readonly ignoredFlags: readonly { flag: string; reason: string }[];
  readonly rawFlags: string | null;
  /** The action's approval fingerprint; '' when the input's context is lazy and no approval was needed. */
  readonly fingerprint: string;
  /** SHA-256 of the canonical args (a mandate's `cap.args_sha256`), from the same serialization. */
  readonly argsSha256: string;
  /** Set when a needs_approval decision was turned into allow by a granted approval. */
  readonly consumedApproval: string | null;
}

/** Scans of one large call before it fails closed, when its policy's detectors keep changing. */
const MAX_RESCANS = 3;

function sameDetectors(a: DetectOptions, b: DetectOptions): boolean {
  return a.pii === b.pii && a.secrets === b.secrets && a.injection === b.injection && a.unicode === b.unicode;
}

/** What a decision is made under: the policy in force, the effective flags, the detectors to run. */
interface Setting {
  readonly policyRef: EffectivePolicy;
  readonly flags: EffectiveFlags;
  readonly ignoredFlags: readonly { flag: string; reason: string }[];
  readonly raw: string | null;
  readonly detect: DetectOptions;
}

/** Which detectors run: the ones acting on findings, the ones rules read, all in lockdown. */
export function detectOptions(policy: CompiledPolicy, flags: EffectiveFlags): DetectOptions {
  const lockdown = flags.mode === 'lockdown';
  const d = policy.detectors;
  const read = policy.ruleDetections;
  return {
    pii: lockdown || flags.pii !== 'off' || read.has('pii'),
    secrets: lockdown || flags.secrets !== 'off' || read.has('secrets'),
    injection: lockdown || d.injection.action !== 'off' || read.has('injection'),
    unicode: lockdown || d.unicode.action !== 'off' || read.has('unicode'),
  };
}

/**
 * One decision: the agent's policy, the flags merged under its locks, one detection pass over
 * the content, the policy evaluated, and a granted approval consumed when the policy asks for one.
 * Synchronous and I/O-free apart from the snapshot and approval lookups.
 */
export class Governor {
  /** `scanner` takes the content scan of large calls off the event loop (decideOrDefer). */
  constructor(
    private readonly snapshot: Snapshot,
    private readonly approvals: ApprovalGate,
    private readonly scanner?: ScanPool,
    /** A sidecar's approvals, consumed at the control plane (decideOrDefer then may await it). */
    private readonly remote?: RemoteApprovals,
  ) {}

  /**
   * `checks` are the caller's steps after the policy (a budget, a redaction that cannot be made):
   * they see the result as it would be with a granted approval, and may refuse it. An approval
   * is consumed only when the call is still allowed after them, so a refused call never spends
   * the human's approval of it.
   */
  decide(
    agent: GovernAgent,
    input: GovernInput,
    checks?: (result: GovernResult) => GovernResult,
  ): GovernResult {
    const r = this.#now(agent, input, checks);
    if (r instanceof Promise)
      throw new Error('a governor with remote approvals decides through decideOrDefer');
    return r;
  }

  #now(
    agent: GovernAgent,
    input: GovernInput,
    checks: ((result: GovernResult) => GovernResult) | undefined,
  ): GovernResult | Promise<GovernResult> {
    const setting = this.#setting(agent, input);
    return this.#decided(agent, input, setting, scanTexts(input.texts, setting.detect), checks);
  }

  /**
   * decide(), or, when the content is large (isLarge) and a ScanPool was given, a promise of it
   * with the content scanned off the event loop. The decision is made after the scan, in one
   * turn with the approval lookup and its consumption, under the policy and flags in force then:
   * a policy published while the call waited for the worker applies to it. If that policy runs
   * other detectors than the scan did, the content is scanned again (at most MAX_RESCANS times,
   * then the call fails closed). Ordinary calls get their result without a promise. The promise
   * rejects when the scan queue refuses the call (429 or 503, ScanPool), and with JobDropped when
   * `input.cancel` is aborted while the call waits for its turn.
   */
  decideOrDefer(
    agent: GovernAgent,
    input: GovernInput,
    checks?: (result: GovernResult) => GovernResult,
  ): GovernResult | Promise<GovernResult> {
    const scanner = this.scanner;
    if (scanner === undefined || !isLarge(input.texts)) return this.#now(agent, input, checks);
    return this.#deferred(scanner, agent, input, checks);
  }

  async #deferred(
    scanner: ScanPool,
    agent: GovernAgent,
    input: GovernInput,
    checks: ((result: GovernResult) => GovernResult) | undefined,
  ): Promise<GovernResult> {
    let detect = this.#setting(agent, input).detect;
    const caller = { org: agent.orgId, cancel: input.cancel };
    for (let scans = 0; scans <= MAX_RESCANS; scans++) {
      const scan = await scanner.scan(input.texts, detect, caller);
      // Read again now, in the turn that decides: the policy may have changed during the scan.
      const setting = this.#setting(agent, input);
      if (sameDetectors(setting.detect, detect)) return this.#decided(agent, input, setting, scan, checks);
      detect = setting.detect;
    }
    throw new ServiceError(
      'unavailable',
      'the policy kept changing while this call was being scanned; retry the call',
    );
  }

  /** The policy in force and the flags merged under its locks; throws on a bad flags header. */
  #setting(agent: GovernAgent, input: GovernInput): Setting {
    const policyRef = this.snapshot.policy(agent.orgId, agent.agentUuid);
    const policy = policyRef.policy;
    let flags = policyFlags(policy);
    let ignoredFlags: readonly { flag: string; reason: string }[] = [];
    const raw = input.flagsHeader?.trim() ? input.flagsHeader.trim() : null;
    if (raw !== null) {
      const parsed = parseFlags(raw);
      if (!parsed.ok) {
        throw new ServiceError(
          'invalid_flags',
          `X-Service-Flags: ${parsed.problems.map((p) => p.message).join('; ')}`,
          {
            param: 'X-Service-Flags',
            problems: parsed.problems,
          },
        );
      }
      const merged = mergeFlags(policy, parsed.flags);
      flags = merged.flags;
      ignoredFlags = merged.ignored;
    }
    return { policyRef, flags, ignoredFlags, raw, detect: detectOptions(policy, flags) };
  }

  #decided(
    agent: GovernAgent,
    input: GovernInput,
    setting: Setting,
    scan: ContentScan,
    checks: ((result: GovernResult) => GovernResult) | undefined,
  ): GovernResult | Promise<GovernResult> {
    const { policyRef, flags, ignoredFlags, raw } = setting;
    const policy = policyRef.policy;
    const tool = input.tool ?? null;
    // Every member present (undefined when absent: rules read members, never their presence):
    // one shape for the compiled rules, and no spreads (V8's slow path on Node 20, docs/ops.md).
    let decision = evaluate(
      policy,
      {
        type: input.type,
        agent_id: agent.agentId,
        tool: tool ?? undefined,
        server: input.server || undefined,
        model: input.model || undefined,
        provider: input.provider || undefined,
        args: input.args,
        payload: input.payload,
        detections: scan.summary,
      },
      flags,
    );
    const lazy = typeof input.context === 'function';
    const { fingerprint, argsSha256 } =
      lazy && decision.outcome !== 'needs_approval'
        ? UNUSED_IDENTITY
        : actionIdentity({
            org_id: agent.orgId,
            agent_id: agent.agentId,
            type: input.type,
            tool,
            args: input.args ?? null,
            context: lazy ? (input.context as () => unknown)() : input.context,
          });
    const asked = decision;
    // A rule that asks for a signed approval is satisfied by a signed one only.
    const minTier = decision.tier ?? 'standard';
    const granted =
      decision.outcome === 'needs_approval'
        ? this.approvals.granted(agent.orgId, agent.agentUuid, fingerprint, { minTier })
        : undefined;
    if (granted) decision = approvedAs(asked, granted);
    let result: GovernResult = {
      decision,
      scan,
      policy,
      policyRef,
      flags,
      ignoredFlags,
      rawFlags: raw,
      fingerprint,
      argsSha256,
      consumedApproval: null,
    };
    if (!granted && asked.outcome === 'needs_approval' && this.remote !== undefined)
      return this.#remoteApproval(agent, input.pipelineId ?? null, result, minTier, checks);
    if (checks) result = checks(result);
    if (!granted || result.decision.outcome !== 'allow') return result;
    const consumed = this.approvals.consume(agent.orgId, agent.agentUuid, fingerprint, {
      pipelineId: input.pipelineId ?? null,
      minTier,
    });
    // Nothing awaits between the lookup and here, so this is the approval found; if it is gone,
    // the call still needs one.
    if (!consumed) return Object.assign({}, result, { decision: asked });
    return Object.assign({}, result, {
      decision:
        consumed.id === granted.id
          ? result.decision
          : Object.assign({}, result.decision, { reason: approvedAs(asked, consumed).reason }),
      consumedApproval: consumed.id,
    });
  }

  /**
   * A sidecar's call that needs an approval: the caller's checks see it as it would be approved
   * (as with a local approval, a call they refuse never spends one); only if it is still allowed
   * is an approval consumed at the control plane, and the call allowed once one is.
   */
  async #remoteApproval(
    agent: GovernAgent,
    pipelineId: string | null,
    asked: GovernResult,
    minTier: 'standard' | 'signed',
    checks: ((result: GovernResult) => GovernResult) | undefined,
  ): Promise<GovernResult> {
    const pending = approvedAs(asked.decision, { id: 'pending', decided_by: null });
    const probe = checks
      ? checks(Object.assign({}, asked, { decision: pending }))
      : Object.assign({}, asked, { decision: pending });
    const still = checks ? checks(asked) : asked;
    if (probe.decision.outcome !== 'allow') return still;
    const consumed = await (this.remote as RemoteApprovals).consume(
      agent.orgId,
      agent.agentUuid,
      asked.fingerprint,
      {
        pipelineId,
        minTier,
      },
    );
    if (consumed === undefined) return still;
    return Object.assign({}, probe, {
      decision: Object.assign({}, probe.decision, { reason: approvedAs(asked.decision, consumed).reason }),
      consumedApproval: consumed.id,
    });
  }
}

/** A needs_approval decision turned into allow by the approval `by`. */
function approvedAs(asked: Decision, by: { id: string; decided_by: string | null }): Decision {
  return {
    ...asked,
    outcome: 'allow',
    reason: `approved (${by.id}${by.decided_by ? ` by ${by.decided_by}` : ''}): ${asked.reason}`,
  };
}

/** The decision as recorded in the audit trail (what replay needs). */
export function decisionRecord(r: GovernResult): Record<string, unknown> {
  return {
    mode: r.decision.mode,
    effect: r.decision.effect,
    outcome: r.decision.outcome,
    rule_id: r.decision.rule_id,
    matched: r.decision.matched,
    would_outcome: r.decision.would_outcome ?? null,
    redact: r.decision.redact,
    alert: r.decision.alert,
    tier: r.decision.tier ?? null,
    policy_id: r.policyRef.policy_id,
    policy_version: r.policyRef.version_no,
    flags: r.rawFlags,
    flags_ignored: r.ignoredFlags,
    approval_consumed: r.consumedApproval,
  };
}

export function detectionRecord(scan: ContentScan): Record<string, unknown> {
  return Object.assign({} as Record<string, unknown>, scan.summary, { counts: scan.counts }); // not a spread: docs/ops.md
}
