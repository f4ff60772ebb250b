import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import t from 'tap';
import type { ChainLogOptions } from '../../src/audit/chain-log.js';
import { verifyFile } from '../../src/audit/verify-file.js';
import type { Store } from '../../src/store/db.js';
import { storedSeals, type TempLog, tempLog, testSigner } from './helpers.js';

// After a machine crash the store (LMDB, fsynced every 100 ms) can hold less than the JSONL log
// (written within 20 ms): the store is the truth, and the log must follow it.

const ORG = 'org_resume';
const OPTS: Partial<ChainLogOptions> = { sealIntervalMs: 60_000, sealEvery: 1_000_000 };

/** What a lost store tail looks like: these events and seals were never made durable. */
function loseTail(store: Store, org: string, events: number[], sealSizes: number[]): void {
  store.root.transactionSync(() => {
    for (const seq of events) store.auditEvents.removeSync([org, seq]);
    for (const seal of storedSeals(store, org)) {
      if (!sealSizes.includes(seal.size)) continue;
      store.auditMeta.removeSync([org, 's', seal.seq]);
      store.auditMeta.removeSync([org, 'z', seal.size]);
    }
  });
}

async function append(h: TempLog, ...reasons: string[]): Promise<void> {
  for (const reason of reasons) await h.log.append({ org_id: ORG, event_type: 'x', reason });
}

const auditDir = (h: TempLog): string => join(h.dir, 'data', 'audit');
/** The chain files of ORG in order: rotated ones, then the live one. */
function chainFiles(h: TempLog): string[] {
  const rotated = readdirSync(auditDir(h))
    .map((f) => /^org_resume\.([0-9]+)\.jsonl$/.exec(f))
    .filter((m) => m !== null)
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b)
    .map((n) => join(auditDir(h), `${ORG}.${n}.jsonl`));
  return [...rotated, h.log.jsonlPath(ORG)];
}
const asideFiles = (h: TempLog): string[] =>
  readdirSync(auditDir(h))
    .filter((f) => f.includes('.diverged-'))
    .map((f) => join(auditDir(h), f));
const exported = (h: TempLog): string => [...h.log.exportText(ORG)].map((l) => `${l}\n`).join('');
const logText = (h: TempLog): string =>
  chainFiles(h)
    .map((f) => readFileSync(f, 'utf8'))
    .join('');
/** A file as `<seq>:<reason>` and `seal@<size>` tokens. */
const tokens = (text: string): string[] =>
  text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { seq?: number; reason?: string; _seal?: { size: number } })
    .map((o) => (o._seal !== undefined ? `seal@${o._seal.size}` : `${o.seq}:${o.reason}`));

t.test('a log ahead of the store is cut back to it; the lines it held are kept aside', async (t) => {
  const warnings: string[] = [];
  const opts = { ...OPTS, warn: (msg: string) => warnings.push(msg) };
  const h = tempLog(opts);
  t.teardown(() => h.close());
  await append(h, 'a1', 'a2', 'a3', 'a4', 'a5');
  await h.log.flushSeals();
  await append(h, 'lost6', 'lost7', 'lost8');
  await h.log.close(); // seals 6..8 too
  loseTail(h.store, ORG, [6, 7, 8], [8]);
  await h.reopen(opts);

  // Nothing is appended yet: the start itself repairs the log.
  t.equal(logText(h), exported(h), 'at start the log holds what the store holds');
  t.same(tokens(logText(h)), ['1:a1', '2:a2', '3:a3', '4:a4', '5:a5', 'seal@5']);
  const aside = asideFiles(h);
  t.equal(aside.length, 1, 'one file set aside');
  t.match(aside[0], /org_resume\.jsonl\.diverged-/);
  t.same(tokens(readFileSync(aside[0] as string, 'utf8')), ['6:lost6', '7:lost7', '8:lost8', 'seal@8']);
  t.match(String(h.log.lastError), /org_resume.*diverged/, 'reported through lastError');
  t.equal(warnings.length, 1, 'and as a warning');

  await append(h, 'new6', 'new7', 'new8');
  await h.log.flushSeals();
  const text = logText(h);
  t.equal(text, exported(h), 'the log is the export, byte for byte');
  t.same(tokens(text).slice(5), ['seal@5', '6:new6', '7:new7', '8:new8', 'seal@8']);
  t.match(await verifyFile(chainFiles(h), testSigner().publicDocument()), { status: 'intact', events: 8 });

  await h.reopen(opts);
  t.equal(asideFiles(h).length, 1, 'a clean restart sets nothing aside');
  t.equal(logText(h), exported(h));
});

