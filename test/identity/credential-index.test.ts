import { rmSync } from 'node:fs';
import t from 'tap';
import { IdentityRepo, MAX_LIVE_CREDENTIALS } from '../../src/identity/repo.js';
import { openStore } from '../../src/store/db.js';
import { hashCredential } from '../../src/util/ids.js';
import { tempDir } from '../helpers/tmp.js';

/** A store in a fresh directory and its IdentityRepo; `reopen` closes both and opens them again. */
function identityStore(t: { teardown(fn: () => Promise<void>): void }) {
  const dir = tempDir('govgate-identity-');
  const opened = {
    store: openStore(dir),
    repo: undefined as unknown as IdentityRepo,
    async reopen() {
      await opened.store.close();
      opened.store = openStore(dir);
      opened.repo = new IdentityRepo(opened.store);
      return { store: opened.store, repo: opened.repo };
    },
  };
  opened.repo = new IdentityRepo(opened.store);
  t.teardown(async () => {
    await opened.store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return opened;
}

// A sidecar snapshot lists its org's live agent keys. They are read from an index by org, so the
// cost of one org's snapshot does not grow with every credential of the deployment (each identity
// change rebuilt it by scanning them all, revoked ones included); a store from before the index
// gets it built when it opens.
t.test("an org's live agent keys come from the org index, kept on issue and revoke", async (t) => {
  const opened = identityStore(t);
  let { store, repo } = opened;
  const a = repo.createOrg('a');
  const b = repo.createOrg('b');
  const agentA = repo.onboardAgent(a.org_id, { agent_id: 'bot' });
  const agentB = repo.onboardAgent(b.org_id, { agent_id: 'bot' });
  const keysA = [repo.createAgentKey(agentA, {}), repo.createAgentKey(agentA, {})];
  const keyB = repo.createAgentKey(agentB, {});
  const user = repo.createUser(a.org_id, 'admin@a.example', 'admin');
  repo.createPat(user, {});
  const ids = (org: string) => [...repo.agentCredentials(org)].map((c) => c.record.credential_id).sort();
  t.same(ids(a.org_id), keysA.map((k) => k.record.credential_id).sort(), "org a's keys, not its PAT");
  t.same(ids(b.org_id), [keyB.record.credential_id]);
  repo.revokeCredential(keysA[0]?.record.credential_id as string);
  t.same(ids(a.org_id), [keysA[1]?.record.credential_id], 'a revoked key leaves the index');
  // An expired key is not listed either (a sidecar would refuse it anyway).
  const expired = repo.createAgentKey(agentA, {});
  await store.root.transaction(() => {
    const hash = store.credentials.get(`id:${expired.record.credential_id}`) as string;
    store.credentials.putSync(hash, {
      ...expired.record,
      expires_at: new Date(Date.now() - 1000).toISOString(),
    });
  });
  t.same(ids(a.org_id), [keysA[1]?.record.credential_id], 'an expired key is not listed');

  // A store written before the index: its entries and mark removed, then opened again.
  await store.root.transaction(() => {
    for (const key of store.credentials.getKeys({ start: 'ak:', end: 'ak:\uffff' }))
      store.credentials.removeSync(key);
    store.credentials.removeSync('meta:agent-key-index');
  });
  t.same(ids(a.org_id), [], 'without the index nothing is found');
  ({ store, repo } = await opened.reopen());
  t.same(ids(a.org_id), [keysA[1]?.record.credential_id], 'built again when the store opens');
  t.same(ids(b.org_id), [keyB.record.credential_id]);
  t.ok(repo.authenticate(keyB.secret), 'authentication is untouched');
});

// Any requester can mint its own tokens, and a developer keys for an agent: each subject holds at
// most MAX_LIVE_CREDENTIALS live ones, so one caller cannot grow the store (and its org's sidecar
// snapshots) without end. Revoked and expired ones do not count.
t.test('a user or an agent holds at most MAX_LIVE_CREDENTIALS live credentials', async (t) => {
  const opened = identityStore(t);
  let { store, repo } = opened;
  const org = repo.createOrg('a');
  const user = repo.createUser(org.org_id, 'dev@a.example', 'developer');
  const agent = repo.onboardAgent(org.org_id, { agent_id: 'bot' });
  const pats = [];
  for (let i = 0; i < MAX_LIVE_CREDENTIALS; i++) pats.push(repo.createPat(user, {}));
  for (let i = 0; i < MAX_LIVE_CREDENTIALS; i++) repo.createAgentKey(agent, {});
  const refused = (fn: () => unknown, what: string) => {
    try {
      fn();
      t.fail(`${what}: issued`);
    } catch (err) {
      t.match(
        err,
        { code: 'conflict', message: new RegExp(`already holds ${MAX_LIVE_CREDENTIALS} live`) },
        what,
      );
    }
  };
  refused(() => repo.createPat(user, {}), 'one token more');
  refused(() => repo.createAgentKey(agent, {}), 'one agent key more');
  repo.revokeCredential(pats[0]?.record.credential_id as string);
  t.ok(repo.createPat(user, {}), 'a revoked one makes room');
  refused(() => repo.createPat(user, {}), 'and only one');
  // An expired one does not count either: one issued already past its end (notAfter).
  repo.revokeCredential(pats[1]?.record.credential_id as string);
  repo.createPat(user, { notAfter: new Date(Date.now() - 1000).toISOString() });
  t.ok(repo.createPat(user, {}), 'an expired one makes no difference to the count');
  // A store from before the index: built when it opens, and the cap holds.
  await store.root.transaction(() => {
    for (const key of store.credentials.getKeys({ start: 'sc:', end: 'sc:\uffff' }))
      store.credentials.removeSync(key);
    store.credentials.removeSync('meta:subject-index');
  });
  ({ store, repo } = await opened.reopen());
  refused(() => repo.createPat(user, {}), 'after the index is built again');
});

// Creating an org or a user checks its name or address through an index, not a scan of every
// record of the deployment inside the write transaction; an org's users are read from its range.
t.test('org names and user addresses are unique through their index, built for an older store', async (t) => {
  const opened = identityStore(t);
  let { store, repo } = opened;
  const a = repo.createOrg('acme');
  const b = repo.createOrg('globex');
  t.throws(() => repo.createOrg('acme'), { code: 'conflict' }, 'an org name is taken once');
  const ann = repo.createUser(a.org_id, 'Ann@Acme.example', 'admin');
  repo.createUser(a.org_id, 'bob@acme.example', 'developer');
  repo.createUser(b.org_id, 'ann@acme.example', 'auditor');
  t.throws(
    () => repo.createUser(a.org_id, 'ann@ACME.example', 'auditor'),
    { code: 'conflict' },
    'an address is taken once per org, in any case',
  );
  const emails = (org: string) =>
    repo
      .usersOf(org)
      .map((u) => u.email)
      .sort();
  t.same(emails(a.org_id), ['Ann@Acme.example', 'bob@acme.example']);
  t.same(emails(b.org_id), ['ann@acme.example'], 'the same address in another org is another user');

  // A store written before the index: its entries and mark removed, then opened again.
  await store.root.transaction(() => {
    for (const { key } of store.identityIndex.getRange()) store.identityIndex.removeSync(key);
  });
  ({ store, repo } = await opened.reopen());
  t.throws(() => repo.createOrg('globex'), { code: 'conflict' }, 'names indexed when the store opens');
  t.throws(() => repo.createUser(b.org_id, 'ANN@acme.example', 'auditor'), { code: 'conflict' });
  t.same(emails(a.org_id), ['Ann@Acme.example', 'bob@acme.example']);

  // An erased person's address is free again in their org, and only there.
  repo.eraseSubject(a.org_id, [ann], ['ann@acme.example']);
  t.same(emails(a.org_id), ['bob@acme.example']);
  t.ok(repo.createUser(a.org_id, 'ann@acme.example', 'auditor'), 'the address can be given again');
  t.throws(() => repo.createUser(b.org_id, 'ann@acme.example', 'auditor'), { code: 'conflict' });
});

// Credentials that stopped authenticating are purged (control/credential-purge.ts) with every
// index entry that names them: the subject index (sc:), the org index of agent keys (ak:) and the
// id index, so no entry is left pointing at nothing and a purged secret resolves to nothing.
t.test('a purge deletes ended credentials with all their index entries, page by page', async (t) => {
  const { store, repo } = identityStore(t);
  const org = repo.createOrg('a');
  const agent = repo.onboardAgent(org.org_id, { agent_id: 'bot' });
  const user = repo.createUser(org.org_id, 'dev@a.example', 'developer');
  const live = repo.createAgentKey(agent, {});
  const livePat = repo.createPat(user, {});
  const revokedKey = repo.createAgentKey(agent, {});
  repo.revokeCredential(revokedKey.record.credential_id);
  const revokedPat = repo.createPat(user, {});
  repo.revokeCredential(revokedPat.record.credential_id);
  // Expired, never revoked: still in the subject and org indexes until purged.
  const expired = repo.createPat(user, { notAfter: new Date(Date.now() - 1000).toISOString() });
  const expiredKey = repo.createAgentKey(agent, {});
  const expiredHash = hashCredential(expiredKey.secret);
  await store.root.transaction(() => {
    store.credentials.putSync(expiredHash, {
      ...expiredKey.record,
      expires_at: new Date(Date.now() - 1000).toISOString(),
    });
  });
  t.ok(store.credentials.get(`ak:${org.org_id}:${expiredHash}`), 'an expired key is still indexed');

  // Ended before `before`: found across pages of two keys.
  const before = Date.now() + 1;
  const found = [];
  let after: string | undefined;
  let pages = 0;
  do {
    const page = repo.endedCredentials(before, after, 2);
    found.push(...page.found);
    after = page.next;
    pages++;
  } while (after !== undefined && pages < 1_000);
  t.ok(pages > 2, 'read in pages');
  const ended = [revokedKey, revokedPat, expired, expiredKey].map((c) => c.record.credential_id).sort();
  t.same(found.map((f) => f.record.credential_id).sort(), ended, 'every ended credential, and only those');
  t.same(
    repo.endedCredentials(Date.parse(revokedKey.record.created_at) - 60_000, undefined, 1_000).found,
    [],
    'none ended before then',
  );

  const purged = repo.purgeCredentials(found, before);
  t.same(purged.map((p) => p.record.credential_id).sort(), ended);
  for (const c of [revokedKey, revokedPat, expired, expiredKey]) {
    const hash = hashCredential(c.secret);
    const left = [...store.credentials.getKeys()].filter(
      (k) => String(k).includes(hash) || k === `id:${c.record.credential_id}`,
    );
    t.same(left, [], `${c.record.credential_id}: nothing left`);
    t.equal(
      repo.authenticate(c.secret, 0),
      undefined,
      `${c.record.credential_id}: authenticates nothing, at any time`,
    );
  }
  t.ok(repo.authenticate(live.secret), 'the live key still authenticates');
  t.ok(repo.authenticate(livePat.secret), 'the live token too');
  t.same(
    [...repo.agentCredentials(org.org_id)].map((c) => c.record.credential_id),
    [live.record.credential_id],
  );
  t.same(repo.purgeCredentials(found, before), [], 'a second purge of the same finds nothing');
  // A credential is read again before it goes: one found, then no longer ended by then, stays.
  const late = repo.createAgentKey(agent, {});
  repo.revokeCredential(late.record.credential_id);
  const lateFound = repo.endedCredentials(Date.now() + 1, undefined, 1_000).found;
  t.same(
    repo.purgeCredentials(lateFound, Date.parse(late.record.created_at) - 1),
    [],
    'not ended by then: kept',
  );
  t.ok(store.credentials.get(hashCredential(late.secret)));
});
