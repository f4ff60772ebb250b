import type { AuditEvent } from './types.js';

export type Severity = 'block' | 'detect' | 'info';

/**
 * An event's severity for alerting: `block` when it was blocked; `detect` when a detector found
 * something (any count above 0) or the deciding policy asked for an alert; `info` otherwise (a
 * `pii_detected` event too: it restates the detections of its call, which is that call's alert).
 */
export function severityOf(
  e: Pick<AuditEvent, 'outcome' | 'event_type' | 'detections' | 'details'>,
): Severity {
  if (e.outcome === 'block') return 'block';
  if (e.event_type === 'pii_detected') return 'info'; // restates its call's detections: the call is the alert
  return detected(e) ? 'detect' : 'info';
}

/** Whether a detector found something in an event, or its deciding rule asked for an alert. */
export function detected(e: Pick<AuditEvent, 'detections' | 'details'>): boolean {
  const decision = (e.details as { decision?: { alert?: unknown } } | null | undefined)?.decision;
  return decision?.alert === true || hasFindings(e.detections, 0);
}

/**
 * Whether a detections summary holds a positive count anywhere (`{input: {counts: {pii: 2}}}`).
 * On the append path (rollups count detections per agent): `for…in`, no arrays made.
 */
function hasFindings(d: unknown, depth: number): boolean {
  if (d === null || typeof d !== 'object' || depth > 3) return false;
  const counts = (d as { counts?: unknown }).counts;
  if (counts !== null && typeof counts === 'object')
    for (const k in counts) {
      const v = (counts as Record<string, unknown>)[k];
      if (typeof v === 'number' && v > 0) return true;
    }
  for (const k in d) {
    const v = (d as Record<string, unknown>)[k];
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && hasFindings(v, depth + 1)) return true;
  }
  return false;
}
