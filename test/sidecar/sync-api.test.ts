import { createHash, generateKeyPairSync } from 'node:crypto';
import { decodeJwt, SignJWT } from 'jose';
import t from 'tap';
import { type ChainEvent, GENESIS } from '../../src/core/chain/event.js';
import { TestSigner } from '../audit/helpers.js';
import { createOrg, startService } from '../helpers/service.js';
import { createSidecarToken } from '../helpers/sidecar.js';
import { sidecarEntries as entries, sealOf } from './log.js';

t.test('the sync API: tokens, snapshot, and the control plane as the sidecar log witness', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const other = await createOrg(svc, 'other', { mock: true });
  const { sidecarId, token } = await createSidecarToken(svc, svc.pat, 'pod-1');
  const sync = (
    path: string,
    init: { token?: string; body?: unknown; headers?: Record<string, string> } = {},
  ) => svc.call(path, { token, ...init });
  const epoch = 'epochAAAA1111';
  // The sidecar log's own keys, and the hashes of the entries the control plane took in (the
  // honest chain): a batch's seal is cut over those and the batch, as the sidecar would.
  const signer = new TestSigner('govgate-sidecar-test');
  const honest: string[] = [];
  const sealOver = (list: ChainEvent[], by: TestSigner = signer, leaves?: string[]) =>
    sealOf(
      (list[0] as ChainEvent).org_id,
      leaves ?? [...honest.slice(0, (list[0] as ChainEvent).seq - 1), ...list.map((e) => e.hash)],
      by,
    );
  const push = async (list: ChainEvent[], e = epoch, tok = token, seals?: unknown[]) => {
    const res = await svc.call('/api/sync/events', {
      token: tok,
      body: { epoch: e, entries: list, seals: seals ?? (list.length > 0 ? [sealOver(list)] : []) },
    });
    if (res.status === 200 && e === epoch) for (const x of list) honest[x.seq - 1] = x.hash;
    return res;
  };
  const chainLength = async (): Promise<number> =>
    (await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat })).body.chain_length;

  t.test('who may create sidecars and call the sync API', async (t) => {
    const dev = await svc.call('/api/users', {
      token: svc.pat,
      body: { email: 'dev@default.test', role: 'developer' },
    });
    const devPat = (
      await svc.call('/api/tokens', { token: svc.pat, body: { name: 'dev', user_id: dev.body.user_id } })
    ).body.token;
    t.equal((await svc.call('/api/sidecars', { token: devPat, body: { name: 'x' } })).status, 403);
    t.equal((await svc.call('/api/sidecars', { token: svc.agentKey, body: { name: 'x' } })).status, 403);
    t.equal((await svc.call('/api/sidecars', { token: svc.pat, body: { name: 'x', extra: 1 } })).status, 400);
    for (const tok of [undefined, svc.pat, svc.agentKey, `gk_sc_${'A'.repeat(40)}`]) {
      const res = await svc.call('/api/sync/snapshot', tok === undefined ? {} : { token: tok });
      t.equal(res.status, 401, `snapshot refused to ${tok?.slice(0, 9) ?? 'no token'}`);
      t.equal(res.body.error.code, 'unauthenticated');
    }
    // An org admin creates sidecars of their own org only.
    const mine = await svc.call('/api/sidecars', { token: other.adminPat, body: { name: 'b-pod' } });
    t.equal(mine.status, 201);
    t.equal(mine.body.org_id, other.orgId);
    t.match(mine.body.token, /^gk_sc_[A-Za-z0-9]{40}$/);
    const listed = await svc.call('/api/sidecars', { token: other.adminPat });
    t.same(
      listed.body.data.map((s: any) => s.sidecar_id),
      [mine.body.sidecar_id],
      "an org admin sees only their org's sidecars",
    );
    t.equal(
      (await svc.call(`/api/sidecars/${sidecarId}`, { method: 'DELETE', token: other.adminPat })).status,
      404,
      "nor can they revoke another org's",
    );
  });

  t.test('the snapshot holds the org and nothing else, keys as hashes only', async (t) => {
    const res = await sync('/api/sync/snapshot');
    t.equal(res.status, 200);
    const doc = res.body;
    t.equal(doc.org_id, 'default');
    t.equal(doc.sidecar_id, sidecarId);
    t.ok(doc.agents.length >= 1);
    t.ok(
      doc.agents.every((a: any) => a.org_id === 'default'),
      "no other org's agent",
    );
    t.notOk(doc.agents.some((a: any) => a.agent_uuid === other.agentUuid));
    const text = JSON.stringify(doc);
    t.notOk(text.includes('gk_agent_'), 'no agent key in the clear');
    t.notOk(text.includes(other.agentKey.slice(-12)));
    t.ok(doc.credentials.every((c: any) => /^[0-9a-f]{64}$/.test(c.hash)));
    const etag = res.headers.get('etag') as string;
    t.match(etag, /^"[0-9a-f]{64}"$/);
    const again = await sync('/api/sync/snapshot', { headers: { 'if-none-match': etag } });
    t.equal(again.status, 304, 'unchanged: 304');
    // Another org's changes do not rebuild this org's snapshot (it is rebuilt per org).
    const desk = svc.service.sidecars;
    const builds = desk.snapshotBuilds;
    const otherKey = await svc.call(`/api/agents/${other.agentUuid}/keys`, {
      token: other.adminPat,
      body: {},
    });
    t.equal(otherKey.status, 201, JSON.stringify(otherKey.body));
    t.equal((await sync('/api/sync/snapshot', { headers: { 'if-none-match': etag } })).status, 304);
    t.equal(desk.snapshotBuilds, builds, "another org's new key: not rebuilt");
    await svc.call('/api/agents/onboard', { token: svc.pat, body: { agent_id: 'new-one' } });
    const changed = await sync('/api/sync/snapshot', { headers: { 'if-none-match': etag } });
    t.equal(desk.snapshotBuilds, builds + 1, "this org's new agent: rebuilt");
    t.equal(changed.status, 200, 'a new agent changes it');
    t.ok(changed.body.agents.some((a: any) => a.agent_id === 'new-one'));
  });

  t.test("a log's keys are registered once, in the org chain", async (t) => {
    const unregistered = await push(entries('default', 1));
    t.equal(unregistered.status, 409, 'no entry before its log is registered');
    t.match(unregistered.body.error.message, /not registered/);
    const bad = await sync('/api/sync/log', { body: { epoch, keys: { keys: [] } } });
    t.equal(bad.status, 400);
    const reg = await sync('/api/sync/log', { body: { epoch, keys: signer.publicDocument() } });
    t.equal(reg.status, 200);
    t.equal(reg.body.registered, true);
    t.equal(reg.body.key_ids.length, 2);
    const again = await sync('/api/sync/log', { body: { epoch, keys: signer.publicDocument() } });
    t.equal(again.body.registered, false, 'the same keys again: nothing new');
    const other = await sync('/api/sync/log', {
      body: { epoch, keys: new TestSigner('x').publicDocument() },
    });
    t.equal(other.status, 409, 'other keys for a registered log are refused');
    const events = await svc.call('/api/audit?event_type=sidecar.log_registered', { token: svc.pat });
    t.equal(events.body.data.length, 1);
    t.same(events.body.data[0].details.keys.map((k: any) => k.key_id).sort(), reg.body.key_ids);
    t.equal(events.body.data[0].details.sidecar_id, sidecarId);
  });

  t.test('entries are taken in once, in order, each checked', async (t) => {
    const base = await chainLength();
    const first = entries('default', 3);
    const ok = await push(first);
    t.equal(ok.status, 200);
    t.same(
      { index: ok.body.index, hash: ok.body.hash, ingested: ok.body.ingested },
      {
        index: 3,
        hash: first[2]?.hash,
        ingested: 3,
      },
    );
    t.equal(await chainLength(), base + 3);
    const state = await sync(`/api/sync/state?epoch=${epoch}`);
    t.same(state.body, { epoch, index: 3, hash: first[2]?.hash });
    const found = await svc.call(`/api/audit/pipeline/${first[1]?.pipeline_id}`, { token: svc.pat });
    const e = found.body.data[0];
    t.same(e.origin, { sidecar_id: sidecarId, epoch, index: 2, hash: first[1]?.hash, ts: first[1]?.ts });
    t.equal(e.details.n, 2);
    t.same(Object.keys(e.personal), ['end_user'], 'personal data stays personal (erasable)');

    const replay = await push(first);
    t.equal(replay.status, 200);
    t.equal(replay.body.ingested, 0, 'sent again: nothing new');
    // Sent twice at once: still once.
    const next = entries('default', 2, { seq: 3, hash: first[2]?.hash as string });
    const [a, b] = await Promise.all([push(next), push(next)]);
    t.equal(a.status, 200);
    t.equal(b.status, 200);
    t.equal(a.body.ingested + b.body.ingested, 2);
    t.equal(await chainLength(), base + 5);
    t.equal((await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat })).body.status, 'intact');
  });

  t.test('a tampered, forked, gapped or foreign batch is refused whole', async (t) => {
    const state = (await sync(`/api/sync/state?epoch=${epoch}`)).body;
    // (a second log of this sidecar, registered before the count: its registration is an event)
    t.equal(
      (await sync('/api/sync/log', { body: { epoch: 'epochBBBB2222', keys: signer.publicDocument() } }))
        .status,
      200,
    );
    const base = await chainLength();
    const prev = { seq: state.index, hash: state.hash };
    const good = entries('default', 2, prev);

    const edited = structuredClone(good);
    (edited[1] as any).details.n = 999; // content changed after it was hashed
    let res = await push(edited);
    t.equal(res.status, 400);
    t.match(res.body.error.message, /entries\[1\].*hash does not match/);

    const personal = structuredClone(good);
    (personal[0] as any).personal.end_user.value = 'someone-else@example.com';
    res = await push(personal);
    t.equal(res.status, 400);
    t.match(res.body.error.message, /personal field end_user does not match/);

    res = await push(entries('default', 2, { seq: prev.seq + 3, hash: prev.hash }));
    t.equal(res.status, 409, 'a gap');
    t.match(res.body.error.message, new RegExp(`expected index ${prev.seq + 1}`));

    const fork = entries('default', 1, { seq: prev.seq - 1, hash: GENESIS });
    res = await push(fork);
    t.equal(res.status, 409, 'another entry at an index already taken in');
    res = await push(entries('default', 1, { seq: prev.seq, hash: 'f'.repeat(64) }));
    t.equal(res.status, 409, 'an entry that does not link to the last one taken in');

    res = await push(entries(other.orgId, 1, prev));
    t.equal(res.status, 403, "another org's entry");
    res = await push(entries('default', 1, prev, { event_type: 'gdpr.erasure_executed' }));
    t.equal(res.status, 403, 'an erasure event is the control plane’s own to write');
    t.match(res.body.error.message, /does not record gdpr.erasure_executed/);
    res = await push(entries('default', 1, prev, { event_type: 'admin.sidecar_created' }));
    t.equal(res.status, 403);

    res = await push(entries('default', 2, { seq: 3, hash: GENESIS }), 'epochBBBB2222');
    t.equal(res.status, 409, 'a new log starts at index 1');
    res = await push(good, epoch, token, []);
    t.equal(res.status, 400, 'a batch that does not end on a seal');
    t.match(res.body.error.message, /seal of index/);
    res = await push(good, epoch, token, [sealOver(good, new TestSigner('forger'))]);
    t.equal(res.status, 400, 'a seal signed by other keys than the log registered');
    t.match(res.body.error.message, /does not verify/);
    // Signed by the log's keys, at the right size, over a history with one earlier entry changed.
    const forked = [...honest.slice(0, prev.seq - 1), 'f'.repeat(64), ...good.map((e) => e.hash)];
    res = await push(good, epoch, token, [sealOver(good, signer, forked)]);
    t.equal(res.status, 409, 'a signed seal over another tree: a fork');
    t.match(res.body.error.message, /another tree/);
    res = await push(good, 'bad epoch!');
    t.equal(res.status, 400);
    res = await push([]);
    t.equal(res.status, 400);
    t.equal(await chainLength(), base, 'nothing of any refused batch was written');

    res = await push(good);
    t.equal(res.status, 200, 'the honest batch still goes in');
    t.equal(res.body.ingested, 2);
  });

  t.test('mandate keys: public Ed25519 JWKs, key ids unique across the deployment', async (t) => {
    const x = Buffer.alloc(32, 7).toString('base64url');
    const post = (keys: unknown) => sync('/api/sync/mandate-keys', { body: { keys } });
    t.equal((await post([])).status, 400);
    t.equal((await post([{ kty: 'OKP', crv: 'Ed25519', x, kid: 'k1', d: x }])).status, 400, 'a private key');
    t.equal((await post([{ kty: 'RSA', kid: 'k1' }])).status, 400);
    const own = (await svc.call('/.well-known/jwks.json')).body.keys[0].kid;
    const clash = await post([{ kty: 'OKP', crv: 'Ed25519', x, kid: own }]);
    t.equal(clash.status, 409, "the control plane's own key id");
    const ok = await post([{ kty: 'OKP', crv: 'Ed25519', x, kid: 'sidecar-key-1' }]);
    t.equal(ok.status, 200);
    t.same(ok.body, { kids: ['sidecar-key-1'], registered: true });
    t.equal((await post([{ kty: 'OKP', crv: 'Ed25519', x, kid: 'sidecar-key-1' }])).body.registered, false);
    // Another replica with the same token registers its own key: both are published.
    const x2 = Buffer.alloc(32, 9).toString('base64url');
    t.equal(
      (await post([{ kty: 'OKP', crv: 'Ed25519', x: x2, kid: 'sidecar-key-2' }])).body.registered,
      true,
    );
    const jwks = (await svc.call('/.well-known/jwks.json')).body.keys;
    t.ok(
      jwks.some((k: any) => k.kid === 'sidecar-key-1' && k.x === x),
      'published',
    );
    t.ok(
      jwks.some((k: any) => k.kid === 'sidecar-key-2' && k.x === x2),
      "the other replica's too",
    );
    t.equal(
      (await post([{ kty: 'OKP', crv: 'Ed25519', x: x2, kid: 'sidecar-key-1' }])).status,
      409,
      'a key id registered with another key',
    );
    // Another sidecar cannot take that key id.
    const second = await createSidecarToken(svc, svc.pat, 'pod-2');
    const taken = await svc.call('/api/sync/mandate-keys', {
      token: second.token,
      body: { keys: [{ kty: 'OKP', crv: 'Ed25519', x, kid: 'sidecar-key-1' }] },
    });
    t.equal(taken.status, 409);
  });

  t.test("a sidecar's mandate key signs for its own org only, online and offline", async (t) => {
    // Org `other`'s sidecar registers a key and signs a mandate naming org default's agent.
    const theirs = await createSidecarToken(svc, other.adminPat, 'b-minter');
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'b-minter-key' };
    const reg = await svc.call('/api/sync/mandate-keys', { token: theirs.token, body: { keys: [jwk] } });
    t.equal(reg.status, 200);
    // The issuer a real mandate names.
    const real = await svc.call('/v1/govern', {
      token: svc.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool: 't.x' } },
    });
    const iss = decodeJwt(real.body.mandate as string).iss as string;
    const mint = async (org: string): Promise<string> => {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({
        org,
        behavior_id: 'bh_x',
        pipeline_id: 'pl_x',
        cap: { type: 'TOOL_CALL', tool: 'db.delete', args_sha256: 'a'.repeat(64) },
      })
        .setProtectedHeader({ alg: 'EdDSA', typ: 'JWT', kid: 'b-minter-key' })
        .setSubject('default-agent')
        .setIssuer(iss)
        .setJti(`mdt_${'x'.repeat(22)}${org.length}`)
        .setIssuedAt(now)
        .setExpirationTime(now + 60)
        .sign(privateKey);
    };
    const verify = async (token: string) => (await svc.call('/v1/tokens/verify', { body: { token } })).body;
    t.same(
      await verify(await mint('default')),
      { valid: false, error: 'unknown_key' },
      "another org's mandate",
    );
    t.equal((await verify(await mint(other.orgId))).valid, true, "its own org's mandate");
    // Offline: the published key names its org by digest.
    const published = (await svc.call('/.well-known/jwks.json')).body.keys.find(
      (k: any) => k.kid === 'b-minter-key',
    );
    t.equal(published.org_sha256, createHash('sha256').update(other.orgId).digest('hex'));
  });

  t.test('approvals asked by a sidecar: agents of its org only', async (t) => {
    const body = {
      agent_uuid: other.agentUuid,
      fingerprint: 'a'.repeat(64),
      tier: 'standard',
      summary: 'x',
    };
    const foreign = await sync('/api/sync/approvals', { body });
    t.equal(foreign.status, 404);
    const me = await svc.call('/api/agents?limit=100', { token: svc.pat });
    const agent = me.body.data.find((a: any) => a.agent_id === 'default-agent');
    const created = await sync('/api/sync/approvals', { body: { ...body, agent_uuid: agent.agent_uuid } });
    t.equal(created.status, 200);
    t.match(created.body.request_id, /^apr_/);
    t.equal(created.body.status, 'pending');
  });

  t.test('a revoked sidecar token is refused at once, but for shipping the log it holds', async (t) => {
    const del = await svc.call(`/api/sidecars/${sidecarId}`, { method: 'DELETE', token: svc.pat });
    t.equal(del.status, 200);
    t.ok(del.body.revoked_at);
    t.equal((await sync('/api/sync/snapshot')).status, 401);
    t.equal((await sync('/api/sync/mandate-keys', { body: { keys: [] } })).status, 401);
    t.equal((await sync('/api/sync/approvals', { body: {} })).status, 401);
    // Its log's state and entries are still taken for a while (docs/sidecar.md): the push is
    // checked as any other (not refused for its token).
    t.not((await push(entries('default', 1))).status, 401, 'its entries are still read');
    const audit = await svc.call('/api/audit?event_type=admin.sidecar_revoked', { token: svc.pat });
    t.equal(audit.body.data.length, 1, 'the revocation is in the org chain');
    t.equal(audit.body.data[0].details.sidecar_id, sidecarId);
  });
});
