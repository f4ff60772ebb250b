import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { AuditEvent } from '../../src/audit/types.js';
import { verifyFile } from '../../src/audit/verify-file.js';
import { verifyReceipt } from '../../src/core/chain/index.js';
import { tempDir } from '../helpers/tmp.js';
import { chainFiles, exportedText, logText, storedSeals, TestSigner, tempLog } from './helpers.js';

// Retention's cut of an org chain (DESIGN B): on a seal boundary, a `_chain_bridge` in place of
// the pruned prefix. What is kept still verifies (integrity, `govgate verify` on the JSONL files,
// every receipt), the pruned lines verify on their own as the archive, the store keeps nothing of
// them, and the chain goes on across a restart and a second cut.

const ORG = 'org_prune';
const DAY = 86_400_000;
const OPTS = { sealIntervalMs: 60_000, sealEvery: 4, rotationMaxMb: 0.004 };

t.test('a cut on a seal boundary leaves a bridge, and everything kept still verifies', async (t) => {
  let now = Date.parse('2025-01-01T00:00:00Z');
  const signer = new TestSigner();
  const h = tempLog({ ...OPTS, clock: () => now }, signer);
  t.teardown(() => h.close());
  const append = (i: number) =>
    h.log.append({ org_id: ORG, event_type: 'llm_call', session_id: `s${i % 3}`, reason: `call ${i}` });
  const refs = [];
  for (let i = 0; i < 30; i++) {
    refs.push(await append(i));
    now += 60_000;
  }
  await h.log.flushSeals();
  now += 400 * DAY;
  for (let i = 30; i < 40; i++) refs.push(await append(i));
  await h.log.flushSeals();

  const cutoff = now - 365 * DAY;
  const cut = h.log.pruneCut(ORG, cutoff);
  t.ok(cut, 'there is something to prune');
  const toSeq = cut?.toSeq as number;
  t.ok(
    storedSeals(h.store, ORG).some((s) => s.size === toSeq),
    'on a seal boundary',
  );
  t.ok(toSeq <= 30 && toSeq >= 24, `through seq ${toSeq}, before the recent events`);
  t.ok(Date.parse(cut?.lastTs as string) < cutoff);
  const before = exportedText(h, ORG).split('\n');

  const archived: string[] = [];
  const result = await h.log.prune(ORG, toSeq, async (lines) => {
    for (const l of lines) archived.push(l);
    return { type: 'test', lines: archived.length };
  });
  t.match(result, { from_seq: 1, to_seq: toSeq, events: toSeq });
  t.ok(result.seals >= toSeq / 4 - 1, `${result.seals} seals before the cut deleted`);
  t.ok(result.files_deleted >= 1, 'rotated files wholly before the cut are deleted');
  t.same(result.bridge.archive, { type: 'test', lines: archived.length });

  // The archive is the pruned prefix: it verifies on its own, sealed to the cut.
  const archivePath = join(tempDir('govgate-archive-'), 'archive.jsonl');
  writeFileSync(archivePath, archived.map((l) => `${l}\n`).join(''));
  t.same(archived, before.slice(0, archived.length), 'the archive is the export up to the cut');
  const archiveCheck = await verifyFile(archivePath, h.log.publicDocument());
  t.match(archiveCheck, { status: 'intact', chain_length: toSeq }, 'the archive verifies alone');

  // What is kept: a bridge first, then the events after the cut; byte for byte in the files.
  const lines = [...h.log.exportLines(ORG)];
  t.ok('_chain_bridge' in (lines[0] as object), 'the export starts with the bridge');
  t.equal((lines[1] as AuditEvent).seq, toSeq + 1);
  t.equal(logText(h, ORG), exportedText(h, ORG), 'the JSONL files are the export');
  t.equal((await h.log.integrityAsync(ORG)).status, 'intact', 'integrity: intact');
  t.equal((await verifyFile(chainFiles(h, ORG), h.log.publicDocument())).status, 'intact', 'offline: intact');
  for (const ref of refs.slice(toSeq)) {
    const r = h.log.receipt(ORG, ref.id);
    const { seal: _s, ...stored } = h.log.get(ORG, ref.id) as AuditEvent;
    t.same(
      verifyReceipt(r as NonNullable<typeof r>, signer.verifiers, stored),
      { ok: true },
      `receipt ${ref.seq}`,
    );
  }
  t.equal(h.log.get(ORG, refs[0]?.id as string), undefined, 'a pruned event is gone');
  t.equal(h.log.receipt(ORG, refs[toSeq - 1]?.id as string), undefined);
  const page = h.log.search(ORG, { session_id: 's1', limit: 100 });
  t.ok(page.data.length > 0 && page.data.every((e) => e.seq > toSeq), 'search finds only kept events');
  t.same(
    [...h.store.auditEvents.getKeys({ start: [ORG, 0], end: [ORG, toSeq + 1] })],
    [],
    'the store holds none',
  );
  t.equal(h.log.pruneCut(ORG, cutoff), undefined, 'nothing left to prune');

  // The chain goes on, across a restart, and a second cut extends the bridge.
  for (let i = 40; i < 46; i++) refs.push(await append(i));
  await h.reopen({ ...OPTS, clock: () => now });
  now += 400 * DAY;
  for (let i = 46; i < 60; i++) refs.push(await append(i));
  await h.log.flushSeals();
  t.same(h.log.divergedFiles(ORG), [], 'a start sets nothing aside');
  const second = h.log.pruneCut(ORG, now - 365 * DAY);
  t.ok(second && second.toSeq > toSeq, 'a second cut, after the first');
  const again = await h.log.prune(ORG, second?.toSeq as number);
  t.equal(again.from_seq, toSeq + 1);
  t.equal(again.bridge.archive, null, 'no archive asked for');
  for (let i = 60; i < 64; i++) await append(i);
  await h.log.flushSeals();
  t.equal(logText(h, ORG), exportedText(h, ORG), 'the files are the export again');
  t.equal((await h.log.integrityAsync(ORG)).status, 'intact');
  t.equal((await verifyFile(chainFiles(h, ORG), h.log.publicDocument())).status, 'intact');
  const last = refs.at(-1) as { id: string };
  const r = h.log.receipt(ORG, last.id);
  const { seal: _s, ...stored } = h.log.get(ORG, last.id) as AuditEvent;
  t.same(verifyReceipt(r as NonNullable<typeof r>, signer.verifiers, stored), { ok: true });
});

t.test('a cut is refused off a seal boundary or at the last event', async (t) => {
  const h = tempLog(OPTS);
  t.teardown(() => h.close());
  for (let i = 0; i < 8; i++) await h.log.append({ org_id: ORG, event_type: 'x' });
  await h.log.flushSeals();
  await t.rejects(h.log.prune(ORG, 3), /not a seal boundary/);
  await t.rejects(h.log.prune(ORG, 8), /not a seal boundary/, 'the last event is always kept');
  t.equal(h.log.pruneCut(ORG, Date.now() + DAY)?.toSeq, 4, 'everything is old: the cut keeps the last seal');
});
