import type { EventOrigin } from '../core/chain/event.js';

/** What a caller hands the audit seam. The sink adds id, seq, ts and the chain fields. */
export interface AuditInput {
  readonly org_id: string;
  readonly event_type: string;
  readonly agent_id?: string | null;
  readonly session_id?: string | null;
  readonly task_id?: string | null;
  readonly pipeline_id?: string | null;
  readonly behavior_type?: string | null;
  readonly outcome?: string | null;
  readonly reason?: string | null;
  readonly rule_id?: string | null;
  readonly provider?: string | null;
  readonly model?: string | null;
  readonly usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
  readonly cost?: number | null;
  readonly detections?: unknown;
  readonly details?: Record<string, unknown>;
  /** Personal data (end-user ids, emails, prompt text…): stored so that erasure can remove it. */
  readonly personal?: Record<string, unknown>;
  /** Set by the control plane for an event ingested from a sidecar's log (DESIGN B). */
  readonly origin?: EventOrigin | null;
}

export interface AuditEvent {
  readonly id: string;
  readonly org_id: string;
  readonly seq: number;
  readonly ts: string;
  readonly event_type: string;
  readonly agent_id: string | null;
  readonly session_id: string | null;
  readonly task_id: string | null;
  readonly pipeline_id: string | null;
  readonly behavior_type: string | null;
  readonly outcome: string | null;
  readonly reason: string | null;
  readonly rule_id: string | null;
  readonly provider: string | null;
  readonly model: string | null;
  readonly usage: AuditInput['usage'];
  readonly cost: number | null;
  readonly detections: unknown;
  readonly details: Record<string, unknown>;
  /** Personal fields; in the chain each is {value, salt, c} (see core/chain commitments). */
  readonly personal: Record<string, unknown>;
  readonly origin?: unknown;
  readonly _chain_version?: 2;
  readonly prev_hash?: string;
  readonly hash?: string;
  readonly seal?: { readonly seq: number } | null;
}

export interface AuditRef {
  readonly id: string;
  readonly seq: number;
}

/**
 * The write side of the audit trail, the only way the request path records anything. In
 * all-in-one it is in-process; a sidecar's sink is its local signed WAL.
 */
export interface AuditSink {
  /** Resolves once the event is committed. */
  append(input: AuditInput): Promise<AuditRef>;
}

export interface AuditReader {
  get(orgId: string, eventId: string): AuditEvent | undefined;
  /** The pipeline's events, oldest first, at most `limit` (default 1000): its index, not a scan. */
  byPipeline(orgId: string, pipelineId: string, limit?: number): AuditEvent[];
}

// ---------------------------------------------------------------------------------------------
// The transparency-log implementation of the seam (DESIGN B). The request path sees only
// AuditSink; the control plane's /api/audit endpoints, integrity, export and replay use AuditLog.

/** Filters of GET /api/audit (DESIGN C "Audit search"; see docs/audit.md for their meaning). */
export interface AuditQuery {
  readonly agent_id?: string;
  readonly session_id?: string;
  readonly task_id?: string;
  readonly pipeline_id?: string;
  /** The event's outcome: allow, block, needs_approval, error, … */
  readonly action?: string;
  /** The event family: event_type up to its first '.', e.g. admin, approval, govern, tool, llm_call. */
  readonly category?: string;
  /** Case-insensitive substring of event_type, reason, rule_id, model, provider, agent_id or tool. */
  readonly q?: string;
  readonly event_type?: string;
  /** ISO 8601 bounds on ts (inclusive). */
  readonly since?: string;
  readonly until?: string;
  /** 1..1000, default 100. */
  readonly limit?: number;
  /** Opaque cursor from a previous page. */
  readonly cursor?: string;
}

export interface AuditPage {
  readonly data: AuditEvent[];
  readonly next_cursor: string | null;
}

export interface AuditOverview {
  readonly events: number;
  readonly by_outcome: Record<string, number>;
  readonly by_type: Record<string, number>;
  readonly by_agent: Record<string, number>;
  readonly by_provider: Record<string, number>;
  readonly tokens: { prompt: number; completion: number; total: number };
  readonly cost: number;
}

/** A seal as stored: the C2SP signed note of the org tree at `size`. */
export interface StoredSeal {
  /** 1-based seal number within the org. */
  readonly seq: number;
  /** Tree size (= the seq of the last event it covers). */
  readonly size: number;
  readonly note: string;
  readonly ts: string;
}

/**
 * One line of the JSONL log and of GET /api/audit/export, in order: an event object (the stored
 * event, personal fields as {value, salt, c}), or `{"_seal": StoredSeal}` right after the event
 * whose seq equals the seal's size, or `{"_chain_bridge": {...}}` where retention pruned events.
 */
export type ChainLine =
  | AuditEvent
  | { readonly _seal: StoredSeal }
  | { readonly _chain_bridge: Record<string, unknown> };

/** Signs seals. Ed25519 and ML-DSA-65 (ML-DSA in a worker thread, off the event loop). */
export interface SealSigner {
  /** Returns the complete signed note (body + both signature lines). */
  sign(body: string): Promise<string>;
  /** The body of GET /api/audit/signing-key, also the --keys file of `govgate verify`. */
  publicDocument(): SigningKeyDocument;
  close(): Promise<void>;
}

export interface SigningKeyDocument {
  readonly algorithms: readonly ['ed25519', 'ml-dsa-65'];
  readonly keys: readonly {
    /** The C2SP note key name that appears on signature lines. */
    readonly name: string;
    readonly alg: 'ed25519' | 'ml-dsa-65';
    /** C2SP key id, 8 hex characters. */
    readonly key_id: string;
    /** Raw public key, base64. */
    readonly public_key: string;
    readonly status: 'active' | 'retired';
    readonly created_at: string;
    readonly retired_at: string | null;
  }[];
  readonly instructions: readonly string[];
}

export interface AuditLog extends AuditSink, AuditReader {
  search(orgId: string, q: AuditQuery): AuditPage;
  /** The events of one session, task or pipeline, oldest first, a page at a time (`next_cursor`). */
  view(
    orgId: string,
    filter: 'pipeline_id' | 'session_id' | 'task_id',
    value: string,
    limit: number,
    cursor?: string,
  ): AuditPage;
  overview(orgId: string, range: { since?: string; until?: string }): AuditOverview;
  /** The seq of the org's newest committed event (0 when it has none). */
  lastSeq(orgId: string): number;
  /**
   * Events in seq order (oldest first) matching the filters, from seq `fromSeq` (default 1) on;
   * replay and the approval feed read history through this.
   */
  scanEvents(
    orgId: string,
    filters: Omit<AuditQuery, 'cursor' | 'limit'>,
    limit: number,
    fromSeq?: number,
  ): Iterable<AuditEvent>;
  /** Every line of the org chain in order (events, seals, bridges), optionally bounded by ts. */
  exportLines(orgId: string, range?: { since?: string; until?: string }): Iterable<ChainLine>;
  /**
   * Tombstones personal fields of committed events, in the store and the JSONL log (GDPR
   * erasure; the caller commits the erasure events naming them first). Returns how many events
   * and JSONL lines changed.
   */
  erase(
    orgId: string,
    targets: readonly { readonly event_id: string; readonly fields: readonly string[] }[],
  ): Promise<{ events: number; lines: number }>;
  /** Cuts the pending seal of every org now and writes the JSONL log up to it (tests, shutdown). */
  flushSeals(): Promise<void>;
  close(): Promise<void>;
}
