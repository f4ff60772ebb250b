import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import t from 'tap';
import { MandateKeys } from '../../src/crypto/mandate-keys.js';
import { registerMandateRoutes } from '../../src/govern/mandate-routes.js';
import {
  MandateService,
  type MandateServiceOptions,
  REVOCATION_RETENTION_MS,
  REVOKED_LIST_REFRESH_MS,
} from '../../src/govern/mandates.js';
import { orgDigest } from '../../src/govern/revocation-list.js';
import type { IdentityRepo } from '../../src/identity/repo.js';
import { openStore, type Store } from '../../src/store/db.js';
import { type HarnessResponse, startCoreHarness } from '../helpers/core-harness.js';
import { ISSUER, REQUEST, T0 } from '../helpers/mandates.js';
import { tempDir } from '../helpers/tmp.js';

const iso = (ms: number): string => new Date(ms).toISOString();

/** Counts full reads of the revocation table (`getRange`), from now on. */
function countScans(store: Store): { n: number } {
  const scans = { n: 0 };
  const db = store.revokedMandates;
  const getRange = db.getRange.bind(db);
  db.getRange = ((...args: Parameters<typeof getRange>) => {
    scans.n++;
    return getRange(...args);
  }) as typeof db.getRange;
  return scans;
}

interface Setup {
  readonly dataDir: string;
  readonly keys: MandateKeys;
  store: Store;
  mandates: MandateService;
  /** Closes the store and opens it again with a new service: a restart. */
  restart(): Promise<void>;
}

