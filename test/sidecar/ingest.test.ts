import t from 'tap';
import { SidecarDesk } from '../../src/control/sidecars.js';
import { GENESIS } from '../../src/core/chain/event.js';
import { createVault } from '../../src/crypto/vault.js';
import { IdentityRepo } from '../../src/identity/repo.js';
import { PolicyRepo } from '../../src/store/policies.js';
import { SettingsRepo } from '../../src/store/settings.js';
import { TestSigner, tempLog } from '../audit/helpers.js';
import { sealOf as sealOfOrg, sidecarEntries } from './log.js';

const signer = new TestSigner('govgate-sidecar-ingest');
const sealOf = (hashes: string[]) => sealOfOrg('org1', hashes, signer);
const batch = (org: string, from: number, n: number, prevHash: string) =>
  sidecarEntries(org, n, { seq: from - 1, hash: prevHash });

t.test('ingest: batches in flight together, and a restart, take each entry in once', async (t) => {
  const h = tempLog();
  t.teardown(() => h.close());
  const desk = (): SidecarDesk => {
    const identity = new IdentityRepo(h.store);
    const made = new SidecarDesk({
      store: h.store,
      identity,
      settings: new SettingsRepo(h.store, createVault(Buffer.alloc(32, 1))),
      policies: new PolicyRepo(h.store),
      audit: h.log,
      issuer: () => 'http://control.test',
    });
    desks.push(made);
    return made;
  };
  new IdentityRepo(h.store).createOrg('org one', 'org1');
  const desks: SidecarDesk[] = [];
  t.teardown(() => Promise.all(desks.map((x) => x.close())));
  let d = desk();
  const { record } = await d.create('org1', 'pod', 'usr_test');
  await d.registerLog(record, 'epoch0001', signer.publicDocument());
  const base = h.log.lastSeq('org1'); // the registration is an event of the org chain
  t.equal(base, 1);
  const first = batch('org1', 1, 50, GENESIS);
  const seal50 = [sealOf(first.map((e) => e.hash))];
  // Both checked before either commits: the second must see the first's entries as taken.
  const [a, b] = await Promise.all([
    d.ingest(record, 'epoch0001', first, seal50),
    d.ingest(record, 'epoch0001', first, seal50),
  ]);
  t.equal(a.ingested + b.ingested, 50);
  t.equal(h.log.lastSeq('org1'), base + 50);

  // A batch overlapping what was taken in, sent while the next one is in flight.
  const second = batch('org1', 51, 10, first[49]?.hash as string);
  const seal60 = [sealOf([...first, ...second].map((e) => e.hash))];
  const [c, e] = await Promise.all([
    d.ingest(record, 'epoch0001', [...first.slice(45), ...second], seal60),
    d.ingest(record, 'epoch0001', second, seal60),
  ]);
  t.equal(c.ingested + e.ingested, 10);
  t.equal(h.log.lastSeq('org1'), base + 60);

  await h.reopen();
  d = desk();
  t.same(d.state(record, 'epoch0001'), { epoch: 'epoch0001', index: 60, hash: second[9]?.hash });
  const again = await d.ingest(record, 'epoch0001', second, seal60);
  t.equal(again.ingested, 0, 'after a restart, the state read from the store');
  t.equal(h.log.lastSeq('org1'), base + 60);
  const origins = new Set<number>();
  for (let seq = base + 1; seq <= base + 60; seq++) {
    const ev = h.log.eventTexts('org1', seq, seq);
    for (const { json } of ev) origins.add(JSON.parse(json).origin.index);
  }
  t.equal(origins.size, 60, 'each index once');
  t.equal(h.log.integrity('org1').status, 'intact');
});
