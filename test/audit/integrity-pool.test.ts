import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ChainLog } from '../../src/audit/chain-log.js';
import { ChainReader } from '../../src/audit/chain-reader.js';
import { IntegrityScan, verifiersFor } from '../../src/audit/integrity.js';
import { IntegrityPool } from '../../src/audit/integrity-pool.js';
import { threadNices } from '../helpers/threads.js';
import { tempLog, testSigner } from './helpers.js';

// The integrity workers read the store the log writes: each scan sees what was committed when it
// started, however soon after the previous one, and a closed pool fails instead of hanging.

const ORG = 'org_pool';
const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 7, integrityWorkers: 1, integrityParallelMin: 0 });
const pool = new IntegrityPool({ dataDir: join(h.dir, 'data'), workers: 1, chunkEvents: 1_000 });
t.teardown(async () => {
  await pool.close();
  await h.close();
});

const refs = await Promise.all(
  Array.from({ length: 30 }, (_, i) =>
    h.log.append({ org_id: ORG, event_type: 'llm_call', agent_id: 'a', details: { n: i } }),
  ),
);
await h.log.flushSeals();
const doc = h.log.publicDocument();
const scan = () =>
  pool.run(new IntegrityScan(new ChainReader(h.store), ORG, verifiersFor(doc)), JSON.stringify(doc));

t.test('back-to-back scans each see the latest commit', async (t) => {
  t.match(await scan(), { status: 'intact', events: 30 });
  const original = h.store.auditEvents.get([ORG, 12]) as string;
  for (let round = 0; round < 20; round++) {
    h.store.auditEvents.putSync([ORG, 12], original.replace('"n":11', '"n":-11'));
    t.match(
      await scan(),
      {
        status: 'compromised',
        broken_events: [{ line: 12, event_id: refs[11]?.id, reason: 'content_modified' }],
      },
      `round ${round}: the edit is seen`,
    );
    h.store.auditEvents.putSync([ORG, 12], original);
    t.match(await scan(), { status: 'intact', events: 30 }, `round ${round}: the restore is seen`);
  }
});

t.test('the endpoint scan runs on the log’s workers and agrees with the inline scan', async (t) => {
  t.same(await h.log.integrityAsync(ORG), h.log.integrity(ORG));
});

t.test(
  'scan workers run at a lower priority than the event loop (Linux)',
  { skip: process.platform !== 'linux' },
  async (t) => {
    await scan(); // the workers are up
    const nices = threadNices();
    const base = nices.get(process.pid) as number;
    t.ok(
      [...nices.values()].filter((n) => n === Math.min(19, base + 10)).length >= 2,
      'the pool’s and the log’s workers run 10 steps nicer than the main thread',
    );
  },
);

t.test('a chunk a worker cannot check rejects the scan', async (t) => {
  const scanned = pool.run(new IntegrityScan(new ChainReader(h.store), ORG, verifiersFor(doc)), '{not json');
  await t.rejects(scanned, /integrity worker: .*JSON/);
  t.match(await scan(), { status: 'intact', events: 30 }, 'the pool keeps working');
});

t.test('when the workers cannot run, the endpoint scan gives the inline verdict', async (t) => {
  // A worker opens the store by its data directory; here that path cannot exist (its parent is a
  // file), so every worker dies on start. The scan must still answer, from this thread.
  const blocker = join(h.dir, 'not-a-dir');
  writeFileSync(blocker, '');
  const log = new ChainLog({ ...h.store, dataDir: join(blocker, 'data') }, testSigner(), {
    dataDir: join(h.dir, 'data'),
    rotationMaxMb: 100,
    integrityWorkers: 1,
    integrityParallelMin: 0,
  });
  t.teardown(() => log.close());
  t.match(await log.integrityAsync(ORG), { status: 'intact', events: 30, chain_length: 30 });
  t.match(String(log.lastError), /ENOTDIR|not a directory/, 'the worker failure is kept for operators');
  t.same(await log.integrityAsync(ORG), h.log.integrity(ORG), 'the same result as the inline scan');
});

t.test('a closed pool rejects its scans', async (t) => {
  const other = new IntegrityPool({ dataDir: join(h.dir, 'data'), workers: 1 });
  t.match(await scanWith(other), { status: 'intact' });
  await other.close();
  await t.rejects(scanWith(other), /closed/);
});

function scanWith(p: IntegrityPool) {
  return p.run(new IntegrityScan(new ChainReader(h.store), ORG, verifiersFor(doc)), JSON.stringify(doc));
}
