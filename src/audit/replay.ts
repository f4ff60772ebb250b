// Policy what-if replay: re-decides recorded decisions against a candidate policy. Pure apart from
// iterating the events it is handed; nothing is recorded and nothing else is touched.

import { ERASED } from '../core/chain/index.js';
import {
  type Action,
  BEHAVIOR_TYPES,
  type BehaviorType,
  type CompiledPolicy,
  type DetectionSummary,
  type EffectiveFlags,
  evaluate,
  mergeFlags,
  parseFlags,
  policyFlags,
} from '../core/policy/index.js';
import type { AuditEvent } from './types.js';

/** The event types that carry a policy decision, and the behavior type each implies. */
export const REPLAYED_EVENT_TYPES: Readonly<Record<string, BehaviorType | null>> = Object.freeze({
  'govern.decision': null,
  llm_call: 'LLM_CALL',
  embedding_call: 'EMBEDDING_CALL',
});

export type PolicyOutcome = 'allow' | 'block' | 'needs_approval';

export interface ReplaySummary {
  allow_to_block: number;
  allow_to_needs_approval: number;
  block_to_allow: number;
  block_to_needs_approval: number;
  needs_approval_to_allow: number;
  needs_approval_to_block: number;
  unchanged: number;
}

export interface ReplayChange {
  readonly event_id: string;
  readonly seq: number;
  readonly ts: string;
  readonly behavior_type: BehaviorType;
  readonly agent_id: string | null;
  readonly tool: string | null;
  readonly old_outcome: PolicyOutcome;
  readonly new_outcome: PolicyOutcome;
  readonly old_rule_id: string | null;
  /** The candidate's deciding rule (or pseudo rule) and its reason. */
  readonly rule_id: string | null;
  readonly reason: string;
}

export interface ReplayResult {
  /** Decision events re-decided. */
  evaluated: number;
  /** Of those, how many the candidate decides differently (all of them, not only those listed). */
  changed: number;
  /** Events that carry no replayable decision (other event types, unreadable records). */
  skipped: number;
  /** True when the scan stopped at `maxEvents` with more events left. */
  truncated: boolean;
  summary: ReplaySummary;
  /** The first `limit` changes, oldest first. */
  changes: ReplayChange[];
}

export interface ReplayOptions {
  /** How many changes to list (default 1000); all are counted in `summary`. */
  readonly limit?: number;
  /** Stop after this many events (default: no bound). */
  readonly maxEvents?: number;
}

/** What a recorded decision event is rebuilt into. */
export interface ReplayedAction {
  readonly action: Action;
  /** The outcome the policy in force gave it (before approvals, errors and output guards). */
  readonly oldOutcome: PolicyOutcome;
  readonly oldRuleId: string | null;
}

export const DEFAULT_CHANGE_LIMIT = 1000;

const TYPES: ReadonlySet<string> = new Set(BEHAVIOR_TYPES);
const EMPTY_LIST: readonly string[] = Object.freeze([]);
const EMPTY_SUMMARY: DetectionSummary = Object.freeze({
  pii: EMPTY_LIST,
  secrets: EMPTY_LIST,
  injection: Object.freeze({}),
  unicode: EMPTY_LIST,
});

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

function asOutcome(v: unknown): PolicyOutcome | undefined {
  return v === 'allow' || v === 'block' || v === 'needs_approval' ? v : undefined;
}

/**
 * A personal field's value: stored plain, or as a chain commitment `{value, salt, c}`. An erased
 * (`[ERASED:GDPR-Art17]`) or missing value is undefined: the candidate sees no value there.
 */
export function personalValue(personal: Readonly<Record<string, unknown>>, key: string): unknown {
  const f = personal[key];
  if (f === undefined || f === null || f === ERASED) return undefined;
  if (isRecord(f) && typeof f.c === 'string' && Object.hasOwn(f, 'value')) {
    return f.value === ERASED || f.value === null ? undefined : f.value;
  }
  return f;
}

function stringList(v: unknown): readonly string[] {
  if (!Array.isArray(v) || v.length === 0) return EMPTY_LIST;
  return v.filter((x): x is string => typeof x === 'string');
}

