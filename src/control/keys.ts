import type { AuditSink } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import type { AuditKeyEntry, AuditKeys } from '../crypto/audit-keys.js';
import type { MandateKeyEntry, MandateKeys } from '../crypto/mandate-keys.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { requireRole } from '../identity/guard.js';
import type { Snapshot } from '../snapshot/types.js';
import { strictBody } from './body.js';

export interface KeyRouteDeps {
  readonly snapshot: Snapshot;
  readonly auditKeys: AuditKeys;
  readonly mandateKeys: MandateKeys;
  readonly audit: AuditSink;
}

const KEY_KINDS = ['audit', 'mandate'] as const;
type KeyKind = (typeof KEY_KINDS)[number];

/** A key as a rotation's answer and event name it: its public identity, never private material. */
interface KeyRef {
  readonly alg: string;
  readonly key_id: string;
  readonly name?: string;
  readonly created_at: string;
  readonly retired_at: string | null;
}

function auditRef(e: AuditKeyEntry): KeyRef {
  return { alg: e.alg, key_id: e.key_id, name: e.name, created_at: e.created_at, retired_at: e.retired_at };
}

function mandateRef(e: MandateKeyEntry): KeyRef {
  return { alg: 'EdDSA', key_id: e.kid, created_at: e.created_at, retired_at: e.retired_at };
}

/**
 * Key rotation, deployment-wide (the keys sign for every org), for a super_admin:
 * `POST /api/keys/rotate {key: "audit" | "mandate"}`. The new keys take effect at once (the next
 * seal, the next mandate); the retired public keys stay published, so what they signed keeps
 * verifying. A new mandate key was published before it signs (MandateKeys' next key), so
 * verifiers holding a JWKS fetched since the previous rotation already have it. The rotation is an `admin.keys_rotated` event of the `_system` chain, naming the
 * keys by their public ids and the credential that asked.
 */
export function registerKeyRoutes(router: Router<RouteHandler>, deps: KeyRouteDeps): void {
  const { snapshot, auditKeys, mandateKeys, audit } = deps;

  router.add('POST', '/api/keys/rotate', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'super_admin');
    const body = strictBody<{ key: KeyKind }>(ctx.jsonObject(), {
      key: { type: 'string', required: true, enum: KEY_KINDS },
    });
    let answer: { key: KeyKind; active: KeyRef[]; retired: KeyRef[]; kept: KeyRef[]; next: KeyRef[] };
    try {
      if (body.key === 'audit') {
        const r = auditKeys.rotate();
        answer = {
          key: 'audit',
          active: r.active.map(auditRef),
          retired: r.retired.map(auditRef),
          kept: r.kept.map(auditRef),
          next: [],
        };
      } else {
        const r = mandateKeys.rotate();
        answer = {
          key: 'mandate',
          active: [mandateRef(r.active)],
          retired: [mandateRef(r.retired)],
          kept: [],
          next: [mandateRef(r.next)],
        };
      }
    } catch (err) {
      // New key files are written before the index names them: a keys dir that cannot be written
      // (a read-only Secret mount) leaves the keys in force as they were.
      const code = (err as NodeJS.ErrnoException).code ?? 'error';
      throw new ServiceError(
        'unavailable',
        `the ${body.key} keys could not be rotated: the keys dir could not be written (${code}); the keys in force are unchanged`,
        { cause: err },
      );
    }
    // Recorded once the keys are in force: the keys document and the JWKS show the change either
    // way (created_at, retired_at), and an event must not claim a rotation that failed.
    await audit.append({
      org_id: '_system',
      event_type: 'admin.keys_rotated',
      outcome: 'allow',
      details: {
        actor: p.id,
        actor_kind: p.kind,
        credential_id: p.credential_id,
        key: answer.key,
        active: answer.active.map((k) => k.key_id),
        retired: answer.retired.map((k) => k.key_id),
        kept: answer.kept.map((k) => k.key_id),
        next: answer.next.map((k) => k.key_id),
      },
    });
    ctx.json(200, answer);
  });
}