t.test('a seal line the store lost is cut even when the events after it are kept', async (t) => {
  // The seal of size 5 is committed after event 6 (signing is asynchronous) but written to the
  // log before it: the store can keep event 6 and lose that seal.
  const h = tempLog(OPTS);
  t.teardown(() => h.close());
  await append(h, 'a1', 'a2', 'a3', 'a4', 'a5');
  await h.log.flushSeals();
  await append(h, 'a6', 'lost7', 'lost8');
  await h.log.close();
  loseTail(h.store, ORG, [7, 8], [5, 8]);
  await h.reopen(OPTS);
  await h.log.flushSeals();
  t.same(tokens(readFileSync(asideFiles(h)[0] as string, 'utf8')), [
    'seal@5',
    '6:a6',
    '7:lost7',
    '8:lost8',
    'seal@8',
  ]);
  await append(h, 'new7');
  await h.log.flushSeals();
  const text = logText(h);
  t.equal(text, exported(h), 'the log is the export, byte for byte');
  t.same(tokens(text), ['1:a1', '2:a2', '3:a3', '4:a4', '5:a5', '6:a6', 'seal@6', '7:new7', 'seal@7']);
});

t.test('a seal line that differs from the stored seal of its size is cut', async (t) => {
  let now = Date.parse('2025-01-01T00:00:00Z');
  const opts = { ...OPTS, clock: () => (now += 1_000) }; // every seal gets a time of its own
  const h = tempLog(opts);
  t.teardown(() => h.close());
  await append(h, 'a1', 'a2', 'a3');
  await h.log.close(); // seals 3
  // The seal was lost, and the next run sealed the same tree again (another note and time).
  loseTail(h.store, ORG, [], [3]);
  await h.reopen(opts);
  await h.log.flushSeals();
  t.equal(logText(h), exported(h));
  t.same(tokens(logText(h)), ['1:a1', '2:a2', '3:a3', 'seal@3']);
  t.equal(asideFiles(h).length, 1);
});

t.test('a divergence across rotated files: later files go aside whole', async (t) => {
  const opts = { ...OPTS, rotationMaxMb: 0.002 }; // about two events per file
  const h = tempLog(opts);
  t.teardown(() => h.close());
  await append(h, 'a1', 'a2', 'a3', 'a4');
  await h.log.flushSeals();
  await append(h, 'lost5', 'lost6', 'lost7', 'lost8', 'lost9', 'lost10');
  await h.log.close();
  const before = chainFiles(h).length;
  loseTail(h.store, ORG, [5, 6, 7, 8, 9, 10], [10]);
  await h.reopen(opts);
  t.ok(before >= 4, 'the lost events span several files');
  t.ok(asideFiles(h).length >= 2, 'the files after the cut are set aside');
  const lost = asideFiles(h).flatMap((f) => tokens(readFileSync(f, 'utf8')));
  t.same(lost.sort(), ['10:lost10', '5:lost5', '6:lost6', '7:lost7', '8:lost8', '9:lost9', 'seal@10']);
  await append(h, 'new5', 'new6', 'new7');
  await h.log.flushSeals();
  t.equal(logText(h), exported(h), 'the rotated files and the live one are the export');
  t.match(await verifyFile(chainFiles(h), testSigner().publicDocument()), { status: 'intact', events: 7 });
});

t.test('lines longer than a read chunk are checked whole', async (t) => {
  const h = tempLog(OPTS);
  t.teardown(() => h.close());
  const big = (tag: string) => ({
    org_id: ORG,
    event_type: 'x',
    reason: tag,
    details: { text: tag.repeat(200_000) },
  });
  await h.log.append(big('k'));
  await h.log.append(big('e'));
  await h.log.flushSeals();
  await h.log.append(big('l'));
  await h.log.append(big('m'));
  await h.log.close();
  loseTail(h.store, ORG, [3, 4], [4]);
  await h.reopen(OPTS);
  t.same(tokens(readFileSync(asideFiles(h)[0] as string, 'utf8')), ['3:l', '4:m', 'seal@4']);
  t.equal(logText(h), exported(h));
  t.same(tokens(logText(h)), ['1:k', '2:e', 'seal@2']);
});

t.test('drain waits for the writes of a file rotated away (slow disk)', async (t) => {
  // WriteStream writes through the fs module's `write`: slowed here, a rotated file's last write
  // is still on its way when the next file takes over.
  const fs = createRequire(import.meta.url)('node:fs') as { write: (...a: unknown[]) => void };
  const write = fs.write;
  fs.write = (...args: unknown[]) => {
    setTimeout(() => write.apply(fs, args), 40);
  };
  t.teardown(() => {
    fs.write = write;
  });
  const opts = { ...OPTS, rotationMaxMb: 0.002 }; // about two events per file
  const h = tempLog(opts);
  t.teardown(() => h.close());
  for (let round = 0; round < 3; round++) {
    await append(h, `r${round}a`, `r${round}b`, `r${round}c`);
    await h.log.flushSeals(); // a seal line (~5 KB) rotates the file
    t.equal(logText(h), exported(h), `round ${round}: the files hold the whole export once drained`);
  }
});
