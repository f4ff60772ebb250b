import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { gunzipSync } from 'node:zlib';
import t from 'tap';
import { verifyFile } from '../../src/audit/verify-file.js';
import { createOrg, orgLogFiles, startService } from '../helpers/service.js';
import { waitSealed } from '../helpers/wait.js';

// Retention over HTTP (spec 4.6): the configuration, a preview, and an operator's run that prunes
// the org chain's events older than SERVICE_AUDIT_RETENTION_DAYS on a seal boundary, archives them
// as gzipped JSONL that verifies alone, and leaves a chain that still verifies from its bridge.
// The audit clock is the test's: the "old" events are written 60 days in its past.

const DAY = 86_400_000;

t.test(
  'a retention run prunes what is older than the retention, archived, and the rest verifies',
  async (t) => {
    let now = Date.parse('2026-01-01T00:00:00Z');
    const svc = await startService({
      clock: () => now,
      env: { SERVICE_AUDIT_RETENTION_DAYS: '30', SERVICE_AUDIT_ARCHIVE: 'local' },
    });
    t.teardown(() => svc.close());
    const chat = (content: string, token = svc.agentKey) =>
      svc.call('/v1/chat/completions', {
        token,
        body: { model: 'mock-echo', messages: [{ role: 'user', content }] },
      });
    const old: string[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await chat(`old call ${i}`);
      t.equal(r.status, 200);
      old.push(r.body.service.audit_url);
      now += 60_000;
    }
    await waitSealed(svc);
    now += 60 * DAY;
    const recent: string[] = [];
    for (let i = 0; i < 3; i++) recent.push((await chat(`recent call ${i}`)).body.service.audit_url);
    const other = await createOrg(svc, 'elsewhere');
    await waitSealed(svc);

    const settings = await svc.call('/api/settings/retention', { token: svc.pat });
    t.equal(settings.status, 200);
    t.match(settings.body, {
      org_id: 'default',
      retention_days: 30,
      keep_forever: false,
      archive: { type: 'local', compression: 'gzip' },
      pruned: null,
    });
    const preview = await svc.call('/api/settings/retention/preview', { token: svc.pat });
    t.equal(preview.status, 200);
    const range = preview.body.prune;
    t.ok(range && range.from_seq === 1 && range.to_seq >= 12, `a run would prune 1..${range?.to_seq}`);
    t.ok(Date.parse(range.last_ts) < now - 30 * DAY, 'only events older than the retention');
    t.equal(preview.body.cutoff, new Date(now - 30 * DAY).toISOString());

    // Roles: reads auditor+, the run admin+.
    const user = await svc.call('/api/users', {
      token: svc.pat,
      body: { email: 'oa@example.com', role: 'org_admin' },
    });
    const orgAdmin = (await svc.call('/api/tokens', { token: svc.pat, body: { user_id: user.body.user_id } }))
      .body.token;
    t.equal((await svc.call('/api/settings/retention/preview', { token: orgAdmin })).status, 200);
    t.equal((await svc.call('/api/settings/retention/run', { token: orgAdmin, method: 'POST' })).status, 403);
    t.equal((await svc.call('/api/settings/retention', { token: svc.agentKey })).status, 403);
    // Another org's admin runs on their own org: nothing of theirs is old.
    const theirs = await svc.call('/api/settings/retention/run', { token: other.adminPat, method: 'POST' });
    t.equal(theirs.status, 200);
    t.equal(theirs.body.org_id, other.orgId);
    t.equal(theirs.body.pruned, null);

    const run = await svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' });
    t.equal(run.status, 200, JSON.stringify(run.body));
    t.match(run.body.pruned, { from_seq: 1, to_seq: range.to_seq, events: range.to_seq });
    t.equal(run.body.approvals_deleted, 0, 'no approval to delete, and the count is given');
    t.equal(run.body.bridge.bridged_to_seq, range.to_seq);
    const archive = run.body.bridge.archive;
    t.match(archive, { type: 'local', compression: 'gzip', file: /^default\/default-1-\d+\.jsonl\.gz$/ });

    // The archive: its hash as recorded, and it verifies alone with the published keys.
    const gz = readFileSync(join(svc.dataDir, 'data', 'archive', archive.file));
    t.equal(createHash('sha256').update(gz).digest('hex'), archive.sha256);
    const archived = join(svc.dataDir, 'archived.jsonl');
    writeFileSync(archived, gunzipSync(gz));
    const keys = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
    t.match(
      await verifyFile(archived, keys),
      { status: 'intact', chain_length: range.to_seq },
      'the archive verifies',
    );
    const gzPath = join(svc.dataDir, 'data', 'archive', archive.file);
    t.match(
      await verifyFile(gzPath, keys),
      { status: 'intact', chain_length: range.to_seq },
      'read as .gz too',
    );
    writeFileSync(`${archived}.gz`, gz.subarray(0, gz.length - 20));
    await t.rejects(
      verifyFile(`${archived}.gz`, keys),
      { code: 'unreadable_file' },
      'a cut-off archive is an input error',
    );
    t.ok(readFileSync(archived, 'utf8').includes('old call 0') === false, 'prompts are not captured anyway');

    // What is kept verifies: integrity, the JSONL files offline, a receipt.
    const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
    t.equal(integrity.body.status, 'intact', JSON.stringify(integrity.body.broken_events));
    await waitSealed(svc); // the run's own event
    await sleep(100); // the JSONL log is written within 20 ms of a commit
    const offline = await verifyFile(orgLogFiles(svc, 'default'), keys);
    t.equal(offline.status, 'intact', `govgate verify: intact ${JSON.stringify(offline)}`);
    const exported = String((await svc.call('/api/audit/export?format=jsonl', { token: svc.pat })).body);
    t.ok(exported.startsWith('{"_chain_bridge":'), 'the export starts with the bridge');
    const pipeline = (url: string) => new URL(url).pathname;
    const gone = await svc.call(pipeline(old[0] as string), { token: svc.pat });
    t.equal(gone.status, 404, 'a pruned call is no longer in the trail');
    const kept = await svc.call(pipeline(recent[0] as string), { token: svc.pat });
    t.equal(kept.body.data.length, 1, 'a recent one is');
    const keptEvent = kept.body.data[0];
    const receipt = await svc.call(`/api/audit/events/${keptEvent.id}/receipt`, { token: svc.pat });
    t.equal(receipt.status, 200, 'a kept event still has its receipt');

    // Recorded, and nothing left to prune; the settings show the bridge.
    const recorded = await svc.call('/api/audit?event_type=admin.retention_run', { token: svc.pat });
    t.match(recorded.body.data[0].details, {
      to_seq: range.to_seq,
      retention_days: 30,
      archive: { sha256: archive.sha256 },
    });
    const again = await svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' });
    t.equal(again.body.pruned, null);
    t.match(again.body.reason, /no sealed events older/);
    t.match((await svc.call('/api/settings/retention', { token: svc.pat })).body.pruned, {
      bridged_to_seq: range.to_seq,
    });
    t.equal(
      (await svc.call('/api/audit/integrity?refresh=true', { token: other.adminPat })).body.status,
      'intact',
      "the other org's chain is whole",
    );
  },
);

t.test('retention_days 0 keeps everything', async (t) => {
  const svc = await startService({ env: { SERVICE_AUDIT_RETENTION_DAYS: '0' } });
  t.teardown(() => svc.close());
  const preview = await svc.call('/api/settings/retention/preview', { token: svc.pat });
  t.match(preview.body, { retention_days: 0, cutoff: null, prune: null, reason: /kept forever/ });
  const run = await svc.call('/api/settings/retention/run', { token: svc.pat, method: 'POST' });
  t.match(run.body, { pruned: null, reason: /kept forever/ });
  t.match((await svc.call('/api/settings/retention', { token: svc.pat })).body, {
    keep_forever: true,
    archive: { type: 'none' },
  });
});
