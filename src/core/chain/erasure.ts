/**
 * The erasure-executed event. Executing a GDPR erasure tombstones personal fields of earlier
 * events (value → ERASED, salt deleted, commitment kept) and appends one event to the same chain:
 *
 *     event_type: 'gdpr.erasure_executed'
 *     details: { request_id: 'er_…', erased_fields: [{ event_id: 'ae_…', fields: ['end_user'] }], … }
 *
 * That event is itself hashed, chained and sealed, so it is the signed authority for each
 * tombstone it names. A tombstone that no such (intact) event names is `unauthorized_erasure`.
 */
export const ERASURE_EVENT_TYPE = 'gdpr.erasure_executed';

// A type alias (not an interface) so it is assignable to `JsonValue` maps such as `details`.
export type ErasureTarget = {
  event_id: string;
  fields: string[];
};

/** The `details` block of an erasure event (other keys, e.g. the receipt, may sit beside it). */
export function erasureDetails(
  requestId: string,
  targets: readonly ErasureTarget[],
): {
  request_id: string;
  erased_fields: ErasureTarget[];
} {
  return {
    request_id: requestId,
    erased_fields: targets.map((t) => ({ event_id: t.event_id, fields: [...t.fields] })),
  };
}

/** The (event, fields) pairs an event authorises; empty unless it is a well-formed erasure event. */
export function erasureTargets(event: unknown): ErasureTarget[] {
  if (typeof event !== 'object' || event === null) return [];
  const e = event as { event_type?: unknown; details?: unknown };
  if (e.event_type !== ERASURE_EVENT_TYPE) return [];
  if (typeof e.details !== 'object' || e.details === null) return [];
  const list = (e.details as { erased_fields?: unknown }).erased_fields;
  if (!Array.isArray(list)) return [];
  const out: ErasureTarget[] = [];
  for (const item of list) {
    if (typeof item !== 'object' || item === null) continue;
    const { event_id, fields } = item as { event_id?: unknown; fields?: unknown };
    if (typeof event_id !== 'string' || !Array.isArray(fields)) continue;
    out.push({ event_id, fields: fields.filter((f): f is string => typeof f === 'string') });
  }
  return out;
}
