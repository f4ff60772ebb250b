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
  readonly personal: Record<string, unknown>;
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
  byPipeline(orgId: string, pipelineId: string): AuditEvent[];
}
