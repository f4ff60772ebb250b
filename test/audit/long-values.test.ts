import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { INDEX_VALUE_MAX, indexKey } from '../../src/audit/layout.js';
import { PendingPostings } from '../../src/audit/postings.js';
import { tempLog, waitFor } from './helpers.js';

const A = 'org_long';
const B = 'org_other';

/** Appends events of org B, a few per turn, until `ms` passed; counts what was refused. */
async function loadOtherOrg(h: ReturnType<typeof tempLog>, ms: number) {
  let ok = 0;
  const errors: string[] = [];
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const turn = [];
    for (let i = 0; i < 10; i++)
      turn.push(
        h.log
          .append({
            org_id: B,
            event_type: 'llm_call',
            agent_id: 'b1',
            pipeline_id: 'pl_b',
            outcome: 'allow',
          })
          .then(
            () => ok++,
            (err: unknown) => errors.push(String((err as Error).message)),
          ),
      );
    await Promise.all(turn);
    await new Promise((r) => setImmediate(r));
  }
  return { ok, errors };
}

t.test(
  'over-long indexed values are keyed by digest: stored, found, and no other org is touched',
  async (t) => {
    const h = tempLog({ sealIntervalMs: 60_000, rollupFlushMs: 20 });
    t.teardown(() => h.close());
    const long = {
      pipeline_id: 'p'.repeat(3000),
      session_id: '漢'.repeat(1500), // 3 bytes each once encoded
      task_id: `t${'x'.repeat(INDEX_VALUE_MAX)}`, // one over the bound
      agent_id: 'a'.repeat(5000),
    };
    const edge = 'e'.repeat(INDEX_VALUE_MAX); // at the bound: kept as is
    const first = await h.log.append({ org_id: A, event_type: 'govern.execution', outcome: 'ok', ...long });
    const second = await h.log.append({
      org_id: A,
      event_type: 'govern.execution',
      outcome: 'ok',
      pipeline_id: edge,
      agent_id: long.agent_id,
    });
    const load = await loadOtherOrg(h, 300);
    t.same(load.errors, [], 'no append of another org was refused');
    t.ok(load.ok > 0);
    t.equal(h.log.lastError, undefined, 'no flush failed');
    await waitFor(
      () => h.store.auditMeta.get([A, 'q']) === 2,
      "org A's postings mark reaches its head",
      2_000,
    );
    await waitFor(() => h.store.auditMeta.get([B, 'q']) === load.ok, "org B's postings mark too", 2_000);
    t.equal(h.store.auditMeta.get([A, 'r']), 2, "org A's rollup mark too");

    const keys = [...h.store.auditIndex.getKeys({ start: [A], end: [A, '\uffff'] })] as unknown as Array<
      [string, string, string, number]
    >;
    for (const k of keys) t.ok(k[2].length <= INDEX_VALUE_MAX, `key ${k[1]} holds a bounded value`);
    t.ok(
      keys.some((k) => k[1] === 'p' && k[2] === edge),
      'a value at the bound is stored as it is',
    );
    t.ok(
      keys.some((k) => k[1] === 'p#' && k[2] === indexKey('p', long.pipeline_id)[1]),
      'a longer one by its digest, under a kind of its own',
    );

    const check = (label: string) => {
      const seqs = (f: Record<string, string>) => h.log.search(A, { ...f, limit: 10 }).data.map((e) => e.seq);
      t.same(seqs({ pipeline_id: long.pipeline_id }), [first.seq], `${label}: by long pipeline_id`);
      t.same(seqs({ session_id: long.session_id }), [first.seq], `${label}: by long session_id`);
      t.same(seqs({ task_id: long.task_id }), [first.seq], `${label}: by long task_id`);
      t.same(seqs({ agent_id: long.agent_id }), [second.seq, first.seq], `${label}: by long agent_id`);
      t.same(seqs({ pipeline_id: edge }), [second.seq], `${label}: by a value at the bound`);
      t.same(
        seqs({ agent_id: long.agent_id, pipeline_id: edge }),
        [second.seq],
        `${label}: long and short filters together`,
      );
      // The digest as a value of its own names nothing: it is not the long value's key.
      t.same(seqs({ pipeline_id: indexKey('p', long.pipeline_id)[1] }), [], `${label}: a digest is no alias`);
      t.same(
        h.log.byPipeline(A, long.pipeline_id).map((e) => e.seq),
        [first.seq],
        `${label}: byPipeline`,
      );
    };
    check('stored');
    await h.reopen();
    check('after a restart');
    t.equal(h.log.get(A, 'x'.repeat(5000)), undefined, 'an over-long event id is simply not found');
  },
);

t.test('an org id too long for a key is refused without failing the commit of other orgs', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  const other = h.log.append({ org_id: B, event_type: 'llm_call' });
  await t.rejects(h.log.append({ org_id: 'o'.repeat(3000), event_type: 'llm_call' }), {
    code: 'invalid_request',
  });
  t.same(await other, { id: (await other).id, seq: 1 });
});

t.test('a flush that fails never rolls back appends; it is reported and retried', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000, rollupFlushMs: 10 });
  t.teardown(() => h.close());
  await h.log.append({ org_id: A, event_type: 'llm_call', agent_id: 'a1' });
  // The store refuses org A's rollup mark (a full disk, say) while `broken` holds.
  let broken = true;
  const meta = h.store.auditMeta;
  const put = meta.putSync.bind(meta);
  meta.putSync = ((key: unknown, value: unknown, ...rest: unknown[]) => {
    if (broken && Array.isArray(key) && key[0] === A && key[1] === 'r') throw new Error('disk full');
    return (put as (...a: unknown[]) => unknown)(key, value, ...rest);
  }) as typeof meta.putSync;
  await h.log.append({ org_id: A, event_type: 'llm_call', agent_id: 'a1' });
  const load = await loadOtherOrg(h, 200);
  t.same(load.errors, [], 'every append of every org committed while the flushes failed');
  t.match(String((h.log.lastError as Error | undefined)?.message), /disk full/, 'the failure is reported');
  t.equal(h.store.auditMeta.get([B, 'q']), 0, 'nothing of the failed flushes was stored');
  broken = false;
  await waitFor(() => h.store.auditMeta.get([B, 'q']) === load.ok, 'the next flush stores it all', 2_000);
  t.equal(h.store.auditMeta.get([A, 'r']), 2);
  t.equal(h.log.search(B, { agent_id: 'b1', limit: 1 }).data[0]?.seq, load.ok, 'and search finds it');
});

t.test('a posting list the store refuses is dropped and reported, the others stored', async (t) => {
  const h = tempLog();
  t.teardown(() => h.close());
  const { store } = h;
  const pending = new PendingPostings();
  pending.add('a', 'agent', 1);
  pending.add('a', 'agent', 2);
  const refused: unknown[] = [];
  // A key no list can have (an org id far past LMDB's key size) stands for any refusal.
  const bad = 'o'.repeat(3000);
  const written = store.root.transactionSync(() => pending.write(store, bad, (err) => refused.push(err)));
  t.equal(refused.length, 1, 'the refusal is reported');
  pending.stored(written);
  t.equal(pending.size, 0, 'and the list dropped, not retried at every flush');
  pending.add('a', 'agent', 3);
  const ok = store.root.transactionSync(() => pending.write(store, A, (err) => refused.push(err)));
  pending.stored(ok);
  t.equal(refused.length, 1);
  t.same(store.auditIndex.get([A, 'a', 'agent', 3]), [3], 'later lists are stored');
  await sleep(1);
});
