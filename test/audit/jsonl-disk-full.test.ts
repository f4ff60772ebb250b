import { readFileSync, rmSync, symlinkSync, truncateSync } from 'node:fs';
import t from 'tap';
import type { ChainLogOptions } from '../../src/audit/chain-log.js';
import { type TempLog, tempLog, waitFor } from './helpers.js';

// The JSONL log is a copy of the store: a write the disk refuses must not end the process, and
// the lines the file missed are written from the store, in place once it can be written again,
// and at the next start even when the org has no further event.

const ORG = 'org_full';
const OPTS: Partial<ChainLogOptions> = { sealIntervalMs: 60_000, sealEvery: 1_000_000 };

const exported = (h: TempLog): string => [...h.log.exportText(ORG)].map((l) => `${l}\n`).join('');

async function append(h: TempLog, ...reasons: string[]): Promise<void> {
  for (const reason of reasons) await h.log.append({ org_id: ORG, event_type: 'x', reason });
}

t.test(
  'a log the disk refuses (ENOSPC) is left behind, then written up to the store in place',
  { skip: process.platform === 'linux' ? false : '/dev/full is Linux only' },
  async (t) => {
    const h = tempLog(OPTS);
    t.teardown(() => h.close());
    await append(h, 'a');
    await h.log.flushSeals();
    const path = h.log.jsonlPath(ORG);
    // The next start of the file opens /dev/full: every write to it fails with ENOSPC.
    await h.reopen();
    rmSync(path);
    symlinkSync('/dev/full', path);
    await append(h, 'b', 'c');
    await h.log.flushSeals();
    // The stream reports its failure after the write's callback.
    await waitFor(() => h.log.lastError !== undefined, 'the write error');
    t.match(h.log.lastError, { code: 'ENOSPC' }, 'the failed write is reported');
    rmSync(path); // space again: the next line starts the file afresh
    await append(h, 'd');
    await h.log.flushSeals();
    t.equal(readFileSync(path, 'utf8'), exported(h), 'the file holds the whole chain, seals included');
  },
);

t.test('a start writes the lines its log missed, without waiting for an event', async (t) => {
  const h = tempLog(OPTS);
  t.teardown(() => h.close());
  await append(h, 'a', 'b', 'c');
  await h.log.flushSeals();
  const path = h.log.jsonlPath(ORG);
  const full = readFileSync(path, 'utf8');
  t.equal(full, exported(h));
  // The file kept its first line only (the disk filled up behind it).
  truncateSync(path, full.indexOf('\n') + 1);
  await h.reopen();
  await h.log.flushSeals(); // drains the log; nothing is left to seal
  t.equal(readFileSync(path, 'utf8'), full, 'the start wrote the missing events and seal');
});
