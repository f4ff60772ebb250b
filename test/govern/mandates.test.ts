import { createHash, createHmac, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  calculateJwkThumbprint,
  createLocalJWKSet,
  decodeProtectedHeader,
  type JSONWebKeySet,
  jwtVerify,
} from 'jose';
import type { Test } from 'tap';
import t from 'tap';
import type { AuditInput, AuditSink } from '../../src/audit/types.js';
import { MandateKeys } from '../../src/crypto/mandate-keys.js';
import { registerMandateRoutes } from '../../src/govern/mandate-routes.js';
import { MandateService } from '../../src/govern/mandates.js';
import { orgDigest } from '../../src/govern/revocation-list.js';
import type { IdentityRepo } from '../../src/identity/repo.js';
import { openStore, type Store } from '../../src/store/db.js';
import { type HarnessResponse, startCoreHarness } from '../helpers/core-harness.js';
import { ISSUER, REQUEST, T0 } from '../helpers/mandates.js';

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');
const unb64 = (part: string | undefined): Record<string, unknown> =>
  JSON.parse(Buffer.from(part ?? '', 'base64url').toString('utf8')) as Record<string, unknown>;

/** A compact JWS made here, independently of the code under test. */
function handSigned(header: unknown, payload: unknown, key: KeyObject): string {
  const input = `${b64(header)}.${b64(payload)}`;
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`;
}

function tempDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-mandates-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function setup(
  t: Test,
  opts: { password?: string; clock?: { now: number } } = {},
): Promise<{ dir: string; store: Store; keys: MandateKeys; mandates: MandateService }> {
  const dir = tempDir(t);
  const store = openStore(join(dir, 'data'));
  t.teardown(() => store.close());
  const clock = opts.clock;
  const keys = MandateKeys.load(join(dir, 'keys'), opts.password, clock ? { now: () => clock.now } : {});
  return { dir, store, keys, mandates: new MandateService(keys, store, ISSUER) };
}

t.test('issue: an EdDSA JWT with exactly the DESIGN claims, verifiable', async (t) => {
  const { keys, mandates } = await setup(t);
  const issued = await mandates.issue(REQUEST, T0 + 400);
  const [h, p, s] = issued.token.split('.');
  t.same(decodeProtectedHeader(issued.token), { alg: 'EdDSA', kid: keys.active.kid, typ: 'JWT' });
  t.strictSame(Object.keys(decodeProtectedHeader(issued.token)).sort(), ['alg', 'kid', 'typ']);
  const claims = unb64(p);
  t.strictSame(claims, {
    iss: ISSUER,
    sub: 'billing-agent',
    org: 'default',
    jti: issued.jti,
    iat: T0 / 1000,
    exp: T0 / 1000 + 60,
    behavior_id: 'bhv_1',
    pipeline_id: 'pl_1',
    cap: { type: 'TOOL_CALL', tool: 'payments.transfer', args_sha256: 'ab'.repeat(32) },
  });
  t.match(issued.jti, /^mdt_[A-Za-z0-9]{22}$/);
  t.equal(issued.exp, T0 / 1000 + 60);
  t.ok(h && s, 'three parts');
  t.not((await mandates.issue(REQUEST, T0)).jti, issued.jti, 'jti is unique');

  const ok = await mandates.verify(issued.token, T0 + 1_000);
  t.same(ok, { valid: true, claims });

  // A tool of null is a valid capability (non-tool behaviours).
  const llm = await mandates.issue(
    { ...REQUEST, cap: { type: 'LLM_CALL', tool: null, args_sha256: '00' } },
    T0,
  );
  const v = await mandates.verify(llm.token, T0);
  t.equal(v.valid, true);
  if (v.valid) t.equal(v.claims.cap.tool, null);
});

t.test('kid is the RFC 7638 thumbprint; JWKS entries are EdDSA signing keys', async (t) => {
  const { keys } = await setup(t);
  const { keys: set } = keys.jwks();
  t.same(
    set.map((k) => k.kid),
    [keys.active.kid, keys.next?.kid],
    'the active key, and the next one published ahead',
  );
  t.not(keys.next?.kid, keys.active.kid);
  for (const jwk of set) {
    t.equal(await calculateJwkThumbprint({ kty: jwk.kty, crv: jwk.crv, x: jwk.x }, 'sha256'), jwk.kid);
    t.same(
      { kty: jwk.kty, crv: jwk.crv, alg: jwk.alg, use: jwk.use },
      {
        kty: 'OKP',
        crv: 'Ed25519',
        alg: 'EdDSA',
        use: 'sig',
      },
    );
    t.notOk('d' in jwk, 'no private part is published');
  }
});

t.test('tampered or foreign tokens are invalid', async (t) => {
  const { store, keys, mandates } = await setup(t);
  const { token } = await mandates.issue(REQUEST, T0);
  const [h, p, s] = token.split('.') as [string, string, string];
  const now = T0 + 1_000;
  const check = async (name: string, tok: string, errors: readonly string[]): Promise<void> => {
    const r = await mandates.verify(tok, now);
    t.equal(r.valid, false, `${name} is invalid`);
    if (!r.valid) t.ok(errors.includes(r.error), `${name}: ${r.error} is one of ${errors.join(', ')}`);
  };

  const payload = unb64(p);
  await check('payload with another agent', `${h}.${b64({ ...payload, sub: 'other-agent' })}.${s}`, [
    'signature_invalid',
  ]);
  await check(
    'payload with a later exp',
    `${h}.${b64({ ...payload, exp: (payload.exp as number) + 30 })}.${s}`,
    ['signature_invalid'],
  );
  // Flip one character in the middle of the signature (the last one may only carry padding bits).
  const mid = s.length >> 1;
  const flipped = `${s.slice(0, mid)}${s[mid] === 'A' ? 'B' : 'A'}${s.slice(mid + 1)}`;
  await check('flipped signature', `${h}.${p}.${flipped}`, ['signature_invalid']);
  await check('no signature', `${h}.${p}.`, ['signature_invalid', 'malformed']);
  await check('alg none', `${b64({ alg: 'none', typ: 'JWT' })}.${p}.`, [
    'algorithm_not_allowed',
    'malformed',
  ]);
  await check('alg none with kid', `${b64({ alg: 'none', kid: keys.active.kid, typ: 'JWT' })}.${p}.`, [
    'algorithm_not_allowed',
    'malformed',
  ]);
  const priv = keys.active.privateKey;
  await check('unknown kid', handSigned({ alg: 'EdDSA', kid: 'not-a-key', typ: 'JWT' }, payload, priv), [
    'unknown_key',
  ]);
  // HS256 "signed" with the public key bytes: the classic algorithm confusion.
  const x = (keys.jwks().keys[0]?.x ?? '') as string;
  const hsInput = `${b64({ alg: 'HS256', kid: keys.active.kid, typ: 'JWT' })}.${p}`;
  const hs = createHmac('sha256', Buffer.from(x, 'base64url')).update(hsInput).digest('base64url');
  await check('HS256 with the public key', `${hsInput}.${hs}`, ['algorithm_not_allowed']);
  const foreign = generateKeyPairSync('ed25519').privateKey;
  await check('another key under our kid', handSigned(decodeProtectedHeader(token), payload, foreign), [
    'signature_invalid',
  ]);
  await check(
    'typ changed',
    handSigned({ alg: 'EdDSA', kid: keys.active.kid, typ: 'at+jwt' }, payload, priv),
    ['claims_invalid'],
  );
  await check('not a JWT', 'hello', ['malformed']);
  await check('empty', '', ['malformed']);
  await check('too long', `${h}.${'A'.repeat(10_000)}.${s}`, ['malformed']);

  // Well signed by our key, but not a mandate's shape or lifetime.
  const hdr = decodeProtectedHeader(token);
  const { cap: _cap, ...noCap } = payload;
  await check('missing cap', handSigned(hdr, noCap, priv), ['claims_invalid']);
  await check(
    'cap without args_sha256',
    handSigned(hdr, { ...payload, cap: { type: 'TOOL_CALL', tool: 'x' } }, priv),
    ['claims_invalid'],
  );
  await check(
    'an hour-long lifetime',
    handSigned(hdr, { ...payload, exp: (payload.iat as number) + 3600 }, priv),
    ['claims_invalid'],
  );
  await check('another issuer', handSigned(hdr, { ...payload, iss: 'https://evil.test' }, priv), [
    'issuer_mismatch',
  ]);
  const other = new MandateService(keys, store, 'https://other.test');
  t.same(
    await other.verify(token, now),
    { valid: false, error: 'issuer_mismatch' },
    'another issuer verifying',
  );
});

t.test('expiry and clock tolerance', async (t) => {
  const { mandates } = await setup(t);
  const { token } = await mandates.issue(REQUEST, T0);
  const at = async (ms: number): Promise<string> => {
    const r = await mandates.verify(token, T0 + ms);
    return r.valid ? 'valid' : r.error;
  };
  t.equal(await at(0), 'valid');
  t.equal(await at(59_000), 'valid');
  t.equal(await at(64_000), 'valid', 'within the 5 s tolerance after exp');
  t.equal(await at(66_000), 'expired');
  t.equal(await at(3_600_000), 'expired');
  t.equal(await at(-4_000), 'valid', 'within the tolerance before iat');
  t.equal(await at(-10_000), 'not_yet_valid', 'issued in the future');
});

t.test('revocation', async (t) => {
  const { store, mandates } = await setup(t);
  const a = await mandates.issue(REQUEST, T0);
  const b = await mandates.issue(REQUEST, T0);
  const first = await mandates.revoke(a.jti, 'default', 'usr_1', 'leaked', T0 + 1_000);
  t.equal(first.created, true);
  t.same(first.record, {
    jti: a.jti,
    org_id: 'default',
    revoked_at: new Date(T0 + 1_000).toISOString(),
    revoked_by: 'usr_1',
    reason: 'leaked',
  });
  t.same(store.revokedMandates.get([a.jti, 'default']), first.record, 'stored under [jti, org]');
  t.same(await mandates.verify(a.token, T0 + 2_000), { valid: false, error: 'revoked' });
  t.equal((await mandates.verify(b.token, T0 + 2_000)).valid, true, 'other mandates unaffected');

  const again = await mandates.revoke(a.jti, 'default', 'usr_2', undefined, T0 + 5_000);
  t.equal(again.created, false, 'idempotent');
  t.same(again.record, first.record, 'the first record is kept');
  // Another org naming b's jti revokes its own mandate of that jti, if any: not b (org default).
  const foreign = await mandates.revoke(b.jti, 'other-org', 'usr_3', undefined, T0 + 6_000, {
    unproven: true,
  });
  t.equal(foreign.created, true);
  t.equal(
    (await mandates.verify(b.token, T0 + 7_000)).valid,
    true,
    "another org's revocation does not apply",
  );
  // A row an earlier build keyed by [jti] alone still applies, to its own org's mandate only.
  const c = await mandates.issue(REQUEST, T0);
  await store.writer.enqueue(() =>
    store.revokedMandates.putSync([c.jti], { ...first.record, jti: c.jti, org_id: 'default' }),
  );
  t.same(await mandates.verify(c.token, T0 + 7_000), { valid: false, error: 'revoked' }, 'legacy row');

  const list = mandates.revoked(T0 + 10_000);
  t.same(list, {
    revoked: [
      { jti: a.jti, org_sha256: orgDigest('default'), revoked_at: first.record.revoked_at },
      { jti: b.jti, org_sha256: orgDigest('other-org'), revoked_at: foreign.record.revoked_at },
    ],
    updated_at: new Date(T0 + 10_000).toISOString(),
  });
  t.notOk(JSON.stringify(list).includes('default'), 'the public list spells no org');

  // After the retention window it is no longer listed, and sweep deletes it.
  const later = T0 + 6_000 + 3_600_000 + 1;
  t.same(mandates.revoked(later).revoked, []);
  t.equal(await mandates.sweep(T0 + 2_000), 0, 'nothing stale yet');
  t.equal(await mandates.sweep(later), 2);
  t.equal(store.revokedMandates.get([a.jti, 'default']), undefined);
});

t.test('rotation: old mandates keep verifying; both keys are published', async (t) => {
  const clock = { now: T0 };
  const { dir, store, keys, mandates } = await setup(t, { clock });
  const before = await mandates.issue(REQUEST, T0);
  const oldKid = keys.active.kid;
  const published = keys.jwks().keys.map((k) => k.kid);
  t.equal(keys.generation, 0);
  clock.now = T0 + 10_000;
  const rotation = keys.rotate();
  t.equal(keys.generation, 1);
  const newKid = keys.active.kid;
  t.not(newKid, oldKid);
  t.ok(published.includes(newKid), 'the key made active was published before the rotation');
  const nextKid = keys.next?.kid as string;
  t.notOk([oldKid, newKid].includes(nextKid), 'and a new next key is made');
  t.same([rotation.active.kid, rotation.retired.kid, rotation.next.kid], [newKid, oldKid, nextKid]);
  const after = await mandates.issue(REQUEST, T0 + 10_000);
  t.equal(decodeProtectedHeader(after.token).kid, newKid);
  t.equal(decodeProtectedHeader(before.token).kid, oldKid);

  t.same(
    keys
      .jwks()
      .keys.map((k) => k.kid)
      .sort(),
    [oldKid, newKid, nextKid].sort(),
  );
  t.equal((await mandates.verify(before.token, T0 + 20_000)).valid, true, 'signed before rotation');
  t.equal((await mandates.verify(after.token, T0 + 20_000)).valid, true, 'signed after rotation');
  const retired = keys.entries().find((e) => e.kid === oldKid);
  t.equal(retired?.retired_at, new Date(T0 + 10_000).toISOString());
  t.equal(keys.entries().find((e) => e.kid === newKid)?.retired_at, null);

  // The retired private key is gone; the index survives a restart.
  const files = readdirSync(join(dir, 'keys', 'mandate')).sort();
  t.same(files, [`${newKid}.pem`, `${nextKid}.pem`, 'keys.json'].sort());
  const reloaded = MandateKeys.load(join(dir, 'keys'), undefined, { now: () => T0 + 20_000 });
  t.equal(reloaded.active.kid, newKid);
  t.same(reloaded.jwks(), keys.jwks(T0 + 20_000));
  const fresh = new MandateService(reloaded, store, ISSUER);
  t.equal((await fresh.verify(before.token, T0 + 20_000)).valid, true, 'old mandate, reloaded keys');

  // Past the publish window the retired key leaves the set.
  t.same(
    keys.jwks(T0 + 10_000 + 3_600_000).keys.map((k) => k.kid),
    [newKid, nextKid],
  );
});

t.test('a keys dir from before the next key gains one at load; a password seals it too', async (t) => {
  const dir = tempDir(t);
  const keysDir = join(dir, 'keys');
  const first = MandateKeys.load(keysDir);
  const activeKid = first.active.kid;
  const nextKid = first.next?.kid as string;
  // The index as the version before pre-publication wrote it: the active key alone.
  const indexPath = join(keysDir, 'mandate', 'keys.json');
  const index = JSON.parse(readFileSync(indexPath, 'utf8'));
  writeFileSync(
    indexPath,
    JSON.stringify({
      v: 1,
      active: activeKid,
      keys: index.keys.filter((e: { kid: string }) => e.kid === activeKid),
    }),
  );
  rmSync(join(keysDir, 'mandate', `${nextKid}.pem`));
  const upgraded = MandateKeys.load(keysDir, 'correct horse');
  t.equal(upgraded.active.kid, activeKid, 'the active key stays');
  const gained = upgraded.next?.kid as string;
  t.ok(gained);
  t.same(
    upgraded.jwks().keys.map((k) => k.kid),
    [activeKid, gained],
  );
  for (const kid of [activeKid, gained])
    t.match(
      readFileSync(join(keysDir, 'mandate', `${kid}.pem`), 'utf8'),
      /^-----BEGIN ENCRYPTED PRIVATE KEY-----/,
      `${kid === activeKid ? 'active' : 'next'} key sealed with the password`,
    );
  t.same(MandateKeys.load(keysDir, 'correct horse').next?.kid, gained, 'kept across loads');

  // An index naming a next key it does not list is refused.
  writeFileSync(indexPath, JSON.stringify({ ...JSON.parse(readFileSync(indexPath, 'utf8')), next: 'nope' }));
  t.throws(() => MandateKeys.load(keysDir, 'correct horse'), /unknown next key/);
});

t.test('a password set later seals the next key as well as the active one', async (t) => {
  const keysDir = join(tempDir(t), 'keys');
  const plain = MandateKeys.load(keysDir);
  const pem = (kid: string | undefined): string =>
    readFileSync(join(keysDir, 'mandate', `${kid}.pem`), 'utf8');
  t.match(pem(plain.next?.kid), /^-----BEGIN PRIVATE KEY-----/);
  const sealed = MandateKeys.load(keysDir, 'pw');
  t.match(pem(sealed.active.kid), /^-----BEGIN ENCRYPTED PRIVATE KEY-----/);
  t.match(pem(sealed.next?.kid), /^-----BEGIN ENCRYPTED PRIVATE KEY-----/);
  t.throws(() => MandateKeys.load(keysDir, 'wrong'), /mandate signing key/);
});

t.test('private keys at rest: PKCS#8 PEM, mode 0600, encrypted with a password', async (t) => {
  const plain = await setup(t);
  const plainPem = join(plain.dir, 'keys', 'mandate', `${plain.keys.active.kid}.pem`);
  t.match(readFileSync(plainPem, 'utf8'), /^-----BEGIN PRIVATE KEY-----/);
  t.equal(statSync(plainPem).mode & 0o777, 0o600);

  const enc = await setup(t, { password: 'correct horse' });
  const encPem = join(enc.dir, 'keys', 'mandate', `${enc.keys.active.kid}.pem`);
  t.match(readFileSync(encPem, 'utf8'), /^-----BEGIN ENCRYPTED PRIVATE KEY-----/);
  t.equal(statSync(encPem).mode & 0o777, 0o600);
  t.throws(() => MandateKeys.load(join(enc.dir, 'keys')), /mandate signing key/, 'no password');
  t.throws(() => MandateKeys.load(join(enc.dir, 'keys'), 'wrong'), /mandate signing key/, 'wrong password');
  const again = MandateKeys.load(join(enc.dir, 'keys'), 'correct horse');
  t.equal(again.active.kid, enc.keys.active.kid);
  enc.keys.rotate();
  const rotatedPem = join(enc.dir, 'keys', 'mandate', `${enc.keys.active.kid}.pem`);
  t.match(readFileSync(rotatedPem, 'utf8'), /^-----BEGIN ENCRYPTED PRIVATE KEY-----/, 'rotated key too');
});

t.test('offline verification with only the JWKS document and the revocation list', async (t) => {
  const { keys, mandates } = await setup(t);
  const kept = await mandates.issue(REQUEST, Date.now());
  keys.rotate();
  const revokedOne = await mandates.issue(REQUEST, Date.now());
  await mandates.revoke(revokedOne.jti, 'default', 'usr_1');
  // What a verifier downloads, as plain JSON; nothing of govgate is used past this point.
  const jwksDoc = JSON.parse(JSON.stringify(keys.jwks())) as JSONWebKeySet;
  const revokedDoc = JSON.parse(JSON.stringify(mandates.revoked())) as { revoked: { jti: string }[] };
  t.same(await offlineVerify(kept.token, jwksDoc, revokedDoc), { ok: true, sub: 'billing-agent' });
  t.same(await offlineVerify(revokedOne.token, jwksDoc, revokedDoc), { ok: false, why: 'revoked' });
  const [h, p, s] = kept.token.split('.');
  const forged = `${h}.${b64({ ...unb64(p), cap: { ...REQUEST.cap, tool: 'shell.exec' } })}.${s}`;
  t.same(await offlineVerify(forged, jwksDoc, revokedDoc), {
    ok: false,
    why: 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED',
  });
});

/** A third party's verifier: jose and the two public documents, nothing else. */
async function offlineVerify(
  token: string,
  jwks: JSONWebKeySet,
  revoked: { revoked: { jti: string }[] },
): Promise<{ ok: true; sub: unknown } | { ok: false; why: string }> {
  try {
    const { payload } = await jwtVerify(token, createLocalJWKSet(jwks), {
      algorithms: ['EdDSA'],
      issuer: ISSUER,
      clockTolerance: 5,
    });
    if (revoked.revoked.some((r) => r.jti === payload.jti)) return { ok: false, why: 'revoked' };
    return { ok: true, sub: payload.sub };
  } catch (err) {
    return { ok: false, why: String((err as { code?: string }).code) };
  }
}

t.test('issue and verify cost', async (t) => {
  const { mandates } = await setup(t);
  for (let i = 0; i < 200; i++) await mandates.issue(REQUEST);
  // CPU time as well as wall time: the wall clock is noisy on a shared machine.
  const measure = async (n: number, f: () => Promise<unknown>): Promise<string> => {
    const cpu0 = process.cpuUsage();
    const wall0 = performance.now();
    for (let i = 0; i < n; i++) await f();
    const cpu = process.cpuUsage(cpu0);
    const wall = ((performance.now() - wall0) * 1000) / n;
    return `${((cpu.user + cpu.system) / n).toFixed(1)} µs CPU, ${wall.toFixed(1)} µs wall`;
  };
  let last = '';
  const issue = await measure(2000, async () => {
    last = (await mandates.issue(REQUEST)).token;
  });
  const verify = await measure(500, () => mandates.verify(last));
  t.comment(`issue(): ${issue} per mandate; verify(): ${verify} per mandate`);
  t.equal((await mandates.verify(last)).valid, true);
});

interface Harness {
  readonly url: string;
  readonly pat: string;
  readonly identity: IdentityRepo;
  readonly keys: MandateKeys;
  readonly mandates: MandateService;
  /** What the mandate routes appended, in order. */
  readonly recorded: AuditInput[];
  call(path: string, init?: { token?: string; body?: unknown; raw?: string }): Promise<HarnessResponse>;
}

/** The provisioning and mandate routes over a real listener; the mandate routes' appends are recorded. */
async function startHarness(t: Test): Promise<Harness> {
  const recorded: AuditInput[] = [];
  let url = '';
  let keys: MandateKeys | undefined;
  let mandates: MandateService | undefined;
  const h = await startCoreHarness({
    prefix: 'mandates',
    register: ({ config, store, snapshot, router, orgExists }, log) => {
      const audit: AuditSink = {
        append(input) {
          recorded.push(input);
          return log.append(input);
        },
      };
      keys = MandateKeys.load(config.keysDir);
      mandates = new MandateService(keys, store, () => url);
      registerMandateRoutes(router, { snapshot, mandates, keys, audit, orgExists });
    },
  });
  t.teardown(() => h.close());
  url = h.url;
  return {
    url,
    pat: h.pat,
    identity: h.parts.identity,
    keys: keys as MandateKeys,
    mandates: mandates as MandateService,
    recorded,
    call: h.call,
  };
}

function userPat(h: Harness, orgId: string, role: 'admin' | 'developer'): string {
  const user = h.identity.createUser(orgId, `${role}@${orgId}.test`, role);
  return h.identity.createPat(user, { name: role }).secret;
}

t.test('HTTP: jwks, verify, revoked list and revoke', async (t) => {
  const h = await startHarness(t);
  const other = h.identity.createOrg('other').org_id;
  const defaultAdmin = userPat(h, 'default', 'admin');
  const defaultDev = userPat(h, 'default', 'developer');
  const otherAdmin = userPat(h, other, 'admin');

  // JWKS: public, cacheable, the key set.
  const jwks = await h.call('/.well-known/jwks.json');
  t.equal(jwks.status, 200);
  t.equal(jwks.headers.get('cache-control'), 'public, max-age=300');
  t.same(jwks.body, h.keys.jwks());

  // Verify: public, always 200 for a well-formed body.
  const issued = await h.mandates.issue(REQUEST);
  const ok = await h.call('/v1/tokens/verify', { body: { token: issued.token } });
  t.equal(ok.status, 200);
  t.equal(ok.body.valid, true);
  t.equal(ok.body.claims.jti, issued.jti);
  t.equal(ok.body.claims.iss, h.url, 'issuer is the base URL');
  const bad = await h.call('/v1/tokens/verify', { body: { token: 'not.a.jwt' } });
  t.same([bad.status, bad.body], [200, { valid: false, error: 'malformed' }]);
  const notJson = await h.call('/v1/tokens/verify', { raw: '{"token":' });
  t.equal(notJson.status, 400);
  t.equal(notJson.body.error.code, 'invalid_json');
  const noToken = await h.call('/v1/tokens/verify', { body: { jwt: issued.token } });
  t.same(
    [noToken.status, noToken.body.error.code, noToken.body.error.param],
    [400, 'invalid_request', 'token'],
  );
  const arrayBody = await h.call('/v1/tokens/verify', { body: [issued.token] });
  t.equal(arrayBody.status, 400);

  // Revoked list: public, empty at first.
  const empty = await h.call('/v1/mandates/revoked');
  t.equal(empty.status, 200);
  t.same(empty.body.revoked, []);
  t.match(empty.body.updated_at, /^\d{4}-\d\d-\d\dT/);

  // Revoke: admin+ only.
  const anon = await h.call('/api/mandates/revoke', { body: { jti: issued.jti } });
  t.equal(anon.status, 401);
  const dev = await h.call('/api/mandates/revoke', { token: defaultDev, body: { jti: issued.jti } });
  t.equal(dev.status, 403);
  t.equal(h.recorded.filter((e) => e.event_type === 'admin.mandate_revoked').length, 0);

  // Bad bodies.
  for (const body of [
    {},
    { jti: issued.jti, token: issued.token },
    { jti: 'abc' },
    { jti: issued.jti, extra: 1 },
  ]) {
    const r = await h.call('/api/mandates/revoke', { token: defaultAdmin, body });
    t.equal(r.status, 400, `400 for ${JSON.stringify(body).slice(0, 40)}`);
  }
  const forgedToken = await h.call('/api/mandates/revoke', {
    token: defaultAdmin,
    body: { token: `${issued.token.slice(0, -4)}AAAA` },
  });
  t.same([forgedToken.status, forgedToken.body.error.param], [400, 'token']);

  // Another org's admin presenting the token: 404, nothing revoked.
  const foreign = await h.call('/api/mandates/revoke', { token: otherAdmin, body: { token: issued.token } });
  t.equal(foreign.status, 404);
  t.equal(foreign.body.error.code, 'not_found');
  t.equal(h.mandates.revocation(issued.jti, 'default'), undefined);

  // The org's admin revokes by token.
  const done = await h.call('/api/mandates/revoke', {
    token: defaultAdmin,
    body: { token: issued.token, reason: 'agent compromised' },
  });
  t.equal(done.status, 200);
  t.same(Object.keys(done.body).sort(), ['jti', 'revoked', 'revoked_at']);
  t.same([done.body.jti, done.body.revoked], [issued.jti, true]);
  const events = h.recorded.filter((e) => e.event_type === 'admin.mandate_revoked');
  t.equal(events.length, 1);
  t.equal(events[0]?.org_id, 'default');
  t.match(events[0]?.details, { jti: issued.jti, actor_kind: 'user' });
  t.notOk('reason' in (events[0]?.details ?? {}), 'the reason is not in the hashed details');
  t.match(
    events[0]?.personal,
    { reason: 'agent compromised' },
    'but a personal field, which erasure reaches',
  );
  t.match(events[0]?.details?.credential_id, /^tok_/, 'and the token it used');

  // Repeating is idempotent (same revoked_at, no second event).
  const repeat = await h.call('/api/mandates/revoke', { token: defaultAdmin, body: { jti: issued.jti } });
  t.same([repeat.status, repeat.body.revoked_at], [200, done.body.revoked_at]);
  t.equal(h.recorded.filter((e) => e.event_type === 'admin.mandate_revoked').length, 1);

  // Now verify says revoked, and the public list carries it (with its org's digest).
  const after = await h.call('/v1/tokens/verify', { body: { token: issued.token } });
  t.same(after.body, { valid: false, error: 'revoked' });
  const list = await h.call('/v1/mandates/revoked');
  t.same(list.body.revoked, [
    { jti: issued.jti, org_sha256: orgDigest('default'), revoked_at: done.body.revoked_at },
  ]);

  // Another org's admin naming a live mandate's bare jti: recorded for that org, in its trail,
  // and the mandate (of org default) stays valid, online and offline.
  const live = await h.mandates.issue(REQUEST);
  const foreignJti = await h.call('/api/mandates/revoke', { token: otherAdmin, body: { jti: live.jti } });
  t.equal(foreignJti.status, 200);
  t.equal(h.recorded.filter((e) => e.event_type === 'admin.mandate_revoked').at(-1)?.org_id, other);
  t.same((await h.call('/v1/tokens/verify', { body: { token: live.token } })).body.valid, true);

  // The super_admin revokes a bare jti on behalf of another org.
  const second = await h.mandates.issue({ ...REQUEST, org: other });
  const bySuper = await h.call(`/api/mandates/revoke?org_id=${other}`, {
    token: h.pat,
    body: { jti: second.jti },
  });
  t.equal(bySuper.status, 200);
  t.equal(h.mandates.revocation(second.jti, other)?.org_id, other);
  t.equal(h.recorded.filter((e) => e.event_type === 'admin.mandate_revoked').at(-1)?.org_id, other);

  // Offline, over HTTP: fetch the two documents, then only jose.
  const fresh = await h.mandates.issue(REQUEST);
  const jwksDoc = (await h.call('/.well-known/jwks.json')).body as JSONWebKeySet;
  const revokedDoc = (await h.call('/v1/mandates/revoked')).body as {
    revoked: { jti: string; org_sha256: string }[];
  };
  const verifyAt = async (token: string): Promise<string> => {
    try {
      const { payload } = await jwtVerify(token, createLocalJWKSet(jwksDoc), {
        algorithms: ['EdDSA'],
        issuer: h.url,
      });
      const org = createHash('sha256').update(String(payload.org)).digest('hex');
      return revokedDoc.revoked.some((r) => r.jti === payload.jti && r.org_sha256 === org)
        ? 'revoked'
        : 'valid';
    } catch {
      return 'invalid';
    }
  };
  t.equal(await verifyAt(fresh.token), 'valid');
  t.equal(await verifyAt(issued.token), 'revoked');
  t.equal(await verifyAt(second.token), 'revoked');
  t.equal(await verifyAt(live.token), 'valid', "another org's revocation of its jti, offline too");
});
