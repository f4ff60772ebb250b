import t from 'tap';
import { CREDENTIAL_PURGE_GRACE_DAYS } from '../../src/control/credential-purge.js';
import { createOrg, startService } from '../helpers/service.js';

const DAY_MS = 86_400_000;

// Revoked and expired credentials authenticate nothing, and were kept for good: a fleet that
// rotates keys and sidecar tokens grows its store (and every scan of it) without bound. A
// credential revoked or expired more than CREDENTIAL_PURGE_GRACE_DAYS ago is deleted with its
// index entries, each purge an admin event of its org.
t.test(
  'credentials revoked or expired past the grace period are purged, audited, and never authenticate',
  async (t) => {
    t.equal(CREDENTIAL_PURGE_GRACE_DAYS, 30);
    const svc = await startService();
    t.teardown(() => svc.close());
    const org = await createOrg(svc, 'purge');
    const other = await createOrg(svc, 'untouched');
    const call = (path: string, init: { method?: string; body?: unknown; token?: string } = {}) =>
      svc.call(path, { token: org.adminPat, ...init });

    const revokedKey = (await call(`/api/agents/${org.agentUuid}/keys`, { body: {} })).body;
    t.equal(
      (await call(`/api/agents/${org.agentUuid}/keys/${revokedKey.key_id}`, { method: 'DELETE' })).status,
      200,
    );
    const expiringKey = (await call(`/api/agents/${org.agentUuid}/keys`, { body: { expires_days: 1 } })).body;
    const revokedPat = (await call('/api/tokens', { body: { name: 'old' } })).body;
    t.equal((await call(`/api/tokens/${revokedPat.token_id}`, { method: 'DELETE' })).status, 200);
    const sidecar = (await call('/api/sidecars', { body: { name: 'old-pod' } })).body;
    t.equal((await call(`/api/sidecars/${sidecar.sidecar_id}`, { method: 'DELETE' })).status, 200);
    const liveSidecar = (await call('/api/sidecars', { body: { name: 'pod' } })).body;

    const { credentialPurge } = svc.service;
    const purgedEvents = async (pat: string) =>
      ((await svc.call('/api/audit?event_type=admin.credentials_purged', { token: pat })).body
        .data as any[]) ?? [];

    // Within the grace period nothing goes, an expired key included.
    t.same(await credentialPurge.run(Date.now() + 20 * DAY_MS), { purged: 0 });
    t.same(await purgedEvents(org.adminPat), []);

    const later = Date.now() + 32 * DAY_MS;
    t.same(await credentialPurge.run(later), { purged: 4 }, 'two agent keys, a PAT, a sidecar token');
    const events = await purgedEvents(org.adminPat);
    t.equal(events.length, 1, 'one event for the org');
    t.match(events[0], {
      event_type: 'admin.credentials_purged',
      outcome: 'allow',
      details: { actor: 'system', actor_kind: 'system', credential_id: null, grace_days: 30 },
    });
    const listed = (events[0]?.details.credentials as any[]).map((c) => [c.kind, c.credential_id]).sort();
    t.same(
      listed,
      [
        ['agent', revokedKey.key_id],
        ['agent', expiringKey.key_id],
        ['pat', revokedPat.token_id],
        ['sidecar', sidecar.sidecar_id],
      ].sort(),
      'each purged credential is named',
    );
    t.same(await purgedEvents(other.adminPat), [], "another org's chain has no event");

    // None of them authenticates; what was live still does.
    t.equal((await svc.call('/v1/models', { token: revokedKey.api_key })).status, 401);
    t.equal((await svc.call('/v1/models', { token: expiringKey.api_key })).status, 401);
    t.equal((await svc.call('/api/me', { token: revokedPat.token })).status, 401);
    t.equal((await svc.call('/api/sync/state?epoch=epoch-0001', { token: sidecar.token })).status, 401);
    t.equal(
      (await svc.call('/api/sync/state?epoch=epoch-0001', { token: liveSidecar.token })).status,
      200,
      'the live sidecar token',
    );
    t.equal((await svc.call('/v1/models', { token: org.agentKey })).status, 200, 'the live key');
    t.equal((await svc.call('/api/me', { token: org.adminPat })).status, 200, 'the live PAT');
    t.equal(
      (await svc.call('/api/sidecars', { token: org.adminPat })).body.data.length,
      2,
      'sidecars are still listed',
    );

    // A second run finds nothing more: what was purged is gone from the store, the sidecar token too.
    t.same(await credentialPurge.run(later), { purged: 0 });
    t.equal((await purgedEvents(org.adminPat)).length, 1);
  },
);