async function setup(t: Test, opts: MandateServiceOptions = {}): Promise<Setup> {
  const dir = tempDir('govgate-revoked-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const dataDir = join(dir, 'data');
  const keys = MandateKeys.load(join(dir, 'keys'));
  const s: Setup = {
    dataDir,
    keys,
    store: openStore(dataDir),
    mandates: undefined as unknown as MandateService,
    async restart() {
      await s.store.close();
      s.store = openStore(dataDir);
      s.mandates = new MandateService(keys, s.store, ISSUER, opts);
    },
  };
  s.mandates = new MandateService(keys, s.store, ISSUER, opts);
  t.teardown(() => s.store.close());
  return s;
}

t.test('the list: every live revocation once, oldest first, the newest at once', async (t) => {
  const clock = { now: T0 };
  const s = await setup(t, { now: () => clock.now });
  const { mandates, store } = s;
  const a = await mandates.issue(REQUEST);
  const b = await mandates.issue(REQUEST);
  const c = await mandates.issue(REQUEST);
  const scans = countScans(store);

  t.same(mandates.revoked(), { revoked: [], updated_at: iso(T0) });
  await mandates.revoke(a.jti, 'default', 'usr_1');
  clock.now = T0 + 1_000;
  await mandates.revoke(b.jti, 'other', 'usr_2', 'leaked');
  await mandates.revoke(a.jti, 'default', 'usr_1', 'again');
  t.same(mandates.revoked(), {
    revoked: [
      { jti: a.jti, org_sha256: orgDigest('default'), revoked_at: iso(T0) },
      { jti: b.jti, org_sha256: orgDigest('other'), revoked_at: iso(T0 + 1_000) },
    ],
    updated_at: iso(T0 + 1_000),
  });

  // Appended as its revocation commits: listed when revoke() returns, without a rebuild.
  const builds = mandates.revokedListBuilds;
  clock.now = T0 + 120_000;
  await mandates.revoke(c.jti, 'default', 'agt_1', 'consumed by /v1/tools/execute');
  t.same(
    mandates.revoked().revoked.map((r) => r.jti),
    [a.jti, b.jti, c.jti],
  );
  t.equal(mandates.revokedListBuilds, builds, 'a new revocation is appended to the cached text');

  // A revocation stamped earlier than the last (clocks, a slow commit) still lands in order.
  const d = await mandates.issue(REQUEST);
  await mandates.revoke(d.jti, 'default', 'usr_1', undefined, T0 + 500);
  t.same(
    mandates.revoked().revoked.map((r) => r.jti),
    [a.jti, d.jti, b.jti, c.jti],
  );

  // Expiry: a is past retention; the list sheds it when it is next refreshed.
  clock.now = T0 + REVOCATION_RETENTION_MS + 1;
  t.same(
    mandates.revoked().revoked.map((r) => r.jti),
    [d.jti, b.jti, c.jti],
  );
  // d has expired too, but the list was refreshed less than a minute ago: shown a while longer.
  clock.now = T0 + 500 + REVOCATION_RETENTION_MS + 1;
  const refreshed = mandates.revokedListBuilds;
  t.same(
    mandates.revoked().revoked.map((r) => r.jti),
    [d.jti, b.jti, c.jti],
  );
  t.equal(mandates.revokedListBuilds, refreshed, 'no rebuild within the refresh interval');
  clock.now = T0 + REVOCATION_RETENTION_MS + 1 + REVOKED_LIST_REFRESH_MS;
  t.same(mandates.revoked(), {
    revoked: [{ jti: c.jti, org_sha256: orgDigest('default'), revoked_at: iso(T0 + 120_000) }],
    updated_at: iso(clock.now),
  });
  t.equal(scans.n, 0, 'the table was never scanned for the list');

  // The sweep deletes what expired, from the table and from memory.
  t.equal(await mandates.sweep(), 3);
  t.equal(store.revokedMandates.get([a.jti, 'default']), undefined);
  t.equal(store.revokedMandates.get([b.jti, 'other']), undefined);
  t.equal(store.revokedMandates.get([d.jti, 'default']), undefined);
  t.ok(store.revokedMandates.get([c.jti, 'default']), 'the live one is kept');
  t.equal(await mandates.sweep(), 0);
  t.same(
    mandates.revoked().revoked.map((r) => r.jti),
    [c.jti],
  );
  t.equal(scans.n, 0, 'nor for the sweep');
});

t.test('the list survives a restart: loaded from the store once', async (t) => {
  const clock = { now: T0 };
  const s = await setup(t, { now: () => clock.now });
  const jtis: string[] = [];
  for (let i = 0; i < 5; i++) {
    clock.now = T0 + i * 1_000;
    const m = await s.mandates.issue(REQUEST);
    await s.mandates.revoke(m.jti, i % 2 ? 'default' : 'other', 'usr_1');
    jtis.push(m.jti);
  }
  const before = s.mandates.revokedJson();
  await s.restart();
  t.equal(s.mandates.revokedJson(), before, 'the same document after a restart');
  t.same(
    s.mandates.revoked().revoked.map((r) => r.jti),
    jtis,
  );
  const scans = countScans(s.store);
  s.mandates.revokedJson();
  t.equal(scans.n, 0);

  // Rows past retention are loaded but not listed, and the next sweep deletes them.
  clock.now = T0 + 2_000 + REVOCATION_RETENTION_MS;
  await s.restart();
  t.same(
    s.mandates.revoked().revoked.map((r) => r.jti),
    jtis.slice(3),
  );
  t.equal(await s.mandates.sweep(), 3);
  t.equal(s.store.revokedMandates.getCount(), 2);
});

t.test('the sweep works through many rows in batches', async (t) => {
  const clock = { now: T0 };
  const s = await setup(t, { now: () => clock.now });
  await s.store.writer.enqueue(() => {
    for (let i = 0; i < 2_500; i++) {
      s.store.revokedMandates.putSync([`mdt_${String(i).padStart(22, '0')}`], {
        jti: `mdt_${String(i).padStart(22, '0')}`,
        org_id: 'default',
        revoked_at: iso(T0 + i),
        revoked_by: 'usr_1',
        reason: null,
      });
    }
  });
  await s.restart();
  t.equal(s.mandates.revoked().revoked.length, 2_500);
  clock.now = T0 + 1_999 + REVOCATION_RETENTION_MS;
  t.equal(await s.mandates.sweep(undefined, 300), 2_000);
  t.equal(s.store.revokedMandates.getCount(), 500);
  t.same(
    s.mandates.revoked().revoked.map((r) => r.revoked_at),
    Array.from({ length: 500 }, (_, i) => iso(T0 + 2_000 + i)),
  );
});

interface Harness {
  readonly pat: string;
  readonly identity: IdentityRepo;
  readonly mandates: MandateService;
  readonly scans: { n: number };
  call(path: string, init?: { token?: string; body?: unknown }): Promise<HarnessResponse>;
}

async function startHarness(t: Test, opts: MandateServiceOptions = {}): Promise<Harness> {
  let url = '';
  let mandates: MandateService | undefined;
  let scans: { n: number } | undefined;
  const h = await startCoreHarness({
    prefix: 'revoked',
    register: ({ config, store, snapshot, router, orgExists }, log) => {
      const keys = MandateKeys.load(config.keysDir);
      mandates = new MandateService(keys, store, () => url, opts);
      scans = countScans(store);
      registerMandateRoutes(router, { snapshot, mandates, keys, audit: log, orgExists });
    },
  });
  t.teardown(() => h.close());
  url = h.url;
  return {
    pat: h.pat,
    identity: h.parts.identity,
    mandates: mandates as MandateService,
    scans: scans as { n: number },
    call: h.call,
  };
}

t.test('HTTP: GET /v1/mandates/revoked serves the cached list, not a scan', async (t) => {
  const h = await startHarness(t);
  const jtis: string[] = [];
  for (let i = 0; i < 50; i++) {
    const m = await h.mandates.issue(REQUEST);
    const r = await h.call('/api/mandates/revoke', { token: h.pat, body: { jti: m.jti } });
    t.equal(r.status, 200);
    jtis.push(m.jti);
    // Listed as soon as the revoking call has answered.
    if (i % 10 === 0) {
      const list = await h.call('/v1/mandates/revoked');
      t.equal(list.body.revoked.at(-1).jti, m.jti);
    }
  }
  const builds = h.mandates.revokedListBuilds;
  const first = await h.call('/v1/mandates/revoked');
  t.equal(first.status, 200);
  t.match(first.headers.get('content-type'), /^application\/json/);
  t.equal(first.headers.get('cache-control'), 'no-cache');
  t.same(Object.keys(first.body), ['revoked', 'updated_at']);
  t.same(
    first.body.revoked.map((r: { jti: string }) => r.jti),
    jtis,
  );
  for (const r of first.body.revoked) t.same(Object.keys(r), ['jti', 'org_sha256', 'revoked_at']);
  for (let i = 0; i < 20; i++) {
    const again = await h.call('/v1/mandates/revoked');
    t.same(again.body.revoked, first.body.revoked);
  }
  t.equal(h.mandates.revokedListBuilds, builds, 'twenty GETs, no rebuild');
  t.equal(h.scans.n, 0, 'and no scan of the table');
});

t.test('HTTP: revocations by bare jti are capped per org; by token they are not', async (t) => {
  const h = await startHarness(t, { unprovenCap: 3 });
  const other = h.identity.createOrg('other').org_id;
  const adminOf = (org: string): string =>
    h.identity.createPat(h.identity.createUser(org, `admin@${org}.test`, 'admin'), { name: 'a' }).secret;
  const admin = adminOf('default');
  const otherAdmin = adminOf(other);
  const made = (n: number): string => `mdt_${'x'.repeat(16)}${String(n).padStart(6, '0')}`;
  for (let i = 0; i < 3; i++) {
    const r = await h.call('/api/mandates/revoke', { token: admin, body: { jti: made(i) } });
    t.equal(r.status, 200);
  }
  const over = await h.call('/api/mandates/revoke', { token: admin, body: { jti: made(3) } });
  t.equal(over.status, 429);
  t.equal(over.body.error.code, 'rate_limited');
  t.equal(over.headers.get('retry-after'), '60', 'a 429 says when to come back');
  t.match(over.body.error.message, /token/);
  t.equal(h.mandates.revocation(made(3), 'default'), undefined, 'nothing recorded');
  // A repeat of one already revoked is still answered (idempotent).
  t.equal((await h.call('/api/mandates/revoke', { token: admin, body: { jti: made(0) } })).status, 200);
  // Revoking by token proves the mandate is ours: never capped.
  const m = await h.mandates.issue(REQUEST);
  const byToken = await h.call('/api/mandates/revoke', { token: admin, body: { token: m.token } });
  t.equal(byToken.status, 200);
  // Another org has its own allowance.
  const elsewhere = await h.call('/api/mandates/revoke', { token: otherAdmin, body: { jti: made(10) } });
  t.equal(elsewhere.status, 200);
  t.equal((await h.call('/v1/mandates/revoked')).body.revoked.length, 5);
});

t.test('the bare-jti allowance frees up as revocations expire and is kept across a restart', async (t) => {
  const clock = { now: T0 };
  const s = await setup(t, { now: () => clock.now, unprovenCap: 2 });
  const made = (n: number): string => `mdt_${'y'.repeat(16)}${String(n).padStart(6, '0')}`;
  await s.mandates.revoke(made(0), 'default', 'usr_1', undefined, undefined, { unproven: true });
  clock.now = T0 + 1_000;
  await s.mandates.revoke(made(1), 'default', 'usr_1', undefined, undefined, { unproven: true });
  await t.rejects(s.mandates.revoke(made(2), 'default', 'usr_1', undefined, undefined, { unproven: true }), {
    code: 'rate_limited',
  });
  await s.restart();
  await t.rejects(
    s.mandates.revoke(made(2), 'default', 'usr_1', undefined, undefined, { unproven: true }),
    { code: 'rate_limited' },
    'counted again from the store after a restart',
  );
  clock.now = T0 + REVOCATION_RETENTION_MS + 1;
  t.equal(await s.mandates.sweep(), 1);
  // Concurrent attempts cannot overshoot the cap.
  const results = await Promise.allSettled(
    [2, 3, 4].map((n) =>
      s.mandates.revoke(made(n), 'default', 'usr_1', undefined, undefined, { unproven: true }),
    ),
  );
  t.same(
    results.map((r) => r.status),
    ['fulfilled', 'rejected', 'rejected'],
    'one slot freed, one taken, even when asked at once',
  );
});
