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

/**
 * Where a configured URL sends data, as an admin event records it: scheme, host, port and path.
 * Credentials in the URL (user info) and its query (where some services take a key) are left
 * out; the hash covers details, so a secret there could never be erased.
 */
export function destination(url: string | null | undefined): string | null {
  if (url === null || url === undefined) return null;
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return '(not a URL)';
  }
}
