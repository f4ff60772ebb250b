import type { AuditSink } from '../audit/types.js';
import type { Principal } from '../identity/types.js';

/** Records an admin change (`admin.<type>`) in the org's chain, naming who made it. */
export function adminEvent(
  audit: AuditSink,
  orgId: string,
  p: Principal,
  type: string,
  details: Record<string, unknown>,
): Promise<unknown> {
  return audit.append({
    org_id: orgId,
    event_type: `admin.${type}`,
    outcome: 'allow',
    details: { actor: p.id, actor_kind: p.kind, ...details },
  });
}
