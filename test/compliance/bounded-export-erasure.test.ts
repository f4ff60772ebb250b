import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { verifyFile } from '../../src/audit/verify-file.js';
import { startService } from '../helpers/service.js';
import { tempDir } from '../helpers/tmp.js';
import { waitSealed } from '../helpers/wait.js';

// An export bounded by `until` ends at a seal boundary, before the erasures made later of the
// events it holds. It carries each such erasure as an `_erasure_authority` line: the erasure
// event and its receipt (its inclusion in a later seal). So the tombstones in it verify offline
// (spec 4.5: the event still verifies after erasure); without that line, or with one whose proof
// does not hold, they do not.

const ALICE = 'alice@example.com';

t.test('a bounded export taken after an erasure verifies on its own', async (t) => {
  const svc = await startService();
  const dir = tempDir('govgate-bounded-');
  t.teardown(async () => {
    await svc.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const chat = (user: string, content: string) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', user, messages: [{ role: 'user', content }] },
    });
  t.equal((await chat(ALICE, 'first')).status, 200);
  t.equal((await chat(ALICE, 'second')).status, 200);
  await waitSealed(svc); // a seal closes the window's events
  const early = await svc.call('/api/audit?event_type=llm_call&limit=10', { token: svc.pat });
  const until = early.body.data[0].ts as string;
  await sleep(20);
  t.equal((await chat('bob@example.com', 'later')).status, 200);

  const submitted = await svc.call('/api/compliance/gdpr/erasure', {
    token: svc.pat,
    body: { data_subject: { type: 'email', value: ALICE } },
  });
  t.equal(submitted.status, 201);
  const executed = await svc.call(`/api/compliance/gdpr/erasure/${submitted.body.request_id}/execute`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(executed.status, 200, JSON.stringify(executed.body));
  await waitSealed(svc); // the erasure event

  const exported = await svc.call(`/api/audit/export?format=jsonl&until=${encodeURIComponent(until)}`, {
    token: svc.pat,
  });
  t.equal(exported.status, 200);
  const lines = String(exported.body)
    .split('\n')
    .filter((l) => l !== '');
  const authorities = lines.filter((l) => l.startsWith('{"_erasure_authority"'));
  t.equal(authorities.length, 1, 'the erasure, made after the export ends, rides along');
  t.ok(
    lines.some((l) => l.includes('[ERASED')),
    'the export holds tombstones',
  );
  t.notOk(
    lines.some((l) => l.includes('"event_type":"gdpr.erasure_executed"') && !l.startsWith('{"_erasure')),
    'the erasure event itself is past the export',
  );
  const keys = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  const file = (name: string, body: string[]): string => {
    const path = join(dir, name);
    writeFileSync(path, `${body.join('\n')}\n`);
    return path;
  };
  const whole = await verifyFile([file('bounded.jsonl', lines)], keys);
  t.equal(whole.status, 'intact', JSON.stringify(whole.broken_events));
  t.equal(whole.erasure_authorities, 1);

  // Without its authority, the tombstones are unauthorised.
  const bare = await verifyFile(
    [
      file(
        'bare.jsonl',
        lines.filter((l) => !authorities.includes(l)),
      ),
    ],
    keys,
  );
  t.equal(bare.status, 'compromised');
  t.ok(bare.broken_events.every((b) => b.reason === 'unauthorized_erasure'));

  // An authority whose event was changed (granting more) does not prove itself.
  const a = JSON.parse(authorities[0] as string);
  const grown = structuredClone(a);
  grown._erasure_authority.event.details.erased_fields.push({ event_id: 'ae_other', fields: ['end_user'] });
  const forged = await verifyFile(
    [file('forged.jsonl', [...lines.filter((l) => !authorities.includes(l)), JSON.stringify(grown)])],
    keys,
  );
  t.equal(forged.status, 'compromised');
  t.ok(
    forged.broken_events.some(
      (b) => b.reason === 'content_modified' && b.event_id === a._erasure_authority.event.id,
    ),
  );
  t.ok(
    forged.broken_events.some((b) => b.reason === 'unauthorized_erasure'),
    'and grants nothing',
  );
  // Nor does another event's valid receipt under an erasure event it is not.
  const other = structuredClone(a);
  other._erasure_authority.receipt.inclusion_proof = [];
  const unproven = await verifyFile(
    [file('unproven.jsonl', [...lines.filter((l) => !authorities.includes(l)), JSON.stringify(other)])],
    keys,
  );
  t.equal(unproven.status, 'compromised');
  t.equal(unproven.erasure_authorities, 0);
});
