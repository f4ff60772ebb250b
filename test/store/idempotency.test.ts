import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { openStore } from '../../src/store/db.js';
import { IdempotencyStore } from '../../src/store/idempotency.js';

const HOUR = 3_600_000;

t.test('sweep removes expired replays, keeps live ones, and yields to other work as it goes', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-idem-'));
  const store = openStore(dir);
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const idem = new IdempotencyStore(store, 24 * HOUR);
  const T0 = Date.now();
  const body = 'x'.repeat(2048);
  store.root.transactionSync(() => {
    for (let i = 0; i < 1000; i++) {
      const old = i % 2 === 0;
      store.idempotency.putSync(['org', 'agent', `k-${i}`], {
        status: 200,
        content_type: 'application/json',
        body,
        pipeline_id: `pl_${i}`,
        body_hash: 'h',
        created_ms: old ? T0 - 25 * HOUR : T0 - HOUR,
      });
    }
  });
  // A sweep of many replays must not hold the event loop for all of them at once.
  let turns = 0;
  let sweeping = true;
  const tick = (): void => {
    if (!sweeping) return;
    turns++;
    setImmediate(tick);
  };
  setImmediate(tick);
  const removed = await idem.sweep(T0);
  sweeping = false;
  t.equal(removed, 500, 'the expired half');
  t.ok(turns >= 5, `other work ran while it swept (${turns} turns)`);
  t.equal(idem.begin('org', 'agent', 'k-0', 'h', T0), undefined, 'an expired key is free again');
  idem.complete('org', 'agent', 'k-0', 'h', undefined);
  t.equal(idem.begin('org', 'agent', 'k-1', 'h', T0)?.pipeline_id, 'pl_1', 'a live one still replays');
  t.equal(await idem.sweep(T0), 0, 'nothing left to remove');
});
