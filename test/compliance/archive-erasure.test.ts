import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { ChainLog } from '../../src/audit/chain-log.js';
import { verifyFile } from '../../src/audit/verify-file.js';
import { orgLogFiles, startService } from '../helpers/service.js';
import { waitSealed } from '../helpers/wait.js';

// Events retention pruned into the local archive left the store, not the deployment: a DSAR
// shows them and an erasure tombstones them there too, and the archive still verifies.

const DAY = 86_400_000;

t.test('DSAR and erasure reach the retention archive', async (t) => {
  let now = Date.parse('2026-01-01T00:00:00Z');
  const svc = await startService({
    clock: () => now,
    env: { SERVICE_AUDIT_RETENTION_DAYS: '30', SERVICE_AUDIT_ARCHIVE: 'local' },
  });
  t.teardown(() => svc.close());
  const chat = (user: string, content: string) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', user, messages: [{ role: 'user', content }] },
    });
  for (let i = 0; i < 10; i++) {
    t.equal((await chat(i % 2 === 0 ? 'cust-alice' : 'cust-bob', `old ${i}`)).status, 200);
    now += 60_000;
  }
  await waitSealed(svc);
  now += 60 * DAY;
  t.equal((await chat('cust-alice', 'recent')).status, 200);
  await waitSealed(svc);
  const run = await svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' });
  t.equal(run.status, 200, JSON.stringify(run.body));
  const prunedTo = run.body.pruned.to_seq as number;
  t.ok(prunedTo >= 10, `pruned 1..${prunedTo}`);
  const archivePath = join(svc.dataDir, 'data', 'archive', run.body.bridge.archive.file);
  const archived = () => gunzipSync(readFileSync(archivePath)).toString('utf8');
  t.ok(archived().includes('"value":"cust-alice"'), 'the archive holds her calls');

  const dsar = async (value: string) => {
    const r = await svc.call('/api/compliance/gdpr/dsar', {
      token: svc.pat,
      body: { data_subject: { type: 'end_user', value } },
    });
    t.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    return r.body as { events: any[]; scanned: { from_seq: number; to_seq: number } };
  };
  const before = await dsar('cust-alice');
  const calls = before.events.filter((e) => e.event_type === 'llm_call');
  t.equal(calls.length, 6, 'her five archived calls and the recent one');
  t.equal(calls.filter((e) => e.seq <= prunedTo).length, 5);
  t.equal(before.scanned.from_seq, 1, 'read from the first event, archived or not');
  // Pages run through the archive into the store without a gap or a repeat.
  const seen: number[] = [];
  let cursor: string | null = '1';
  while (cursor !== null) {
    const page: any = await svc.call('/api/compliance/gdpr/dsar', {
      token: svc.pat,
      body: { data_subject: { type: 'end_user', value: 'cust-alice' }, cursor, scan_limit: 3 },
    });
    t.equal(page.body.scanned.from_seq, Number(cursor));
    for (const e of page.body.events) if (e.event_type === 'llm_call') seen.push(e.seq);
    cursor = page.body.next_cursor;
  }
  t.same(
    seen,
    calls.map((e) => e.seq),
    'paged, the same calls',
  );

  const submitted = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'end_user', value: 'cust-alice' } },
  });
  t.equal(submitted.status, 201);
  const executed = await svc.call(`/api/compliance/gdpr/erasure/${submitted.body.request_id}/execute`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(executed.status, 200, JSON.stringify(executed.body));
  t.ok(executed.body.receipt.erased.events >= 6, 'archived events are counted');
  const text = archived();
  t.notOk(text.includes('cust-alice'), 'her value is gone from the archive');
  t.ok(text.includes('[ERASED:GDPR-Art17]'));
  t.ok(text.includes('"value":"cust-bob"'), "his stays: only the subject's fields are erased");

  const after = await dsar('cust-alice');
  t.same(
    after.events.filter((e) => e.event_type === 'llm_call'),
    [],
    'nothing of hers is found any more',
  );
  t.equal((await dsar('cust-bob')).events.filter((e) => e.event_type === 'llm_call').length, 5);

  // The chain still verifies: the store, and the archive with the files after it as one chain
  // (the erasure events that authorize its tombstones are in the live files).
  const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
  t.equal(integrity.body.status, 'intact', JSON.stringify(integrity.body));
  await waitSealed(svc);
  await sleep(100); // the JSONL log is written within 20 ms of a commit
  const keys = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  const whole = await verifyFile([archivePath, ...orgLogFiles(svc, 'default')], keys);
  t.equal(whole.status, 'intact', JSON.stringify(whole));
  const alone = await verifyFile(archivePath, keys);
  t.match(
    alone,
    { status: 'compromised', broken_events: [{ reason: 'unauthorized_erasure' }] },
    'alone, its tombstones name no erasure event',
  );
});

/**
 * An erasure asked for while a retention run archives the same events waits for the run, and
 * then erases the archive the run wrote (run inside each other, the two left an unerased copy in
 * the archive while the receipt said all was erased). The run is held mid-way here.
 */
t.test('an erasure asked for during a retention run waits for it, then reaches its archive', async (t) => {
  let now = Date.parse('2026-01-01T00:00:00Z');
  const svc = await startService({
    clock: () => now,
    env: { SERVICE_AUDIT_RETENTION_DAYS: '30', SERVICE_AUDIT_ARCHIVE: 'local' },
  });
  t.teardown(() => svc.close());
  for (let i = 0; i < 20; i++) {
    const user = i % 2 === 0 ? 'cust-carol' : 'cust-dave';
    const r = await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', user, messages: [{ role: 'user', content: `old ${i}` }] },
    });
    t.equal(r.status, 200);
    now += 1_000;
  }
  await waitSealed(svc);
  now += 60 * DAY;
  const submitted = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'end_user', value: 'cust-carol' } },
  });
  t.equal(submitted.status, 201);

  const prune = ChainLog.prototype.prune;
  let open = (): void => {};
  const gate = new Promise<void>((r) => {
    open = r;
  });
  ChainLog.prototype.prune = async function (this: ChainLog, ...args: Parameters<ChainLog['prune']>) {
    await gate;
    return prune.apply(this, args);
  };
  t.teardown(() => {
    ChainLog.prototype.prune = prune;
    open();
  });
  const order: string[] = [];
  const running = svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' }).then((r) => {
    order.push('run');
    return r;
  });
  await sleep(100);
  const erasing = svc
    .call(`/api/compliance/gdpr/erasure/${submitted.body.request_id}/execute`, {
      token: svc.pat,
      method: 'POST',
    })
    .then((r) => {
      order.push('erasure');
      return r;
    });
  await sleep(300);
  t.same(order, [], 'the erasure waits while the run is held');
  open();
  const [run, executed] = await Promise.all([running, erasing]);
  t.same(order, ['run', 'erasure'], 'then runs after it');
  t.equal(run.status, 200, JSON.stringify(run.body));
  t.equal(executed.status, 200, JSON.stringify(executed.body));
  const archivePath = join(svc.dataDir, 'data', 'archive', run.body.bridge.archive.file);
  const text = gunzipSync(readFileSync(archivePath)).toString('utf8');
  t.ok(text.includes('cust-dave'), 'the archive holds the run');
  t.notOk(text.includes('cust-carol'), 'and none of her values');
});
