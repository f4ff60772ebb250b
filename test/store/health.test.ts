import { rmSync } from 'node:fs';
import { constants } from 'node:os';
import t from 'tap';
import { ServiceError } from '../../src/core/errors.js';
import { openStore } from '../../src/store/db.js';
import { LowSpaceError, StoreHealth, storageFailure } from '../../src/store/health.js';
import { tempDir } from '../helpers/tmp.js';

const MiB = 1_048_576;

t.test('storage failures are told from other errors by their code', async (t) => {
  const coded = (code: unknown) => Object.assign(new Error('x'), { code });
  t.equal(storageFailure(coded(constants.errno.EIO)), 'EIO', "lmdb's errno (a full disk shows as EIO)");
  t.equal(storageFailure(coded(constants.errno.ENOSPC)), 'ENOSPC');
  t.equal(storageFailure(coded(constants.errno.EDQUOT)), 'EDQUOT');
  t.equal(storageFailure(coded(-30792)), 'MDB_MAP_FULL');
  t.equal(storageFailure(coded('ENOSPC')), 'ENOSPC', "node's fs");
  t.equal(storageFailure(new LowSpaceError(MiB, 64 * MiB)), 'ENOSPC');
  t.equal(storageFailure(coded(-30781)), undefined, 'MDB_BAD_VALSIZE is a bug, not the disk');
  t.equal(storageFailure(coded(constants.errno.EINVAL)), undefined);
  t.equal(storageFailure(new ServiceError('conflict', 'exists')), undefined);
  t.equal(storageFailure(new Error('bug')), undefined);
  t.equal(storageFailure('ENOSPC'), undefined);
});

t.test(
  'below the reserve: refused with 503, reported once each way, probed until space is back',
  async (t) => {
    let free = 10 * MiB;
    let now = 0;
    const failed: unknown[] = [];
    const recovered: unknown[] = [];
    let probes = 0;
    const health: StoreHealth = new StoreHealth(
      async () => {
        probes++;
        health.beforeCommit();
        health.committed();
      },
      {
        events: { failed: (f) => failed.push(f), recovered: (f) => recovered.push(f) },
        reserve: { minFreeBytes: 64 * MiB, freeBytes: () => free },
        now: () => now,
      },
    );
    for (let i = 0; i < 3; i++) {
      const err = t.throws(() => health.beforeCommit()) as ServiceError;
      t.equal(err.code, 'unavailable');
      t.equal(err.status, 503);
      t.match(err.message, /cannot commit writes \(ENOSPC\)/);
      t.type(err.cause, LowSpaceError);
    }
    t.equal(health.writable, false);
    t.same(failed, [
      { code: 'ENOSPC', error: '10 MiB free for the data dir, below SERVICE_STORE_MIN_FREE_MB (64)' },
    ]);
    await t.rejects(health.check() as Promise<void>, { code: 'unavailable' }, 'the probe finds no space');
    t.equal(probes, 1);
    free = 100 * MiB; // read again at once while refusing, whatever the clock says
    now = 5_000;
    await health.check();
    t.equal(health.writable, true);
    t.equal(probes, 2);
    t.same(recovered, [{ code: 'ENOSPC', failed_ms: 5_000, refused: 4 }]);
    t.equal(health.check(), undefined, 'nothing to wait for once writable');
    t.equal(failed.length, 1);
  },
);

t.test('a writable store reads the free space at most every 100 ms', async (t) => {
  let reads = 0;
  let now = 0;
  const health = new StoreHealth(async () => {}, {
    reserve: {
      minFreeBytes: MiB,
      freeBytes: () => {
        reads++;
        return 2 * MiB;
      },
    },
    now: () => now,
  });
  for (let i = 0; i < 10; i++) health.beforeCommit();
  t.equal(reads, 1);
  now = 100;
  health.beforeCommit();
  t.equal(reads, 2);
  const none = new StoreHealth(async () => {}, {
    reserve: { minFreeBytes: 0, freeBytes: () => t.fail('no reserve, no reading') as never },
  });
  none.beforeCommit();
});

t.test('a store opened below its reserve serves reads and refuses writes with 503', async (t) => {
  const dir = tempDir('govgate-health-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const before = openStore(dir);
  await before.writer.enqueue(() => before.meta.putSync('k', 'v'));
  await before.close();

  // No data dir has 100 TB free.
  const store = openStore(dir, { minFreeMb: 100_000_000 });
  t.equal(store.meta.get('k'), 'v', 'reads are served');
  await t.rejects(
    store.writer.enqueue(() => store.meta.putSync('k', 'w')),
    { code: 'unavailable', status: 503 },
  );
  t.throws(() => store.meta.putSync('k', 'w'), { code: 'unavailable' }, 'a write outside the writer too');
  t.throws(
    () => store.root.transactionSync(() => store.meta.putSync('k', 'w')),
    { code: 'unavailable' },
    'and a transaction of the control plane',
  );
  t.equal(store.health.writable, false);
  await t.rejects(store.health.check() as Promise<void>, { code: 'unavailable' });
  t.equal(store.meta.get('k'), 'v', 'nothing was written');
  await store.close();

  const after = openStore(dir);
  await after.writer.enqueue(() => after.meta.putSync('k', 'w'));
  t.equal(after.meta.get('k'), 'w', 'with space, writes go through');
  await after.close();
});
