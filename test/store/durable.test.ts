import { rmSync } from 'node:fs';
import t from 'tap';
import { openStore } from '../../src/store/db.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * durable(): what a commit promises another machine (a shipped audit entry, an acknowledgement)
 * must be on disk, not only in the page cache the 100 ms fsync timer flushes later.
 */
t.test('durable() resolves after an fsync that started after the call', async (t) => {
  const dir = tempDir('govgate-durable-');
  const store = openStore(dir, { syncIntervalMs: 60_000 }); // the timer stays out of the way
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const root = store.root as unknown as { sync(cb: () => void): void };
  const original = root.sync.bind(root);
  const syncs: Array<{ started: number; ended?: number }> = [];
  root.sync = (cb) => {
    const s: { started: number; ended?: number } = { started: performance.now() };
    syncs.push(s);
    // A slow disk: the fsync takes 50 ms.
    setTimeout(
      () =>
        original(() => {
          s.ended = performance.now();
          cb();
        }),
      50,
    );
  };
  await store.writer.enqueue(() => store.meta.putSync('a', 1));
  const asked = performance.now();
  await store.durable();
  t.equal(syncs.length, 1, 'one fsync');
  t.ok((syncs[0]?.started ?? 0) >= asked && syncs[0]?.ended !== undefined, 'started after the call, ended');

  // Asked while an fsync runs: that one may have begun before the commit, so another follows it,
  // shared by every caller that asks meantime.
  const running = store.durable();
  await store.writer.enqueue(() => store.meta.putSync('b', 2));
  const askedAgain = performance.now();
  await new Promise((r) => setTimeout(r, 10));
  const [x, y] = [store.durable(), store.durable()];
  t.equal(x, y, 'callers share the next fsync');
  await Promise.all([running, x]);
  t.equal(syncs.length, 3, 'the running fsync and one more');
  t.ok((syncs[2]?.started ?? 0) >= askedAgain, 'the one more started after the second call');
  t.ok(
    (syncs[2]?.started ?? 0) >= (syncs[1]?.ended ?? Number.POSITIVE_INFINITY),
    'after the running one ended',
  );
});

t.test('with an fsync on every commit, durable() has nothing to wait for', async (t) => {
  const dir = tempDir('govgate-durable-');
  const store = openStore(dir, { syncIntervalMs: 0 });
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  await store.writer.enqueue(() => store.meta.putSync('a', 1));
  await store.durable();
  t.pass('resolved');
});