function scores(v: unknown): Readonly<Record<string, number>> {
  if (!isRecord(v)) return EMPTY_SUMMARY.injection;
  const out: Record<string, number> = {};
  for (const k in v) {
    const s = v[k];
    if (typeof s === 'number' && Number.isFinite(s)) out[k] = s;
  }
  return out;
}

/** The detection summary stored with the event (`detections.input`); none stored → nothing found. */
export function storedDetections(detections: unknown): DetectionSummary {
  const input = isRecord(detections) ? detections.input : undefined;
  if (!isRecord(input)) return EMPTY_SUMMARY;
  return {
    pii: stringList(input.pii),
    secrets: stringList(input.secrets),
    injection: scores(input.injection),
    unicode: stringList(input.unicode),
  };
}

/**
 * The policy's outcome for a recorded decision. `details.decision.outcome` is preferred: an
 * llm_call blocked by the output guard, or one that failed upstream, was allowed by the policy.
 * A consumed approval means the policy asked for one. Without a stored decision the event's own
 * outcome is used, `error` counting as allow.
 */
function oldOutcomeOf(
  e: AuditEvent,
  decision: Record<string, unknown> | undefined,
): PolicyOutcome | undefined {
  const recorded = asOutcome(decision?.outcome);
  if (recorded !== undefined) {
    return recorded === 'allow' && str(decision?.approval_consumed) !== undefined
      ? 'needs_approval'
      : recorded;
  }
  return e.outcome === 'error' ? 'allow' : asOutcome(e.outcome);
}

/** Rebuilds the action a decision event was decided on; undefined for any other event. */
export function replayedAction(e: AuditEvent): ReplayedAction | undefined {
  if (!Object.hasOwn(REPLAYED_EVENT_TYPES, e.event_type)) return undefined;
  const details = isRecord(e.details) ? e.details : {};
  // A call never decided (gateway/undecided.ts: refused by the scan queue, or dropped from it)
  // records `decision: null`: there is no old outcome to compare with.
  if (details.decision === null) return undefined;
  const act = isRecord(details.action) ? details.action : undefined;
  const decision = isRecord(details.decision) ? details.decision : undefined;
  const type = e.behavior_type ?? str(act?.type) ?? REPLAYED_EVENT_TYPES[e.event_type] ?? null;
  if (type === null || !TYPES.has(type)) return undefined;
  const oldOutcome = oldOutcomeOf(e, decision);
  if (oldOutcome === undefined) return undefined;
  const action: Action = { type: type as BehaviorType, agent_id: e.agent_id ?? '' };
  const tool = str(act?.tool);
  if (tool !== undefined) action.tool = tool;
  const server = str(act?.server);
  if (server !== undefined) action.server = server;
  const model = str(e.model) ?? str(act?.model);
  if (model !== undefined) action.model = model;
  // A call stopped before its provider records none; the one it was routed to is a detail.
  const provider = str(e.provider) ?? str(details.routed_provider) ?? str(act?.provider);
  if (provider !== undefined) action.provider = provider;
  const personal = isRecord(e.personal) ? e.personal : {};
  const args = personalValue(personal, 'args');
  if (args !== undefined) action.args = args;
  const payload = personalValue(personal, 'payload');
  if (payload !== undefined) action.payload = payload;
  else if (e.event_type === 'llm_call') {
    // A model call's payload (what the policy read: its declared tools, whether it streams) is
    // recorded in its details, not as personal data.
    action.payload = {
      tools: Array.isArray(details.tools) ? details.tools : [],
      stream: details.stream === true,
    };
  }
  action.detections = storedDetections(e.detections);
  const oldRuleId = str(decision?.rule_id) ?? str(e.rule_id) ?? null;
  return { action, oldOutcome, oldRuleId };
}

export function emptySummary(): ReplaySummary {
  return {
    allow_to_block: 0,
    allow_to_needs_approval: 0,
    block_to_allow: 0,
    block_to_needs_approval: 0,
    needs_approval_to_allow: 0,
    needs_approval_to_block: 0,
    unchanged: 0,
  };
}

