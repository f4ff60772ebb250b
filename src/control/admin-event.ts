import { createHash } from 'node:crypto';
import type { AuditSink } from '../audit/types.js';
import type { Principal } from '../identity/types.js';

/**
 * Records an admin change (`admin.<type>`) in the org's chain, naming who made it: the user (or
 * agent) and the credential it used, so a change made with a leaked token is found by the token.
 * What a person wrote about themselves (an authenticator's name) goes in `personal`, which erasure
 * reaches; `details` is covered by the hash for good.
 */
export function adminEvent(
  audit: AuditSink,
  orgId: string,
  p: Principal,
  type: string,
  details: Record<string, unknown>,
  personal?: Record<string, unknown>,
): Promise<unknown> {
  const event = {
    org_id: orgId,
    event_type: `admin.${type}`,
    outcome: 'allow',
    details: { actor: p.id, actor_kind: p.kind, credential_id: p.credential_id, ...details },
  } as const;
  return audit.append(personal === undefined ? event : { ...event, personal });
}

/**
 * Where a configured URL sends data, as an admin event records it: its origin (scheme, host,
 * port) and the SHA-256 of the whole URL as configured. The path and query are not recorded:
 * webhook URLs carry their token in the path, some services take a key in the query, and the
 * hash covers details, so a secret there could never be erased. The digest still shows any
 * change of path, and lets an auditor check a URL they are given.
 */
export function recordedUrl(url: string | null | undefined): {
  origin: string | null;
  url_sha256: string | null;
} {
  if (url === null || url === undefined) return { origin: null, url_sha256: null };
  let origin: string;
  try {
    const u = new URL(url);
    origin = `${u.protocol}//${u.host}`;
  } catch {
    origin = '(not a URL)';
  }
  return { origin, url_sha256: createHash('sha256').update(url).digest('hex') };
}
