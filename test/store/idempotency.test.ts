import { rmSync } from 'node:fs';
import t from 'tap';
import { openStore } from '../../src/store/db.js';
import { IdempotencyStore } from '../../src/store/idempotency.js';
import { tempDir } from '../helpers/tmp.js';

const HOUR = 3_600_000;

t.test('sweep removes expired replays, keeps live ones, and yields to other work as it goes', async (t) => {
  const dir = tempDir('govgate-idem-');
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
  t.equal(idem.begin('org', 'agent', 'k-0', 'h', undefined, T0), undefined, 'an expired key is free again');
  idem.release('org', 'agent', 'k-0');
  t.equal(
    idem.begin('org', 'agent', 'k-1', 'h', undefined, T0)?.pipeline_id,
    'pl_1',
    'a live one still replays',
  );
  t.equal(await idem.sweep(T0), 0, 'nothing left to remove');
  // A record kept when keys bound the body's bytes matches those bytes (the legacy hash) too.
  t.equal(
    idem.begin('org', 'agent', 'k-3', 'canonical', () => 'h', T0)?.pipeline_id,
    'pl_3',
    'a record of the bytes replays',
  );
  t.throws(() => idem.begin('org', 'agent', 'k-5', 'canonical', () => 'other bytes', T0), {
    code: 'idempotency_mismatch',
  });
});

t.test("an org's kept answers are counted, again by each sweep, and past the quota not kept", async (t) => {
  const dir = tempDir('govgate-idem-');
  const store = openStore(dir);
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const answer = (body: string) => ({
    status: 200,
    content_type: 'application/json',
    body,
    pipeline_id: 'pl_x',
  });
  const idem = new IdempotencyStore(store, 24 * HOUR, 10_000);
  const call = async (s: IdempotencyStore, org: string, key: string, body: string): Promise<void> => {
    t.equal(s.begin(org, 'agent', key, 'h'), undefined, `${org} ${key} runs`);
    await s.keep(org, 'agent', key, 'h', answer(body));
    // Committed when keep resolves: what the gateway waits for before it answers.
    t.ok(store.idempotency.get([org, 'agent', key]), `${org} ${key} is in the store`);
    s.release(org, 'agent', key);
  };
  await call(idem, 'org_a', 'k-1', 'é'.repeat(3_000)); // 6,000 bytes of UTF-8
  await call(idem, 'org_a', 'k-2', 'x'.repeat(3_000));
  await call(idem, 'org_a', 'k-3', 'x'.repeat(2_000)); // 11,000 bytes: not kept
  await call(idem, 'org_b', 'k-1', 'x'.repeat(9_000));
  t.equal(idem.keptBytes('org_a'), 9_000, "org_a's kept answers, in UTF-8 bytes");
  t.equal(idem.keptBytes('org_b'), 9_000, "org_b's");
  t.equal(idem.begin('org_a', 'agent', 'k-2', 'h')?.body.length, 3_000, 'a kept one replays');
  t.throws(() => idem.begin('org_a', 'agent', 'k-3', 'h'), { code: 'idempotency_not_kept', status: 409 });
  t.throws(
    () => idem.begin('org_a', 'agent', 'k-3', 'other'),
    { code: 'idempotency_mismatch' },
    'the body is checked first',
  );

  // A new process counts what the store holds with its first sweep.
  await new Promise((r) => setTimeout(r, 20));
  const again = new IdempotencyStore(store, 24 * HOUR, 10_000);
  t.equal(await again.sweep(), 0);
  t.equal(again.keptBytes('org_a'), 9_000, 'counted again after a restart');
  t.equal(again.keptBytes('org_b'), 9_000);
  await call(again, 'org_b', 'k-2', 'x'.repeat(2_000));
  t.throws(
    () => again.begin('org_b', 'agent', 'k-2', 'h'),
    { code: 'idempotency_not_kept' },
    'past the quota counted at start',
  );

  // Once the answers expire, the sweep frees the room.
  t.equal(await again.sweep(Date.now() + 25 * HOUR), 5);
  t.equal(again.keptBytes('org_a'), 0);
  t.equal(again.keptBytes('org_b'), 0);
});

t.test('eraseWhere deletes only the record that matched, and lowers the count once', async (t) => {
  const dir = tempDir('govgate-idem-');
  const store = openStore(dir);
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const answer = (body: string, pipeline_id: string) => ({
    status: 200,
    content_type: 'application/json',
    body,
    pipeline_id,
  });
  const idem = new IdempotencyStore(store, 24 * HOUR);
  await idem.keep('org', 'agent', 'k-1', 'h', answer('x'.repeat(1_000), 'pl_old'));
  await idem.keep('org', 'agent', 'k-2', 'h', answer('z'.repeat(300), 'pl_two'));
  t.equal(idem.keptBytes('org'), 1_300);

  // A new answer is stored under k-1 after the erasure read the old one, before its write: the
  // new one is not the record that matched, and stays.
  const kept = idem.keep('org', 'agent', 'k-1', 'h2', answer('y'.repeat(500), 'pl_new'));
  const erased = idem.eraseWhere('org', new Set(['pl_old']), () => false);
  await kept;
  t.equal(await erased, 0, 'nothing deleted: the record that matched was replaced');
  const rec = store.idempotency.get(['org', 'agent', 'k-1']) as { pipeline_id: string } | undefined;
  t.equal(rec?.pipeline_id, 'pl_new', 'the new answer is kept');
  // The replaced answer stays counted until the next sweep counts again (the class comment).
  t.equal(idem.keptBytes('org'), 1_800, 'nothing subtracted for a record not deleted');

  // Two erasures that both read k-2 delete it once, and lower the count by its bytes once.
  const [a, b] = await Promise.all([
    idem.eraseWhere('org', new Set(['pl_two']), () => false),
    idem.eraseWhere('org', new Set(), (body) => body.startsWith('z')),
  ]);
  t.equal(a + b, 1, 'deleted once');
  t.equal(store.idempotency.get(['org', 'agent', 'k-2']), undefined);
  t.equal(idem.keptBytes('org'), 1_500, "k-2's 300 bytes subtracted once");
  t.equal(await idem.sweep(), 0);
  t.equal(idem.keptBytes('org'), 500, 'the sweep counts what is left');
});