function transition(from: PolicyOutcome, to: PolicyOutcome): Exclude<keyof ReplaySummary, 'unchanged'> {
  return `${from}_to_${to}` as Exclude<keyof ReplaySummary, 'unchanged'>;
}

/**
 * One replay in progress: events are fed one at a time (so a caller can pause between them), each
 * re-decided against every candidate; the action is rebuilt once per event.
 */
export class ReplayRun {
  private readonly limit: number;
  private readonly maxEvents: number;
  private readonly flags: readonly EffectiveFlags[];
  private readonly out: ReplayResult[];
  private scanned = 0;

  constructor(
    private readonly candidates: readonly CompiledPolicy[],
    opts: ReplayOptions = {},
  ) {
    this.limit = opts.limit ?? DEFAULT_CHANGE_LIMIT;
    this.maxEvents = opts.maxEvents ?? Number.POSITIVE_INFINITY;
    this.flags = candidates.map(policyFlags);
    this.out = candidates.map(() => ({
      evaluated: 0,
      changed: 0,
      skipped: 0,
      truncated: false,
      summary: emptySummary(),
      changes: [],
    }));
  }

  /**
   * The flags each candidate decides `e` under: the X-Service-Flags the call carried (recorded
   * with its decision), merged under that candidate as the live path merges them under the org
   * policy; the candidate's own settings when the call carried none.
   */
  private flagsOf(e: AuditEvent): readonly EffectiveFlags[] {
    const details = isRecord(e.details) ? e.details : undefined;
    const decision = isRecord(details?.decision) ? details.decision : undefined;
    const raw = decision?.flags;
    if (typeof raw !== 'string' || raw === '') return this.flags;
    const parsed = parseFlags(raw);
    if (!parsed.ok) return this.flags;
    return this.candidates.map((c) => mergeFlags(c, parsed.flags).flags);
  }

  /** Re-decides one event; false (and `truncated`) once `maxEvents` were read and more come. */
  add(e: AuditEvent): boolean {
    const results = this.out;
    if (this.scanned >= this.maxEvents) {
      for (const r of results) r.truncated = true;
      return false;
    }
    this.scanned++;
    const replayed = replayedAction(e);
    if (replayed === undefined) {
      for (const r of results) r.skipped++;
      return true;
    }
    const { action, oldOutcome } = replayed;
    const flags = this.flagsOf(e);
    for (let i = 0; i < results.length; i++) {
      const r = results[i] as ReplayResult;
      const d = evaluate(this.candidates[i] as CompiledPolicy, action, flags[i]);
      r.evaluated++;
      if (d.outcome === oldOutcome) {
        r.summary.unchanged++;
        continue;
      }
      r.changed++;
      r.summary[transition(oldOutcome, d.outcome)]++;
      if (r.changes.length < this.limit) {
        r.changes.push({
          event_id: e.id,
          seq: e.seq,
          ts: e.ts,
          behavior_type: action.type,
          agent_id: e.agent_id,
          tool: action.tool ?? null,
          old_outcome: oldOutcome,
          new_outcome: d.outcome,
          old_rule_id: replayed.oldRuleId,
          rule_id: d.rule_id,
          reason: d.reason,
        });
      }
    }
    return true;
  }

  /** The results so far, in the candidates' order. */
  results(): ReplayResult[] {
    return this.out;
  }
}

/** Re-decides every decision event against each candidate in one pass over the events. */
export function replayMany(
  events: Iterable<AuditEvent>,
  candidates: readonly CompiledPolicy[],
  opts: ReplayOptions = {},
): ReplayResult[] {
  const run = new ReplayRun(candidates, opts);
  for (const e of events) if (!run.add(e)) break;
  return run.results();
}

/** Re-decides every decision event against one candidate policy. */
export function replay(
  events: Iterable<AuditEvent>,
  candidate: CompiledPolicy,
  opts: ReplayOptions = {},
): ReplayResult {
  return replayMany(events, [candidate], opts)[0] as ReplayResult;
}
