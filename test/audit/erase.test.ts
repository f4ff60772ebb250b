import t from 'tap';
import { verifyFile } from '../../src/audit/verify-file.js';
import { ERASED, ERASURE_EVENT_TYPE, erasureDetails } from '../../src/core/chain/index.js';
import { chainFiles, exportedText, logText, type TempLog, tempLog } from './helpers.js';

type Field = { value?: unknown; c?: string } | undefined;
const field = (e: { personal?: Record<string, unknown> } | undefined, path: string): Field =>
  e?.personal?.[path] as Field;

// Tombstoning personal fields of committed events (the chain half of a GDPR erasure): the store
// and every JSONL file (rotated ones too) lose the values, every hash, seal and receipt stays, the
// log stays the store's chain byte for byte even with events appended while its files are
// rewritten, and a tombstone is only intact where an erasure event names it.

const ORG = 'org_erase';
const OTHER = 'org_keep';
/** A seal every 4 events and a rotation every few events: tombstones land in rotated files. */
const OPTS = { sealIntervalMs: 60_000, sealEvery: 4, rotationMaxMb: 0.004 };

let n = 0;
const call = (h: TempLog, org: string, user: string) =>
  h.log.append({
    org_id: org,
    event_type: 'llm_call',
    reason: `call ${++n}`,
    details: { n },
    personal: { end_user: user, prompt: `hello from ${user}, call ${n}` },
  });

t.test('erase tombstones the named fields everywhere and changes no hash', async (t) => {
  const h = tempLog(OPTS);
  t.teardown(() => h.close());
  const alice: string[] = [];
  for (let i = 0; i < 40; i++) {
    const ref = await call(h, ORG, i % 3 === 0 ? 'alice@example.com' : `user${i}@example.com`);
    if (i % 3 === 0) alice.push(ref.id);
    await call(h, OTHER, 'alice@example.com');
  }
  await h.log.flushSeals();
  t.ok(chainFiles(h, ORG).length > 3, 'the log rotated a few times');
  const before = [...h.log.exportLines(ORG)];
  const sealsBefore = before.filter((l) => '_seal' in l).map((l) => JSON.stringify(l));
  const hashes = new Map(before.flatMap((l) => ('hash' in l ? [[l.id, l.hash]] : [])));

  // The authority first (as the erasure desk does), then the tombstones; appends go on meanwhile.
  const targets = alice.map((event_id) => ({ event_id, fields: ['end_user', 'prompt'] }));
  await h.log.append({
    org_id: ORG,
    event_type: ERASURE_EVENT_TYPE,
    details: erasureDetails('er_test', targets),
  });
  const during: Promise<unknown>[] = [];
  const erasing = h.log.erase(ORG, targets);
  for (let i = 0; i < 30; i++) during.push(call(h, ORG, `late${i}@example.com`));
  const result = await erasing;
  await Promise.all(during);
  await h.log.flushSeals();
  t.equal(result.events, alice.length, 'each named event tombstoned in the store');
  t.ok(result.lines >= 1 && result.lines <= alice.length, `and its JSONL line (${result.lines} rewritten)`);

  for (const id of alice) {
    const e = h.log.get(ORG, id);
    t.same(field(e, 'end_user'), { value: ERASED, c: field(e, 'end_user')?.c }, 'value erased, salt gone');
    t.equal(field(e, 'prompt')?.value, ERASED);
    t.equal(e?.hash, hashes.get(id), `${id}: the same hash`);
  }
  const text = logText(h, ORG);
  t.notOk(text.includes('alice@'), 'no JSONL file holds the erased values');
  t.ok(text.includes('user1@example.com'), "others' values stay");
  t.ok(text.includes('late29@example.com'), 'events appended during the rewrite are in the log');
  t.equal(text, exportedText(h, ORG), 'the log is the store chain, byte for byte');
  t.ok(logText(h, OTHER).includes('alice@example.com'), "another org's log is not touched");
  const after = [...h.log.exportLines(ORG)];
  t.same(
    after
      .filter((l) => '_seal' in l)
      .slice(0, sealsBefore.length)
      .map((l) => JSON.stringify(l)),
    sealsBefore,
    'every seal as it was',
  );
  t.equal((await h.log.integrityAsync(ORG)).status, 'intact', 'integrity: intact');
  const offline = await verifyFile(chainFiles(h, ORG), h.log.publicDocument());
  t.equal(offline.status, 'intact', 'the files verify offline');
  const receipt = h.log.receipt(ORG, alice[0] as string);
  t.ok(receipt, 'a tombstoned event keeps its receipt');

  const again = await h.log.erase(ORG, targets);
  t.same(again, { events: 0, lines: 0 }, 'erasing again changes nothing');

  // The store is the truth: after a restart the files are checked against it and kept.
  await h.reopen();
  await call(h, ORG, 'after@example.com');
  await h.log.flushSeals();
  t.same(h.log.divergedFiles(ORG), [], 'a restart sets nothing aside');
  t.equal(logText(h, ORG), exportedText(h, ORG), 'and the log goes on from the store');
});

t.test('a tombstone no erasure event names is unauthorized_erasure', async (t) => {
  const h = tempLog(OPTS);
  t.teardown(() => h.close());
  const refs = [];
  for (let i = 0; i < 6; i++) refs.push(await call(h, ORG, 'mallory@example.com'));
  await h.log.flushSeals();
  const target = refs[2] as { id: string; seq: number };
  const r = await h.log.erase(ORG, [{ event_id: target.id, fields: ['prompt'] }]);
  t.equal(r.events, 1);
  await h.log.flushSeals();
  const integrity = await h.log.integrityAsync(ORG);
  t.equal(integrity.status, 'compromised');
  t.match(integrity.broken_events, [
    { reason: 'unauthorized_erasure', line: target.seq, event_id: target.id },
  ]);
  t.equal(
    (await verifyFile(chainFiles(h, ORG), h.log.publicDocument())).status,
    'compromised',
    'offline too',
  );
});

t.test('unknown events and fields are skipped; a field outside `fields` is kept', async (t) => {
  const h = tempLog(OPTS);
  t.teardown(() => h.close());
  const ref = await call(h, ORG, 'carol@example.com');
  await h.log.append({
    org_id: ORG,
    event_type: ERASURE_EVENT_TYPE,
    details: erasureDetails('er_x', [{ event_id: ref.id, fields: ['prompt'] }]),
  });
  const r = await h.log.erase(ORG, [
    { event_id: 'ae_nothing', fields: ['prompt'] },
    { event_id: ref.id, fields: ['prompt', 'absent'] },
  ]);
  t.equal(r.events, 1);
  const e = h.log.get(ORG, ref.id);
  t.equal(field(e, 'prompt')?.value, ERASED);
  t.equal(field(e, 'end_user')?.value, 'carol@example.com', 'not named: kept');
  await h.log.flushSeals();
  t.equal((await h.log.integrityAsync(ORG)).status, 'intact');
  t.equal(logText(h, ORG), exportedText(h, ORG));
});
