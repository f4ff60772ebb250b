import t from 'tap';
import { createOrg, startService, type TestService } from '../helpers/service.js';
import {
  createSidecarToken,
  restartWithNewToken,
  startTestSidecar,
  type TestSidecar,
} from '../helpers/sidecar.js';

/**
 * A sidecar's mandate keys when its token is rotated on the same keys dir (docs/sidecar.md,
 * "Mandates" and "Tokens"): they move to the new token once the old one is revoked, and to
 * nothing else.
 */

/** Readiness polled until `cond` holds on its answer (the sidecar polls the control plane every 100 ms here). */
async function readyWhen(sc: TestSidecar, cond: (body: any) => boolean, what: string): Promise<any> {
  let body: any;
  const end = Date.now() + 10_000;
  for (;;) {
    body = (await sc.call('/api/health/ready')).body;
    if (cond(body)) return body;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(body)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The mandate key ids a sidecar registered, from the org chain. */
async function registeredKids(control: TestService, sidecarId: string): Promise<string[]> {
  const res = await control.call('/api/audit?event_type=sidecar.mandate_keys_registered&limit=100', {
    token: control.pat,
  });
  return (res.body.data as any[])
    .filter((e) => e.details.sidecar_id === sidecarId)
    .flatMap((e) => e.details.keys.map((k: { kid: string }) => k.kid));
}

/**
 * The review's finding: a sidecar restarted with a new token on the same keys dir, its old token
 * revoked, never became ready (the control plane refused its mandate keys as another sidecar's),
 * and its log blamed the network for the snapshot.
 */
t.test('a new token on the same keys dir, the old one revoked: the mandate keys move to it', async (t) => {
  const control = await startService();
  const first = await createSidecarToken(control, control.pat);
  let sc: TestSidecar = await startTestSidecar({ controlUrl: control.url, token: first.token });
  t.teardown(async () => {
    await sc.close();
    await control.close();
  });
  t.equal((await sc.call('/api/health/ready')).status, 200, 'the first token is ready');
  const kids = await registeredKids(control, first.sidecarId);
  t.ok(kids.length > 0, 'its mandate keys are in the org chain');
  await sc.close(true);

  t.equal(
    (await control.call(`/api/sidecars/${first.sidecarId}`, { method: 'DELETE', token: control.pat })).status,
    200,
  );
  const restarted = await restartWithNewToken(control, sc.dir);
  sc = restarted.sc;
  const { token: second, lines } = restarted;
  const ready = await sc.call('/api/health/ready');
  t.equal(ready.status, 200, `ready with the new token: ${JSON.stringify(ready.body)}`);
  t.notOk(
    lines.some((l) => /cannot be reached/.test(l.msg)),
    'nothing in its log says the control plane cannot be reached',
  );

  const rebound = await control.call('/api/audit?event_type=sidecar.mandate_keys_rebound', {
    token: control.pat,
  });
  t.equal(rebound.body.data.length, 1, 'the move is an event of the org chain');
  const details = rebound.body.data[0].details;
  t.equal(details.sidecar_id, second.sidecarId);
  t.same(details.keys.map((k: any) => k.kid).sort(), [...kids].sort(), 'naming each key that moved');
  for (const k of details.keys)
    t.equal(k.from_sidecar_id, first.sidecarId, 'and the sidecar it was bound to');

  // Its mandates verify at the control plane again, as the new sidecar's.
  const govern = await sc.call('/v1/govern', {
    token: control.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 't.x' } },
  });
  t.equal(govern.status, 200, JSON.stringify(govern.body));
  const verified = await control.call('/v1/tokens/verify', { body: { token: govern.body.mandate } });
  t.equal(verified.body.valid, true, JSON.stringify(verified.body));
});

