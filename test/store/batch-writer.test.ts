import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { open, type RootDatabase } from 'lmdb';
import type { Test } from 'tap';
import t from 'tap';
import { BatchWriter } from '../../src/store/batch-writer.js';
import { tempDir } from '../helpers/tmp.js';

/** A real LMDB env in a temp dir, its transactions counted, and a clock the test moves. */
function setup(t: Test, idleMs = 0.5) {
  const dir = tempDir('govgate-bw-');
  const root: RootDatabase = open({ path: join(dir, 'x.lmdb'), noSync: true });
  const db = root.openDB({ name: 'd' });
  let commits = 0;
  const txn = root.transactionSync.bind(root);
  root.transactionSync = ((fn: () => unknown) => {
    commits++;
    return txn(fn);
  }) as typeof root.transactionSync;
  const clock = { now: 1_000 };
  let onCommit = 0;
  const writer = new BatchWriter(root, { idleMs, now: () => clock.now, onCommit: () => onCommit++ });
  t.teardown(async () => {
    writer.close();
    await root.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { db, writer, clock, commits: () => commits, onCommits: () => onCommit };
}

const turnEnd = (): Promise<void> => new Promise((r) => setImmediate(r));

t.test(
  'writes queued by one synchronous run share one commit; promises resolve once committed',
  async (t) => {
    const { db, writer, commits, onCommits } = setup(t);
    const done = [1, 2, 3].map((i) => writer.enqueue(() => db.putSync(i, `v${i}`)));
    t.equal(db.get(1), undefined, 'nothing is written before the caller yields');
    await Promise.all(done);
    t.equal(commits(), 1, 'one transaction');
    t.equal(onCommits(), 1);
    t.same([db.get(1), db.get(2), db.get(3)], ['v1', 'v2', 'v3'], 'visible when the promises resolve');
  },
);

t.test('an idle writer commits when the caller yields, before the rest of the turn', async (t) => {
  const { db, writer, commits } = setup(t);
  let seenByImmediate: unknown = 'not run';
  setImmediate(() => {
    seenByImmediate = db.get('k');
  });
  await writer.enqueue(() => db.putSync('k', 'v'));
  t.equal(seenByImmediate, 'not run', 'committed before the turn’s immediates ran');
  await turnEnd();
  t.equal(seenByImmediate, 'v', 'and they see it');
  t.equal(commits(), 1);
});

t.test('under load (a commit just ended) writes of one turn are grouped at its end', async (t) => {
  const { db, writer, clock, commits } = setup(t);
  await writer.enqueue(() => db.putSync('a', 1)); // ends a commit at clock 1000
  clock.now += 0.1; // the next write comes 0.1 ms later: busy
  const first = writer.enqueue(() => db.putSync('b', 2));
  await Promise.resolve(); // a later microtask of the same turn…
  await Promise.resolve();
  t.equal(db.get('b'), undefined, 'not committed at the microtask checkpoint');
  const second = writer.enqueue(() => db.putSync('c', 3)); // …joins the same commit
  await Promise.all([first, second]);
  t.equal(commits(), 2, 'one commit for the first write, one for the two grouped ones');
  t.same([db.get('b'), db.get('c')], [2, 3]);
  clock.now += 0.5; // idle again
  const third = writer.enqueue(() => db.putSync('d', 4));
  await Promise.resolve();
  await Promise.resolve();
  t.equal(db.get('d'), 4, 'idle again: committed at the microtask checkpoint');
  await third;
  t.equal(commits(), 3);
});

t.test('a failing write rejects every caller of its commit; the writer goes on', async (t) => {
  const { db, writer, commits } = setup(t);
  const ok = writer.enqueue(() => db.putSync('x', 1));
  const bad = writer.enqueue(() => {
    throw new Error('disk on fire');
  });
  await t.rejects(ok, /disk on fire/, 'the transaction is aborted for all of its writes');
  await t.rejects(bad, /disk on fire/);
  t.equal(db.get('x'), undefined, 'nothing of it was committed');
  await writer.enqueue(() => db.putSync('y', 2));
  t.equal(db.get('y'), 2);
  t.equal(commits(), 2);
});

t.test('close commits what is queued and refuses later writes', async (t) => {
  const { db, writer } = setup(t);
  const queued = writer.enqueue(() => db.putSync('z', 1));
  writer.close();
  await queued;
  t.equal(db.get('z'), 1);
  await t.rejects(
    writer.enqueue(() => db.putSync('w', 1)),
    { code: 'unavailable' },
  );
});

t.test('a write queued alone commits after the grouped writes, in its own transaction', async (t) => {
  const { db, writer, commits } = setup(t);
  const grouped = writer.enqueue(() => db.putSync('g', 1));
  let seen: unknown;
  const alone = writer.enqueueAlone(() => {
    seen = db.get('later');
    throw new Error('index refused');
  });
  const later = writer.enqueue(() => db.putSync('later', 2)); // queued after it, same flush
  await t.rejects(alone, /index refused/, 'its failure rejects it alone');
  await grouped;
  await later;
  t.equal(seen, 2, 'it ran after every grouped write of its flush');
  t.same([db.get('g'), db.get('later')], [1, 2], 'the grouped writes are committed');
  t.equal(commits(), 2);
  await writer.enqueueAlone(() => db.putSync('a', 3));
  t.equal(db.get('a'), 3, 'queued on its own it commits too');

  // The grouped commit fails: the alone write is not run (it may depend on it) and is rejected.
  let ran = false;
  const bad = writer.enqueue(() => {
    throw new Error('disk on fire');
  });
  const skipped = writer.enqueueAlone(() => {
    ran = true;
  });
  await t.rejects(bad, /disk on fire/);
  await t.rejects(skipped, /disk on fire/);
  t.equal(ran, false);
});
