import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { verifyFile } from '../../src/audit/verify-file.js';
import {
  BLOB_SIG,
  type MockObjectStore,
  S3_CREDENTIALS,
  startMockObjectStore,
} from '../helpers/mock-object-store.js';
import { orgLogFiles, startService } from '../helpers/service.js';
import { tempDir } from '../helpers/tmp.js';
import { waitSealed } from '../helpers/wait.js';

// Spec 4.6: retention archives to local disk, S3-type or blob storage, with gzip. The S3 and
// Azure archives behave as the local one does: a run uploads the pruned events as one gzipped
// JSONL object that verifies with the rest of the chain, a DSAR reads it, an erasure rewrites it,
// and neither the settings view nor the chain shows a credential. A store that refuses the
// upload fails the run with nothing pruned.

const DAY = 86_400_000;

const KINDS = [
  {
    kind: 's3',
    prefix: 'archive-bucket/audit/default/',
    env: (store: MockObjectStore) => ({
      SERVICE_AUDIT_ARCHIVE: 's3',
      SERVICE_AUDIT_ARCHIVE_S3_BUCKET: 'archive-bucket',
      SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT: store.url,
      SERVICE_AUDIT_ARCHIVE_S3_REGION: S3_CREDENTIALS.region,
      SERVICE_AUDIT_ARCHIVE_S3_PREFIX: 'audit/',
      AWS_ACCESS_KEY_ID: S3_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: S3_CREDENTIALS.secretAccessKey,
    }),
    secrets: [S3_CREDENTIALS.secretAccessKey],
  },
  {
    kind: 'blob',
    prefix: 'archive-container/default/',
    env: (store: MockObjectStore) => ({
      SERVICE_AUDIT_ARCHIVE: 'blob',
      SERVICE_AUDIT_ARCHIVE_BLOB_URL: `${store.url}/archive-container?sv=2021-12-02&sr=c&sp=rwl&sig=${BLOB_SIG}`,
    }),
    secrets: [BLOB_SIG, decodeURIComponent(BLOB_SIG)],
  },
] as const;