t.test(
  'a new token while the old one is live: refused, said so, ready once the old one is revoked',
  async (t) => {
    const control = await startService();
    const first = await createSidecarToken(control, control.pat);
    let sc: TestSidecar = await startTestSidecar({ controlUrl: control.url, token: first.token });
    t.teardown(async () => {
      await sc.close();
      await control.close();
    });
    await sc.close(true);
    const restarted = await restartWithNewToken(control, sc.dir);
    sc = restarted.sc;
    const { lines } = restarted;
    // Two live sidecars would hold one key: the old token still speaks for it until it is revoked.
    const before = await sc.call('/api/health/ready');
    t.equal(before.status, 503);
    t.equal(before.body.checks.mandate_keys, false);
    t.equal(before.body.checks.snapshot, true, 'it has its snapshot');
    const refused = lines.find((l) => /mandate keys/.test(l.msg));
    t.ok(refused, 'its log names the mandate keys');
    t.equal(refused?.level, 'error');
    t.match(refused?.error, new RegExp(first.sidecarId), 'and the sidecar that holds them');
    t.notOk(
      lines.some((l) => /cannot be reached/.test(l.msg)),
      'not that the control plane cannot be reached',
    );
    const metrics = String((await sc.call('/api/metrics')).body);
    t.match(metrics, /govgate_sidecar_sync_failures\{kind="snapshot"\} 0/, 'the snapshot pulls did not fail');

    t.equal(
      (await control.call(`/api/sidecars/${first.sidecarId}`, { method: 'DELETE', token: control.pat }))
        .status,
      200,
    );
    await readyWhen(sc, (b) => b.status === 'ok', 'the keys taken');
    t.pass('ready once the old token is revoked');
    t.ok(
      lines.some((l) => l.level === 'info' && /took this sidecar's mandate keys/.test(l.msg)),
      'and its log says so',
    );
  },
);

t.test('what moves a mandate key and what does not', async (t) => {
  const control = await startService();
  t.teardown(() => control.close());
  const other = await createOrg(control, 'other');
  const x = Buffer.alloc(32, 3).toString('base64url');
  const jwk = (kid: string, key = x) => ({ kty: 'OKP', crv: 'Ed25519', x: key, kid });
  const register = (token: string, keys: unknown[]) =>
    control.call('/api/sync/mandate-keys', { token, body: { keys } });
  const revoke = (id: string, token = control.pat) =>
    control.call(`/api/sidecars/${id}`, { method: 'DELETE', token });

  const a = await createSidecarToken(control, control.pat, 'a');
  t.equal((await register(a.token, [jwk('k-moves')])).status, 200);
  const b = await createSidecarToken(control, control.pat, 'b');
  t.equal((await register(b.token, [jwk('k-moves')])).status, 409, 'not from a live sidecar');
  await revoke(a.sidecarId);
  const theirs = await createSidecarToken(control, other.adminPat, 'theirs');
  const foreign = await register(theirs.token, [jwk('k-moves')]);
  t.equal(foreign.status, 409, "never to another org's sidecar, revoked holder or not");
  t.notMatch(foreign.body.error.message, new RegExp(a.sidecarId), "nor does it name the other org's sidecar");
  const x2 = Buffer.alloc(32, 4).toString('base64url');
  t.equal((await register(b.token, [jwk('k-moves', x2)])).status, 409, 'not the key id with another key');
  const moved = await register(b.token, [jwk('k-moves')]);
  t.equal(moved.status, 200, 'the same key, to a sidecar of its org, once its holder is revoked');
  t.same(moved.body, { kids: ['k-moves'], registered: true });
  t.equal((await register(b.token, [jwk('k-moves')])).body.registered, false, 'then it is that sidecar’s');
  const published = (await control.call('/.well-known/jwks.json')).body.keys.filter(
    (k: any) => k.kid === 'k-moves',
  );
  t.equal(published.length, 1, 'published again, once');
  t.equal((await register(a.token, [jwk('k-moves')])).status, 401, 'the revoked one is refused as ever');
  const events = await control.call('/api/audit?event_type=sidecar.mandate_keys_rebound', {
    token: control.pat,
  });
  t.same(
    events.body.data.map((e: any) => e.details),
    [{ sidecar_id: b.sidecarId, keys: [{ kid: 'k-moves', x, from_sidecar_id: a.sidecarId }] }],
  );
});