for (const k of KINDS) {
  t.test(`the ${k.kind} archive: retention writes it, DSAR reads it, erasure rewrites it`, async (t) => {
    const store = await startMockObjectStore();
    let now = Date.parse('2026-01-01T00:00:00Z');
    const svc = await startService({
      clock: () => now,
      env: { SERVICE_AUDIT_RETENTION_DAYS: '30', ...k.env(store) },
    });
    t.teardown(async () => {
      await svc.close();
      await store.close();
    });
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

    const settings = await svc.call('/api/settings/retention', { token: svc.pat });
    t.equal(settings.status, 200);
    t.equal(settings.body.archive.type, k.kind);
    for (const secret of k.secrets)
      t.notOk(JSON.stringify(settings.body).includes(secret), 'the settings view shows no credential');

    // A store that refuses the upload: the run fails and nothing is pruned.
    store.refusePuts = 403;
    const refused = await svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' });
    t.equal(refused.status, 503, JSON.stringify(refused.body));
    t.match(refused.body.error.message, /archive could not be written.*403 AccessDenied/);
    for (const secret of k.secrets)
      t.notOk(JSON.stringify(refused.body).includes(secret), 'the refusal names no credential');
    t.equal(
      (await svc.call('/api/settings/retention/preview', { token: svc.pat })).body.prune.from_seq,
      1,
      'nothing was pruned',
    );
    store.refusePuts = undefined;

    const run = await svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' });
    t.equal(run.status, 200, JSON.stringify(run.body));
    const prunedTo = run.body.pruned.to_seq as number;
    t.ok(prunedTo >= 10, `pruned 1..${prunedTo}`);
    const keys = [...store.objects.keys()];
    t.equal(keys.length, 1, 'one object per run');
    const key = keys[0] as string;
    t.ok(key.startsWith(k.prefix), `under ${k.prefix}: ${key}`);
    t.ok(key.endsWith(`default-1-${prunedTo}.jsonl.gz`));
    t.match(run.body.bridge.archive, { type: k.kind, compression: 'gzip' });
    for (const secret of k.secrets)
      t.notOk(JSON.stringify(run.body).includes(secret), 'the bridge record names no credential');
    const archived = () => gunzipSync(store.objects.get(key) as Buffer).toString('utf8');
    t.ok(archived().includes('"value":"cust-alice"'), 'the object holds her calls');
    t.equal(
      run.body.bridge.archive.sha256,
      (await import('node:crypto'))
        .createHash('sha256')
        .update(store.objects.get(key) as Buffer)
        .digest('hex'),
      'the bridge records the SHA-256 of what the store holds',
    );

    const dsar = async (value: string) => {
      const r = await svc.call('/api/compliance/gdpr/dsar', {
        token: svc.pat,
        body: { data_subject: { type: 'end_user', value } },
      });
      t.equal(r.status, 200);
      return (r.body.events as any[]).filter((e) => e.event_type === 'llm_call');
    };
    const before = await dsar('cust-alice');
    t.equal(before.length, 6, 'her five archived calls and the recent one');
    t.equal(before.filter((e) => e.seq <= prunedTo).length, 5);

    // A copy of the object in the local archive too (an operator moving its archive to the
    // store): an erasure reaches both.
    const localCopy = join(svc.dataDir, 'data', 'archive', 'default', key.split('/').at(-1) as string);
    mkdirSync(dirname(localCopy), { recursive: true });
    writeFileSync(localCopy, store.objects.get(key) as Buffer);
    t.equal((await dsar('cust-alice')).length, 6, 'a file in two stores is read once');
    const submitted = await svc.call('/api/compliance/gdpr/erasure', {
      token: svc.pat,
      body: { data_subject: { type: 'end_user', value: 'cust-alice' } },
    });
    const executed = await svc.call(`/api/compliance/gdpr/erasure/${submitted.body.request_id}/execute`, {
      token: svc.pat,
      method: 'POST',
    });
    t.equal(executed.status, 200, JSON.stringify(executed.body));
    const text = archived();
    t.notOk(text.includes('cust-alice'), 'her value is gone from the object');
    t.notOk(
      gunzipSync(readFileSync(localCopy)).toString('utf8').includes('cust-alice'),
      'and from the local copy',
    );
    t.ok(text.includes('"value":"cust-bob"'), 'his stays');
    t.same(await dsar('cust-alice'), [], 'nothing of hers is found any more');
    t.equal((await dsar('cust-bob')).length, 5);

    // The object, downloaded, verifies with the org's files after it as one chain.
    await waitSealed(svc);
    await sleep(100); // the JSONL log is written within 20 ms of a commit
    const signingKeys = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
    const dir = tempDir('govgate-remote-archive-');
    const local = join(dir, 'archive.jsonl');
    writeFileSync(local, archived());
    const whole = await verifyFile([local, ...orgLogFiles(svc, 'default')], signingKeys);
    t.equal(whole.status, 'intact', JSON.stringify(whole));
    t.notOk(
      store.requests.some((r) => r.status >= 400 && r.status !== 403),
      'every request the store got was well formed and well signed',
    );
  });
}

t.test('a wrong S3 secret is refused by the store, and the run says so without the secret', async (t) => {
  const store = await startMockObjectStore();
  const now = Date.parse('2026-03-01T00:00:00Z');
  let clock = now;
  const env = KINDS[0].env(store);
  const svc = await startService({
    clock: () => clock,
    env: {
      SERVICE_AUDIT_RETENTION_DAYS: '1',
      ...env,
      AWS_SECRET_ACCESS_KEY: 'not/the/right/secret/000000000000000000',
    },
  });
  t.teardown(async () => {
    await svc.close();
    await store.close();
  });
  for (let i = 0; i < 3; i++)
    await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content: `old ${i}` }] },
    });
  await waitSealed(svc);
  clock += 3 * DAY;
  await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'recent' }] },
  });
  await waitSealed(svc);
  const run = await svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' });
  t.equal(run.status, 503);
  t.match(run.body.error.message, /SignatureDoesNotMatch/);
  t.notOk(JSON.stringify(run.body).includes('not/the/right'), 'no secret in the answer');
  t.equal(store.objects.size, 0);
});
