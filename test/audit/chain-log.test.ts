import { readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { ChainLog } from '../../src/audit/chain-log.js';
import type { AuditEvent, AuditInput, ChainLine } from '../../src/audit/types.js';
import { verifyFile } from '../../src/audit/verify-file.js';
import {
  ChainVerifier,
  checkPersonalField,
  checkpointOrigin,
  commit,
  ERASED,
  fromHex,
  GENESIS,
  hashEvent,
  hashFromStoredText,
  parseCheckpoint,
  verifyConsistency,
  verifyNote,
  verifyReceipt,
} from '../../src/core/chain/index.js';
import { ServiceError } from '../../src/core/errors.js';
import { AuditKeys } from '../../src/crypto/audit-keys.js';
import { WorkerSealSigner } from '../../src/crypto/seal-signer.js';
import { openStore } from '../../src/store/db.js';
import { eventIdSeq } from '../../src/util/ids.js';
import { tempDir } from '../helpers/tmp.js';
import { storedSeals, type TempLog, TestSigner, tempLog, testSigner, waitFor } from './helpers.js';

const ORG = 'org_alpha';
const BASE = Date.UTC(2025, 2, 1, 9, 0, 0);

/** A clock the test moves by hand. */
function manualClock(start = BASE): { now: number; fn: () => number } {
  const c = { now: start, fn: () => c.now };
  return c;
}

function verifyLines(lines: readonly ChainLine[], org: string, signer = testSigner()) {
  const v = new ChainVerifier({ verifiers: signer.verifiers, origin: checkpointOrigin(org) });
  for (const l of lines) {
    if ('_seal' in l) v.pushSeal(l._seal);
    else v.pushEvent(l);
  }
  return v.result();
}

/** The root of a seal note, after checking both signatures. */
function rootOf(note: string, signer = testSigner()): Uint8Array {
  const v = verifyNote(note, signer.verifiers);
  if (!v.ok) throw new Error(`seal note does not verify: ${v.message}`);
  return parseCheckpoint(v.body).rootHash;
}

function parseJsonl(text: string): ChainLine[] {
  return text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as ChainLine);
}

t.test('event ids sort by time and name their seq: no id index, and only the exact id finds', async (t) => {
  const clock = manualClock();
  const h = tempLog({ sealIntervalMs: 60_000, clock: clock.fn });
  t.teardown(() => h.close());
  const ids: string[] = [];
  for (let i = 0; i < 40; i++) {
    clock.now = BASE + i * 7; // a few ms apart, like calls under load
    ids.push((await h.log.append({ org_id: ORG, event_type: 'llm_call' })).id);
    if (i === 19) await h.log.append({ org_id: 'org_beta', event_type: 'llm_call' }); // seq 1 of another org
  }
  t.same([...ids].sort(), ids, 'text order is chain order');
  for (const [i, id] of ids.entries()) {
    t.match(id, /^ae_[0-9A-Za-z]{20}$/);
    t.equal(eventIdSeq(id), i + 1, 'the id names its seq');
  }
  const idKeys = (org: string) => [
    ...h.store.auditIndex.getKeys({ start: [org, 'i'], end: [org, 'i', '~'] }),
  ];
  t.same(idKeys(ORG), [], 'no id index entry is written for ids that name their seq');
  t.equal(h.log.get(ORG, ids[17] as string)?.seq, 18, 'found by its seq');
  t.equal(h.log.receipt(ORG, ids[17] as string), null, 'known (unsealed) to receipts too');

  // Ids that name a seq but are not that event's: another tail, another org's event, a bad digit.
  const id18 = ids[17] as string;
  const otherTail = `${id18.slice(0, -1)}${id18.endsWith('A') ? 'B' : 'A'}`;
  t.equal(h.log.get(ORG, otherTail), undefined, 'same seq, other random tail: not found');
  t.equal(h.log.receipt(ORG, otherTail), undefined);
  t.equal(h.log.sealOf(ORG, otherTail), undefined);
  const beta = h.log.search('org_beta', { limit: 1 }).data[0] as AuditEvent;
  t.equal(eventIdSeq(beta.id), 1);
  t.equal(h.log.get(ORG, beta.id), undefined, "another org's event is not found through this org");
  t.equal(h.log.get('org_beta', beta.id)?.id, beta.id);
  t.equal(h.log.get(ORG, `${id18.slice(0, 12)}-${id18.slice(13)}`), undefined, 'not base62');
  t.equal(h.log.get(ORG, 'ae_00000000000000000000'), undefined, 'seq 0 names nothing');

  // An event written by an older build: a random id, found through the id index only.
  const seq = 25;
  const stored = h.store.auditEvents.get([ORG, seq]) as string;
  const oldId = 'ae_q7Rm2ZkT0bW9xYcV4nLp';
  t.not(eventIdSeq(oldId), seq, 'the old id does not name its seq');
  await h.store.writer.enqueue(() => {
    h.store.auditEvents.putSync([ORG, seq], stored.replace(ids[seq - 1] as string, oldId));
    h.store.auditIndex.putSync([ORG, 'i', oldId], seq);
  });
  t.equal(h.log.get(ORG, oldId)?.seq, seq, 'an older id is found through the index');
  t.equal(h.log.get(ORG, ids[seq - 1] as string), undefined, 'and the id it replaced is gone');
});

t.test('overview rollups: written once a flush interval, exact meanwhile and after a crash', async (t) => {
  const clock = manualClock();
  const h = tempLog({ sealIntervalMs: 60_000, rollupFlushMs: 60_000, clock: clock.fn });
  t.teardown(() => h.close());
  const agents = Array.from({ length: 50 }, (_, i) => `agent-${i}`);
  // 300 events over 3 minutes and two hours' worth of buckets (the clock crosses 10:00).
  const startAt = Date.UTC(2025, 2, 1, 9, 58, 30);
  for (let i = 0; i < 300; i++) {
    clock.now = startAt + i * 600;
    void h.log.append({
      org_id: ORG,
      event_type: i % 3 ? 'llm_call' : 'govern.decision',
      agent_id: agents[i % agents.length] as string,
      outcome: i % 7 ? 'allow' : 'block',
      provider: 'mock',
      usage: { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 },
      cost: 0.25,
    });
    if (i % 40 === 39) await h.log.flushSeals(); // several commits
  }
  await h.log.flushSeals();
  const all = h.log.overview(ORG, {});
  t.equal(all.events, 300, 'overview counts every committed event before any rollup is written');
  t.equal(Object.keys(all.by_agent).length, 50);
  t.same(all.tokens, { prompt: 600, completion: 900, total: 1500 });
  const minute = (ms: number) => Math.floor(ms / 60_000) * 60_000;
  t.equal(h.store.auditMeta.get([ORG, 'm', minute(startAt)]), undefined, 'no rollup written per commit');
  t.equal(h.store.auditMeta.get([ORG, 'r']), 0, "the org's first commit marked where its rollups stand");
  const later = h.log.overview(ORG, { since: new Date(startAt + 100 * 600).toISOString() });
  t.equal(later.events, 200);

  // A crash: the process stops without closing the log, so nothing of the above rollups is stored.
  await h.store.close();
  const store = openStore(join(h.dir, 'data'));
  const log = new ChainLog(store, testSigner(), {
    dataDir: join(h.dir, 'data'),
    rotationMaxMb: 100,
    sealIntervalMs: 60_000,
    rollupFlushMs: 60_000,
    clock: clock.fn,
  });
  t.same(log.overview(ORG, {}), all, 'recounted from the events after the mark');
  t.same(log.overview(ORG, { since: new Date(startAt + 100 * 600).toISOString() }), later);
  await log.close(); // writes the rollups and the mark
  t.equal(store.auditMeta.get([ORG, 'r']), 300);
  t.ok(store.auditMeta.get([ORG, 'm', minute(startAt)]), 'the minute rollup is stored');
  const reopened = new ChainLog(store, testSigner(), {
    dataDir: join(h.dir, 'data'),
    rotationMaxMb: 100,
    sealIntervalMs: 60_000,
    clock: clock.fn,
  });
  t.same(reopened.overview(ORG, {}), all, 'the stored rollups alone, counted once');
  await reopened.close();
  await store.close();
  h.store = openStore(join(h.dir, 'data')); // for the teardown
  h.log = new ChainLog(h.store, testSigner(), { dataDir: join(h.dir, 'data'), rotationMaxMb: 100 });
});

t.test(
  'search postings (agents, types, outcomes, categories, pipelines, sessions, tasks): stored once a flush, search exact throughout',
  async (t) => {
    const opts = { sealIntervalMs: 60_000, rollupFlushMs: 60_000 };
    const h = tempLog(opts);
    t.teardown(() => h.close());
    const types = ['llm_call', 'govern.decision', 'govern.execution', 'approval.granted'];
    for (let i = 0; i < 240; i++) {
      void h.log.append({ org_id: ORG, ...appendInput(i, types) });
      if (i % 30 === 29) await h.log.flushSeals(); // several commits
    }
    await h.log.flushSeals();
    const filters: Array<Record<string, string>> = [
      { agent_id: 'agent-3' },
      { action: 'block' },
      { event_type: 'govern.decision' },
      { category: 'govern' },
      { agent_id: 'agent-4', action: 'block' },
      { agent_id: 'agent-5', event_type: 'llm_call', category: 'llm_call' },
      { category: 'approval', pipeline_id: 'pl_3' },
      { pipeline_id: 'pl_17' },
      { session_id: 'chat-4' },
      { session_id: 'ses_5' }, // derived from pipeline pl_5: found through the pipeline's list
      { task_id: 'task-2' },
      { task_id: 'task-1', agent_id: 'agent-9' },
      { agent_id: 'nobody' },
    ];
    const field = { agent_id: 'agent_id', action: 'outcome', event_type: 'event_type' } as const;
    const holds = (e: AuditEvent, f: Record<string, string>) =>
      Object.entries(f).every(([k, v]) =>
        k === 'category'
          ? e.event_type.split('.')[0] === v
          : (e as unknown as Record<string, unknown>)[field[k as keyof typeof field] ?? k] === v,
      );
    const check = (log: ChainLog, label: string) => {
      const every = log.search(ORG, { limit: 1000 }).data;
      for (const f of filters) {
        const want = every.filter((e) => holds(e, f)).map((e) => e.seq);
        // Two pages each way: the index serves order and cursors too.
        const first = log.search(ORG, { ...f, limit: 7 });
        const rest = first.next_cursor
          ? log.search(ORG, { ...f, limit: 1000, cursor: first.next_cursor }).data
          : [];
        t.same(
          [...first.data, ...rest].map((e) => e.seq),
          want,
          `${label}: ${JSON.stringify(f)}`,
        );
      }
      return every.length;
    };
    const stored = (store: typeof h.store, kind: string) =>
      [...store.auditIndex.getKeys({ start: [ORG, kind], end: [ORG, kind, '\uffff'] })].length;

    t.equal(check(h.log, 'in memory only'), 240);
    for (const kind of ['a', 'e', 'o', 'f', 'p', 's', 't'])
      t.equal(stored(h.store, kind), 0, `no '${kind}' posting per commit`);
    t.equal(h.store.auditMeta.get([ORG, 'q']), 0, "the org's first commit marked where its postings stand");

    // A crash: nothing of the buffered postings is stored; the next start rebuilds them.
    await h.store.close();
    let store = openStore(join(h.dir, 'data'));
    let log = new ChainLog(store, testSigner(), {
      dataDir: join(h.dir, 'data'),
      rotationMaxMb: 100,
      ...opts,
    });
    check(log, 'after a crash');
    for (let i = 240; i < 300; i++) void log.append({ org_id: ORG, ...appendInput(i, types) });
    await log.flushSeals();
    t.equal(check(log, 'rebuilt and new'), 300);
    await log.close(); // stores the postings and the mark
    t.equal(store.auditMeta.get([ORG, 'q']), 300);
    t.equal(stored(store, 'a'), 12, 'one list per agent, written once');
    t.equal(stored(store, 'p'), 40, 'one list per pipeline');
    t.equal(stored(store, 's'), 6, 'one list per session the caller named; none for derived ones');
    t.equal(stored(store, 't'), 5, 'one list per task');

    log = new ChainLog(store, testSigner(), { dataDir: join(h.dir, 'data'), rotationMaxMb: 100, ...opts });
    check(log, 'stored only');
    for (let i = 300; i < 330; i++) void log.append({ org_id: ORG, ...appendInput(i, types) });
    await log.flushSeals();
    t.equal(check(log, 'stored and in memory'), 330);
    await log.close();
    await store.close();
    store = openStore(join(h.dir, 'data'));
    h.store = store; // for the teardown
    h.log = new ChainLog(store, testSigner(), { dataDir: join(h.dir, 'data'), rotationMaxMb: 100 });
    check(h.log, 'reopened');
  },
);

function appendInput(i: number, types: readonly string[]): Omit<AuditInput, 'org_id'> {
  return {
    event_type: types[i % types.length] as string,
    agent_id: `agent-${i % 12}`,
    outcome: i % 5 ? 'allow' : 'block',
    pipeline_id: `pl_${i % 40}`,
    // Every third event carries the session id derived from its pipeline (as govgate assigns it).
    session_id: i % 3 === 0 ? `ses_${i % 40}` : `chat-${i % 9}`,
    task_id: i % 2 === 0 ? `task-${i % 5}` : null,
  };
}

t.test('many distinct values: the pending postings are stored before the timer, bounded', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000, rollupFlushMs: 60_000, pendingListsMax: 16 });
  t.teardown(() => h.close());
  const lists = () =>
    [...h.store.auditIndex.getKeys({ start: [ORG, 'p'], end: [ORG, 'p', '\uffff'] })].length;
  const mark = () => h.store.auditMeta.get([ORG, 'q']);
  // The first event begins three lists (its type, category and pipeline), each later one one
  // (its pipeline): 13 events, 15 lists, below the bound: nothing is stored before the timer.
  for (let i = 0; i < 13; i++)
    await h.log.append({ org_id: ORG, event_type: 'llm_call', pipeline_id: `pl_a${i}` });
  await new Promise((r) => setTimeout(r, 20));
  t.equal(lists(), 0, 'below the bound: in memory');
  t.equal(mark(), 0, 'the first commit marked where the postings stood');
  // The 16th list begun: every pending list is stored with the next commit.
  await h.log.append({ org_id: ORG, event_type: 'llm_call', pipeline_id: 'pl_a13' });
  await waitFor(() => lists() === 14, 'fourteen pipeline lists stored', 2_000);
  t.equal(mark(), 14, 'the postings mark moved with them');
  t.equal(h.store.auditMeta.get([ORG, 'r']), 0, 'the rollups still wait for their timer');
  // The count starts again: 13 more events (the same pipelines) begin 15 lists, stored later.
  for (let i = 0; i < 13; i++)
    await h.log.append({ org_id: ORG, event_type: 'llm_call', pipeline_id: `pl_a${i}` });
  await new Promise((r) => setTimeout(r, 20));
  t.equal(lists(), 14, 'nothing more stored early');
  t.same(
    h.log.search(ORG, { pipeline_id: 'pl_a3', limit: 100 }).data.map((e) => e.seq),
    [18, 4],
    'search merges the stored list and the pending seqs',
  );
});

t.test('the JSONL log catches up with the store by itself, in one write per burst', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  const lines = () => {
    try {
      return parseJsonl(readFileSync(h.log.jsonlPath(ORG), 'utf8'));
    } catch {
      return [];
    }
  };
  // Three commits (one per turn) and no flushSeals or close: the timer writes them.
  for (let i = 0; i < 3; i++) await h.log.append({ org_id: ORG, event_type: 'llm_call', details: { i } });
  await waitFor(() => lines().length === 3, 'the three lines in the file', 5_000);
  t.same(
    lines().map((l) => (l as AuditEvent).seq),
    [1, 2, 3],
  );
  // A burst larger than a chunk is written without waiting for the timer, in order.
  const big = 'x'.repeat(20_000);
  await Promise.all(
    Array.from({ length: 8 }, (_, i) =>
      h.log.append({ org_id: ORG, event_type: 'big', details: { i, big } }),
    ),
  );
  await h.log.flushSeals();
  t.same(
    lines().map((l) => ('_seal' in l ? 'seal' : (l as AuditEvent).seq)),
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 'seal'],
    'flushSeals leaves the file complete',
  );
});

t.test('append links events into a per-org chain', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  const refs = [];
  for (let i = 0; i < 5; i++) {
    refs.push(
      await h.log.append({
        org_id: ORG,
        event_type: 'llm_call',
        agent_id: 'agent-1',
        session_id: 'sess-1',
        pipeline_id: `pl_${i}`,
        outcome: 'allow',
        provider: 'mock',
        model: 'mock-echo',
        usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
        cost: 0.5,
        details: { n: i, nested: { list: [1, 'two', null] } },
      }),
    );
  }
  const other = await h.log.append({ org_id: 'org_beta', event_type: 'admin.user_created' });
  const sys = await h.log.append({ org_id: '_system', event_type: 'admin.org_created' });
  t.same(
    refs.map((r) => r.seq),
    [1, 2, 3, 4, 5],
  );
  t.equal(other.seq, 1, 'each org has its own seq');
  t.equal(sys.seq, 1, '_system is an org like any other');
  let prev = GENESIS;
  for (const [i, ref] of refs.entries()) {
    t.match(ref.id, /^ae_[0-9A-Za-z]{20}$/);
    const e = h.log.get(ORG, ref.id) as AuditEvent;
    t.ok(e, `event ${i + 1} is readable`);
    t.equal(e.seq, i + 1);
    t.equal(e._chain_version, 2);
    t.equal(e.org_id, ORG);
    t.equal(e.prev_hash, prev, 'prev_hash is the previous hash');
    const { seal: _seal, ...stored } = e;
    t.equal(e.hash, hashEvent(prev, stored), 'hash = SHA-256(prev ‖ canonical)');
    t.equal(e.seal, null, 'not sealed yet');
    t.same(e.details, { n: i, nested: { list: [1, 'two', null] } });
    t.equal(e.pipeline_id, `pl_${i}`);
    t.equal(e.task_id, null);
    t.same(e.personal, {});
    prev = e.hash as string;
  }
  t.equal(h.log.get('org_beta', refs[0]?.id as string), undefined, 'another org cannot read it');
  t.equal(h.log.get(ORG, 'ae_missing'), undefined);
  t.same(
    h.log.byPipeline(ORG, 'pl_3').map((e) => e.seq),
    [4],
  );
  const whole = h.log.view(ORG, 'session_id', 'sess-1', 1000);
  t.same(
    whole.data.map((e) => e.seq),
    [1, 2, 3, 4, 5],
    'oldest first',
  );
  t.equal(whole.next_cursor, null);
  const first = h.log.view(ORG, 'session_id', 'sess-1', 2);
  t.same(
    first.data.map((e) => e.seq),
    [1, 2],
  );
  const next = h.log.view(ORG, 'session_id', 'sess-1', 2, first.next_cursor ?? undefined);
  t.same(
    next.data.map((e) => e.seq),
    [3, 4],
    'the next page starts after the last',
  );
  t.same(h.log.view(ORG, 'task_id', 'none', 10), { data: [], next_cursor: null });
});

t.test('a bad event is refused and leaves the chain untouched', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  await h.log.append({ org_id: ORG, event_type: 'a' });
  await t.rejects(h.log.append({ org_id: '', event_type: 'a' }), { code: 'invalid_request' });
  await t.rejects(h.log.append({ org_id: ORG, event_type: 'a', details: { x: Number.NaN } }));
  await t.rejects(h.log.append({ org_id: ORG, event_type: 'a', personal: { f: [undefined] } }));
  const next = await h.log.append({ org_id: ORG, event_type: 'b' });
  t.equal(next.seq, 2, 'the refused events took no seq');
  t.equal(h.log.get(ORG, next.id)?.prev_hash, h.log.search(ORG, { limit: 2 }).data[1]?.hash);
  await h.log.flushSeals();
  t.equal(h.log.integrity(ORG).status, 'intact');
});

t.test('personal fields are committed with fresh salts', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  const values = { end_user: 'alice@example.com', prompt: { text: 'hi', n: 1 }, __proto__x: 'odd key' };
  const a = await h.log.append({ org_id: ORG, event_type: 'llm_call', personal: values });
  const b = await h.log.append({
    org_id: ORG,
    event_type: 'llm_call',
    personal: { end_user: 'alice@example.com' },
  });
  const ea = h.log.get(ORG, a.id) as AuditEvent;
  const eb = h.log.get(ORG, b.id) as AuditEvent;
  const salts = new Set<string>();
  for (const [path, value] of Object.entries(values)) {
    const f = ea.personal[path] as { value: unknown; salt: string; c: string };
    t.same(f.value, value, `${path} keeps its value`);
    t.match(f.salt, /^[A-Za-z0-9_-]{22}$/, 'a 16-byte base64url salt');
    t.equal(f.c, commit(f.salt, path, value), 'c commits to salt, path and value');
    t.equal(checkPersonalField(path, f), 'ok');
    salts.add(f.salt);
  }
  const fb = eb.personal.end_user as { salt: string; c: string };
  salts.add(fb.salt);
  t.equal(salts.size, 4, 'every field has its own salt');
  t.not(fb.c, (ea.personal.end_user as { c: string }).c, 'same value, different commitment');
  // The hash covers only the commitment: an erased value still hashes the same.
  const { seal: _s, ...stored } = ea;
  const erased = {
    ...stored,
    personal: {
      ...stored.personal,
      end_user: { value: ERASED, c: (ea.personal.end_user as { c: string }).c },
    },
  };
  t.equal(hashEvent(ea.prev_hash as string, erased), ea.hash);
});

t.test('without rollups (a sidecar): nothing counted or stored, and search still finds', async (t) => {
  const h = tempLog({ rollups: false, rollupFlushMs: 5 });
  t.teardown(() => h.close());
  for (let i = 0; i < 20; i++)
    await h.log.append({ org_id: ORG, event_type: 'llm_call', agent_id: 'a', pipeline_id: `pl_${i % 4}` });
  await new Promise((r) => setTimeout(r, 30)); // past the flush timer: postings are stored
  t.equal(h.log.overview(ORG, {}).events, 0, 'no overview');
  t.same(
    [...h.store.auditMeta.getRange()].filter(({ key }) =>
      ['m', 'h', 'r'].includes((key as unknown[])[1] as string),
    ),
    [],
    'no rollup and no rollup mark in the store',
  );
  t.equal(h.log.view(ORG, 'pipeline_id', 'pl_1', 100).data.length, 5, 'a pipeline is found by its postings');
  t.equal(h.log.integrity(ORG).status, 'intact');
});

t.test('seals: cut by count, by time, one in flight at a time', async (t) => {
  t.test('by count', async (t) => {
    const signer = new TestSigner();
    const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 10 }, signer);
    t.teardown(() => h.close());
    const refs = await Promise.all(
      Array.from({ length: 25 }, (_, i) => h.log.append({ org_id: ORG, event_type: 'e', details: { i } })),
    );
    await waitFor(() => storedSeals(h.store, ORG).length === 2, 'two seals');
    const seals = storedSeals(h.store, ORG);
    t.same(
      seals.map((s) => [s.seq, s.size]),
      [
        [1, 10],
        [2, 25],
      ],
      'the first at 10 events; the rest when it was stored',
    );
    for (const s of seals) {
      const v = verifyNote(s.note, signer.verifiers);
      t.ok(v.ok, 'both signatures verify');
      if (!v.ok) continue;
      const cp = parseCheckpoint(v.body);
      t.equal(cp.origin, `govgate/${ORG}`);
      t.equal(cp.size, s.size);
      t.equal(cp.head, h.log.search(ORG, { limit: 1000 }).data.find((e) => e.seq === s.size)?.hash);
      t.equal(cp.alg, 'ed25519+ml-dsa-65');
    }
    for (const [i, ref] of refs.entries()) {
      t.same(h.log.get(ORG, ref.id)?.seal, { seq: i < 10 ? 1 : 2 }, `event ${i + 1} → its covering seal`);
    }
    t.equal(signer.signed.length, 2, 'no other seal was cut');
  });

  t.test('by size: a span of large events is sealed before it holds too much to ship', async (t) => {
    const signer = new TestSigner();
    const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 1000, sealMaxChars: 12_000 }, signer);
    t.teardown(() => h.close());
    // Each line holds 3,000 characters and its members (under 1,000): the fourth crosses 12,000.
    for (let i = 0; i < 8; i++) {
      await h.log.append({ org_id: ORG, event_type: 'e', details: { text: 'x'.repeat(3000) } });
      // (each seal is stored before the next span fills)
      await waitFor(() => storedSeals(h.store, ORG).length === Math.floor((i + 1) / 4), 'the seals due');
    }
    t.same(
      storedSeals(h.store, ORG).map((s) => s.size),
      [4, 8],
      'sealed on the append that crossed the bound, with no timer',
    );
    // Small events do not: ten of these hold far less.
    const small = tempLog(
      { sealIntervalMs: 60_000, sealEvery: 1000, sealMaxChars: 12_000 },
      new TestSigner(),
    );
    t.teardown(() => small.close());
    for (let i = 0; i < 10; i++) await small.log.append({ org_id: ORG, event_type: 'e' });
    await new Promise((r) => setTimeout(r, 20));
    t.same(storedSeals(small.store, ORG), [], 'nothing sealed before the timer');
  });

  t.test('by time', async (t) => {
    const signer = new TestSigner();
    const h = tempLog({ sealIntervalMs: 15, sealEvery: 1000 }, signer);
    t.teardown(() => h.close());
    for (let i = 0; i < 3; i++) await h.log.append({ org_id: ORG, event_type: 'e' });
    await waitFor(() => storedSeals(h.store, ORG).length === 1, 'a timed seal');
    t.equal(storedSeals(h.store, ORG)[0]?.size, 3);
    const more = await h.log.append({ org_id: ORG, event_type: 'e' });
    t.equal(h.log.get(ORG, more.id)?.seal, null, 'unsealed until the next seal');
    await waitFor(() => storedSeals(h.store, ORG).length === 2, 'a second timed seal');
    t.same(h.log.get(ORG, more.id)?.seal, { seq: 2 });
    t.equal(h.log.integrity(ORG).status, 'intact');
  });

  t.test('a seal being signed is not cut again', async (t) => {
    const signer = new TestSigner();
    signer.delayMs = 40;
    const h = tempLog({ sealIntervalMs: 5, sealEvery: 5 }, signer);
    t.teardown(() => h.close());
    for (let i = 0; i < 5; i++) void h.log.append({ org_id: ORG, event_type: 'e' });
    // While the seal at 5 is being signed, more events arrive and timers fire.
    for (let i = 0; i < 12; i++) {
      await h.log.append({ org_id: ORG, event_type: 'e' });
      await new Promise((r) => setTimeout(r, 2));
    }
    await h.log.flushSeals();
    const sizes = signer.signed.map((b) => parseCheckpoint(b).size);
    t.equal(sizes[0], 5);
    t.same([...new Set(sizes)], sizes, 'no size was signed twice');
    t.same(
      sizes,
      [...sizes].sort((a, b) => a - b),
      'seals only move forward',
    );
    t.equal(sizes[sizes.length - 1], 17, 'flushSeals seals up to the head');
    t.same(
      storedSeals(h.store, ORG).map((s) => s.size),
      sizes,
    );
  });

  t.test('a failing signer delays seals; events stay valid and are sealed later', async (t) => {
    const signer = new TestSigner();
    signer.failing = true;
    const h = tempLog({ sealIntervalMs: 5, sealEvery: 2 }, signer);
    t.teardown(() => h.close());
    for (let i = 0; i < 4; i++) await h.log.append({ org_id: ORG, event_type: 'e' });
    await t.rejects(h.log.flushSeals(), /signer unavailable/);
    t.match(String(h.log.lastError), /signer unavailable/);
    t.same(storedSeals(h.store, ORG), []);
    t.match(h.log.integrity(ORG), { status: 'intact', events: 4 }, 'unsealed events verify by their links');
    signer.failing = false;
    await h.log.flushSeals();
    t.equal(storedSeals(h.store, ORG).at(-1)?.size, 4);
  });
});

t.test('receipts and consistency proofs verify offline', async (t) => {
  const signer = testSigner();
  const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 7 });
  t.teardown(() => h.close());
  const refs = [];
  for (let round = 0; round < 5; round++) {
    refs.push(
      ...(await Promise.all(
        Array.from({ length: 3 + round * 2 }, (_, i) =>
          h.log.append({ org_id: ORG, event_type: 'e', personal: { u: `user-${round}-${i}` } }),
        ),
      )),
    );
    await h.log.flushSeals();
  }
  const unsealedRef = await h.log.append({ org_id: ORG, event_type: 'late' });
  t.equal(h.log.receipt(ORG, unsealedRef.id), null, 'no receipt before the seal');
  t.equal(h.log.receipt(ORG, 'ae_nope'), undefined);
  t.equal(h.log.receipt('org_other', refs[0]?.id as string), undefined, 'scoped to the org');

  for (const ref of refs) {
    const r = h.log.receipt(ORG, ref.id);
    const e = h.log.get(ORG, ref.id) as AuditEvent;
    if (r === null || r === undefined) {
      t.fail(`receipt of ${ref.seq}`);
      continue;
    }
    t.ok(r.tree_size >= ref.seq);
    const { seal: _s, ...stored } = e;
    t.same(verifyReceipt(r, signer.verifiers, stored), { ok: true }, `receipt of ${ref.seq} verifies`);
    if (ref.seq === 4) {
      t.same(verifyReceipt(r, signer.verifiers, { ...stored, outcome: 'block' }), {
        ok: false,
        reason: 'content_modified',
      });
      const wrong = { ...r, inclusion_proof: [...r.inclusion_proof].reverse() };
      if (r.inclusion_proof.length > 1) t.match(verifyReceipt(wrong, signer.verifiers), { ok: false });
    }
  }

  const seals = storedSeals(h.store, ORG);
  t.ok(seals.length >= 5);
  for (const a of seals) {
    for (const b of seals) {
      if (a.size > b.size) continue;
      const p = h.log.consistency(ORG, a.size, b.size);
      if (p === undefined) {
        t.fail('proof');
        continue;
      }
      const ra = rootOf(p.from_checkpoint, signer);
      const rb = rootOf(p.to_checkpoint, signer);
      const proof = p.consistency_proof.map((x) => fromHex(x) as Uint8Array);
      t.ok(verifyConsistency(a.size, b.size, ra, rb, proof), `${a.size} ⊑ ${b.size}`);
      if (proof.length > 0 && a.size !== b.size) {
        t.notOk(verifyConsistency(a.size, b.size, rb, ra, proof), 'roots swapped fail');
      }
    }
  }
  const sizes = new Set(seals.map((x) => x.size));
  const notASeal = [...Array(40).keys()].find((k) => k > 0 && !sizes.has(k)) as number;
  t.equal(h.log.consistency(ORG, notASeal, seals[seals.length - 1]?.size as number), undefined);
  t.throws(() => h.log.consistency(ORG, 0, 3), ServiceError);
  t.throws(() => h.log.consistency(ORG, 9, 3), ServiceError);
});

t.test('orgs interleaved in one commit: every chain, tree and receipt stays right', async (t) => {
  const signer = testSigner();
  const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 1_000_000 }, signer);
  t.teardown(() => h.close());
  // Key order differs from append order (org_m < org_z, org_a first), so most event writes are
  // not appends in LMDB's key order; sizes cross the stored Merkle levels (≥ 16 leaves).
  const orgs = ['org_z', 'org_a', 'org_m'];
  const counts = [37, 53, 16];
  const pending: Promise<{ id: string; seq: number }>[][] = orgs.map(() => []);
  for (let i = 0; i < 60; i++)
    for (const [o, org] of orgs.entries())
      if (i < (counts[o] as number))
        (pending[o] as Promise<{ id: string; seq: number }>[]).push(
          h.log.append({ org_id: org, event_type: 'e', details: { i } }),
        );
  const refs = await Promise.all(pending.map((p) => Promise.all(p)));
  await h.log.flushSeals();
  const roots = new Map<string, string>();
  for (const [o, org] of orgs.entries()) {
    t.match(h.log.integrity(org), { status: 'intact' }, `${org} is intact`);
    const mine = refs[o] ?? [];
    t.same(
      mine.map((r) => r.seq),
      [...Array(counts[o]).keys()].map((k) => k + 1),
    );
    let ok = 0;
    for (const ref of mine) {
      const r = h.log.receipt(org, ref.id);
      const e = h.log.get(org, ref.id) as AuditEvent;
      const { seal: _s, ...stored } = e;
      if (r && verifyReceipt(r, signer.verifiers, stored).ok) ok++;
    }
    t.equal(ok, mine.length, `all ${mine.length} receipts of ${org} verify`);
    const last = storedSeals(h.store, org).at(-1);
    roots.set(org, last?.note ?? '');
  }
  // After a restart the heads are rebuilt from stored and recomputed nodes: the next seals extend
  // the same trees (consistency from the old seal to the new one).
  await h.reopen();
  for (const org of orgs) await h.log.append({ org_id: org, event_type: 'after-restart' });
  await h.log.flushSeals();
  for (const org of orgs) {
    const seals = storedSeals(h.store, org);
    const [a, b] = [seals.at(-2), seals.at(-1)];
    t.equal(a?.note, roots.get(org));
    const p = h.log.consistency(org, a?.size as number, b?.size as number);
    const proof = (p?.consistency_proof ?? []).map((x) => fromHex(x) as Uint8Array);
    t.ok(
      verifyConsistency(
        a?.size as number,
        b?.size as number,
        rootOf(a?.note as string, signer),
        rootOf(b?.note as string, signer),
        proof,
      ),
      `${org}: the tree after the restart extends the one before`,
    );
  }
});

t.test('strings with an unpaired surrogate are recorded well formed (U+FFFD)', async (t) => {
  // A provider's tool name or error message can hold one; RFC 8785 tools refuse to canonicalize
  // such an event, so it is recorded with U+FFFD in its place.
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  const ref = await h.log.append({
    org_id: ORG,
    event_type: 'llm_call',
    reason: 'cut inside an emoji: \ud83d',
    details: { tool_calls: ['lookup\udc00'], '\ud800': 1, __proto__member: { ok: '\ud83d\ude00' } },
    personal: { end_user: 'alice\ud800' },
  });
  const raw = h.store.auditEvents.get([ORG, ref.seq]) as string;
  t.notMatch(raw, /\\ud[89a-f]/i, 'no surrogate escape in the stored line');
  const e = JSON.parse(raw) as AuditEvent & { details: Record<string, unknown> };
  t.equal(e.reason, 'cut inside an emoji: \ufffd');
  t.same(e.details.tool_calls, ['lookup\ufffd']);
  t.equal(e.details['\ufffd'], 1);
  t.same(e.details.__proto__member, { ok: '\ud83d\ude00' }, 'a pair is kept');
  t.equal((e.personal as Record<string, { value: unknown }>).end_user?.value, 'alice\ufffd');
  t.equal(hashEvent(e.prev_hash as string, e), e.hash, 'hashed as recorded');
  const plain = await h.log.append({ org_id: ORG, event_type: 'llm_call', reason: 'a \\ud800 in text' });
  const rawPlain = h.store.auditEvents.get([ORG, plain.seq]) as string;
  t.equal((JSON.parse(rawPlain) as AuditEvent).reason, 'a \\ud800 in text', 'an escaped backslash is text');
  t.match(h.log.integrity(ORG), { status: 'intact' });
});

t.test('the stored text hashes to the event hash without re-serialising (any content)', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  const key = fc.string({ minLength: 1, maxLength: 8 }).filter((k) => k !== '__proto__');
  await fc.assert(
    fc.asyncProperty(
      fc.dictionary(key, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 }),
      fc.dictionary(key, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
      fc.option(fc.string(), { nil: undefined }),
      async (details, personal, reason) => {
        const ref = await h.log.append({
          org_id: ORG,
          event_type: 'prop',
          details: details as AuditInput['details'],
          personal: personal as AuditInput['personal'],
          ...(reason === undefined ? {} : { reason }),
        });
        const raw = h.store.auditEvents.get([ORG, ref.seq]) as string;
        const e = JSON.parse(raw) as Record<string, unknown>;
        const fast = hashFromStoredText(e.prev_hash as string, e, raw);
        return fast === e.hash && hashEvent(e.prev_hash as string, e) === e.hash;
      },
    ),
    { numRuns: 300 },
  );
  // Not the writer's text: the shortcut gives up or disagrees. The verifier falls back to the
  // parsed event only for a line that is exactly its serialization (one of an older layout), so a
  // reformatted line is modified like an edited one: "intact" means the bytes govgate wrote.
  const ref = await h.log.append({ org_id: ORG, event_type: 'prop', personal: { u: 'x' } });
  const raw = h.store.auditEvents.get([ORG, ref.seq]) as string;
  const e = JSON.parse(raw) as Record<string, unknown>;
  const pretty = JSON.stringify(e, null, 2);
  t.not(hashFromStoredText(e.prev_hash as string, e, pretty), e.hash, 'pretty-printed: no shortcut');
  const check = (text: string) => {
    const parsed = JSON.parse(text) as Record<string, unknown>;
    const direct = new ChainVerifier({ verifiers: [] });
    direct.pushEvent(parsed, text);
    return direct.result().broken_events.filter((b) => b.reason === 'content_modified').length;
  };
  t.equal(check(raw), 0, 'the stored line is intact');
  t.equal(check(pretty), 1, 'a pretty-printed copy is content_modified');
  const reordered = JSON.stringify(Object.fromEntries(Object.entries(e).reverse()));
  t.not(hashFromStoredText(e.prev_hash as string, e, reordered), e.hash, 'reordered: no shortcut');
  t.equal(check(reordered), 0, 'a serialization in another member order is intact (slow path)');
  t.equal(check(raw.replace('"prop"', '"pr0p"')), 1, 'an edited line is content_modified');
});

// ---------------------------------------------------------------------------------------------
// Search

const AGENTS = ['agent-a', 'agent-b', 'agent-c'];
const TYPES = ['llm_call', 'govern.decision', 'admin.user_created', 'approval.decided', 'pii_detected'];
const OUTCOMES = ['allow', 'block', 'needs_approval', null];

function searchInput(i: number): AuditInput {
  return {
    org_id: ORG,
    event_type: TYPES[i % TYPES.length] as string,
    agent_id: i % 7 === 0 ? null : (AGENTS[i % 3] as string),
    // ses_K / tsk_K are the derived form: indexed through pipeline pl_K when K is the event's own
    // pipeline (i % 5 === 1, 2), under their own value when named for another pipeline (i % 13 === 3).
    session_id:
      i % 13 === 3
        ? `ses_${Math.floor(i / 2) + 1}`
        : i % 5 === 1
          ? `ses_${Math.floor(i / 2)}`
          : `sess-${i % 4}`,
    task_id: i % 6 === 0 ? null : i % 5 === 2 ? `tsk_${Math.floor(i / 2)}` : `task-${i % 5}`,
    pipeline_id: `pl_${Math.floor(i / 2)}`,
    outcome: OUTCOMES[i % 4] ?? null,
    reason: i % 9 === 0 ? 'Shell is DISABLED here' : null,
    rule_id: i % 11 === 0 ? 'no-shell' : null,
    model: i % 2 === 0 ? 'gpt-4o' : 'mock-echo',
    provider: i % 2 === 0 ? 'openai' : 'mock',
    usage: i % 3 === 0 ? { prompt_tokens: i, completion_tokens: 2 * i, total_tokens: 3 * i } : null,
    cost: i % 3 === 0 ? i / 100 : null,
    details:
      i % 8 === 0 ? { tool: 'payments.Transfer' } : { action: { tool: i % 5 === 0 ? 'shell.exec' : null } },
  };
}

interface Filter {
  agent_id?: string;
  session_id?: string;
  task_id?: string;
  pipeline_id?: string;
  action?: string;
  category?: string;
  q?: string;
  event_type?: string;
  since?: string;
  until?: string;
}

/** What a filter means, written out independently of the code under test. */
function matches(e: AuditEvent, f: Filter): boolean {
  if (f.agent_id !== undefined && e.agent_id !== f.agent_id) return false;
  if (f.session_id !== undefined && e.session_id !== f.session_id) return false;
  if (f.task_id !== undefined && e.task_id !== f.task_id) return false;
  if (f.pipeline_id !== undefined && e.pipeline_id !== f.pipeline_id) return false;
  if (f.action !== undefined && e.outcome !== f.action) return false;
  if (f.category !== undefined && e.event_type.split('.')[0] !== f.category) return false;
  if (f.event_type !== undefined && e.event_type !== f.event_type) return false;
  if (f.since !== undefined && Date.parse(e.ts) < Date.parse(f.since)) return false;
  if (f.until !== undefined && Date.parse(e.ts) > Date.parse(f.until)) return false;
  if (f.q !== undefined) {
    const d = e.details as { tool?: string; action?: { tool?: string | null } };
    const hay = [e.event_type, e.reason, e.rule_id, e.model, e.provider, e.agent_id, d.tool, d.action?.tool];
    if (!hay.some((s) => typeof s === 'string' && s.toLowerCase().includes(f.q?.toLowerCase() as string)))
      return false;
  }
  return true;
}

for (const searchBudget of [undefined, 17])
  t.test(
    `search (rows examined per call: ${searchBudget ?? 'default'}): every filter, cursor pages, concurrent appends`,
    async (t) => {
      const clock = manualClock();
      const h = tempLog({
        sealIntervalMs: 10,
        sealEvery: 50,
        clock: clock.fn,
        ...(searchBudget ? { searchBudget } : {}),
      });
      t.teardown(() => h.close());
      let n = 0;
      const appendSome = async (k: number): Promise<void> => {
        const batch: Promise<unknown>[] = [];
        for (let i = 0; i < k; i++) {
          clock.now = BASE + n * 45_000; // 45 s apart: pages span minutes and hours
          batch.push(h.log.append(searchInput(n++)));
        }
        await Promise.all(batch);
      };
      await appendSome(240);
      const all = (): AuditEvent[] => [...h.log.scanEvents(ORG, {}, 1e9)];
      t.equal(all().length, 240);
      t.same(
        all().map((e) => e.seq),
        Array.from({ length: 240 }, (_, i) => i + 1),
        'scanEvents is oldest first',
      );

      const tsOf = (seq: number): string => new Date(BASE + (seq - 1) * 45_000).toISOString();
      const filters: Filter[] = [
        {},
        { agent_id: 'agent-b' },
        { session_id: 'sess-2' },
        { task_id: 'task-3' },
        { pipeline_id: 'pl_17' },
        { action: 'block' },
        { category: 'admin' },
        { category: 'llm_call' },
        { event_type: 'govern.decision' },
        { q: 'SHELL' },
        { q: 'transfer' },
        { q: 'openai' },
        { since: tsOf(50) },
        { until: tsOf(30) },
        { since: tsOf(20), until: tsOf(100) },
        { since: new Date(BASE + 19 * 45_000 + 1).toISOString(), until: '2025-03-01T10:00:00+01:00' },
        { agent_id: 'agent-a', action: 'allow' },
        { agent_id: 'agent-c', session_id: 'sess-1', category: 'govern' },
        { agent_id: 'agent-a', q: 'gpt', since: tsOf(10), until: tsOf(200) },
        { task_id: 'task-1', event_type: 'pii_detected', action: 'needs_approval' },
        { agent_id: 'nobody' },
        { agent_id: 'agent-a', session_id: 'sess-0', task_id: 'task-4', pipeline_id: 'pl_9' },
      ];
      // Derived-form session and task ids, including ones held both by events of their own
      // pipeline (no index entry) and by events that named them (an entry of their own).
      const derived = (field: 'session_id' | 'task_id', prefix: string): string[] => {
        const seen = new Map<string, Set<string>>();
        for (const e of all()) {
          const v = e[field];
          if (typeof v !== 'string' || !v.startsWith(prefix)) continue;
          const own = e.pipeline_id === `pl_${v.slice(prefix.length)}` ? 'own' : 'named';
          seen.set(v, (seen.get(v) ?? new Set()).add(own));
        }
        const both = [...seen].filter(([, k]) => k.size === 2).map(([v]) => v);
        return [...both.slice(0, 3), ...[...seen.keys()].filter((v) => !both.includes(v)).slice(0, 4)];
      };
      const sessions = derived('session_id', 'ses_');
      const tasks = derived('task_id', 'tsk_');
      t.ok(sessions.length >= 5 && tasks.length >= 4, 'the data has derived ids to look for');
      await h.reopen(); // stores the pending postings: the entries below are the stored ones
      const entries = (kind: string, v: string): number =>
        [
          ...h.store.auditIndex.getKeys({
            start: [ORG, kind, v],
            end: [ORG, kind, v, Number.MAX_SAFE_INTEGER],
          }),
        ].length;
      const ownOnly = all().filter(
        (e) =>
          e.session_id === `ses_${e.pipeline_id?.slice(3)}` &&
          !all().some((o) => o.session_id === e.session_id && o.pipeline_id !== e.pipeline_id),
      );
      t.ok(ownOnly.length > 0, 'some derived sessions are held only by their own pipeline');
      t.equal(
        ownOnly.reduce((n, e) => n + entries('s', e.session_id as string), 0),
        0,
        'a derived session id of its own pipeline gets no index entry',
      );
      t.ok(entries('s', 'sess-1') > 0, 'a named session does');
      filters.push(
        ...sessions.map((session_id) => ({ session_id })),
        ...tasks.map((task_id) => ({ task_id })),
        { session_id: sessions[0] as string, agent_id: 'agent-b' },
        { task_id: tasks[1] as string, session_id: sessions[1] as string },
        { session_id: 'ses_nothing' },
      );
      for (const f of filters) {
        const before = all();
        const expected = before
          .filter((e) => matches(e, f))
          .map((e) => e.seq)
          .reverse();
        const got: number[] = [];
        let cursor: string | undefined;
        let pages = 0;
        do {
          const page = h.log.search(ORG, { ...f, limit: 13, ...(cursor === undefined ? {} : { cursor }) });
          for (const e of page.data) {
            got.push(e.seq);
            t.ok(matches(e, f), 'each result matches');
            t.ok(e.seal === null || typeof e.seal?.seq === 'number');
          }
          cursor = page.next_cursor ?? undefined;
          pages++;
          // Appends between pages (some of them match) must not shift later pages.
          await appendSome(3);
        } while (cursor !== undefined && pages < 1000);
        t.same(got, expected, `search ${JSON.stringify(f)}: newest first, no duplicates, no gaps`);
      }

      t.test('scanEvents honours filters and limits, oldest first', async (t) => {
        const f = { agent_id: 'agent-b', q: 'mock' };
        const expected = all()
          .filter((e) => matches(e, f))
          .map((e) => e.seq);
        t.same(
          [...h.log.scanEvents(ORG, f, 1e9)].map((e) => e.seq),
          expected,
        );
        t.same(
          [...h.log.scanEvents(ORG, f, 5)].map((e) => e.seq),
          expected.slice(0, 5),
        );
      });

      t.test('bad queries are 400s', async (t) => {
        for (const q of [
          { limit: 0 },
          { limit: 1001 },
          { limit: 2.5 },
          { cursor: 'bm9wZQ' },
          { cursor: '!!' },
          { since: 'yesterday' },
          { until: '2025-13-45' },
        ]) {
          t.throws(() => h.log.search(ORG, q), { code: 'invalid_request' }, JSON.stringify(q));
        }
      });

      t.test('overview matches the events it summarises', async (t) => {
        const events = all();
        const expect = (since?: string, until?: string) => {
          const sel = events.filter((e) => matches(e, { since, until }));
          const count = (key: (e: AuditEvent) => string | null) => {
            const m: Record<string, number> = {};
            for (const e of sel) {
              const k = key(e);
              if (k !== null) m[k] = (m[k] ?? 0) + 1;
            }
            return m;
          };
          return {
            events: sel.length,
            by_outcome: count((e) => e.outcome),
            by_type: count((e) => e.event_type),
            by_agent: count((e) => e.agent_id),
            by_provider: count((e) => e.provider),
            tokens: {
              prompt: sel.reduce((a, e) => a + (e.usage?.prompt_tokens ?? 0), 0),
              completion: sel.reduce((a, e) => a + (e.usage?.completion_tokens ?? 0), 0),
              total: sel.reduce((a, e) => a + (e.usage?.total_tokens ?? 0), 0),
            },
            cost: Math.round(sel.reduce((a, e) => a + (e.cost ?? 0), 0) * 1e9) / 1e9,
          };
        };
        t.same(h.log.overview(ORG, {}), expect(), 'everything');
        t.same(h.log.overview(ORG, { since: tsOf(5) }), expect(tsOf(5)));
        t.same(h.log.overview(ORG, { until: tsOf(77) }), expect(undefined, tsOf(77)));
        t.same(h.log.overview('org_empty', {}).events, 0);
        const span = events.length * 45_000;
        fc.assert(
          fc.property(
            fc.integer({ min: -60_000, max: span }),
            fc.integer({ min: 0, max: span }),
            (a, len) => {
              const since = new Date(BASE + a).toISOString();
              const until = new Date(BASE + a + len).toISOString();
              t.same(h.log.overview(ORG, { since, until }), expect(since, until));
            },
          ),
          { numRuns: 60 },
        );
      });
    },
  );

// ---------------------------------------------------------------------------------------------
// JSONL log and export

t.test('the JSONL log is the export, rotated at the configured size', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 6, rotationMaxMb: 0.004 });
  t.teardown(() => h.close());
  for (let round = 0; round < 6; round++) {
    await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        h.log.append({
          org_id: ORG,
          event_type: 'llm_call',
          // Multi-byte UTF-8 (the file is written as bytes), and one line longer than a write chunk.
          personal: {
            prompt: `round ${round} #${i} café ☕ 😀${round === 3 && i === 2 ? 'ü'.repeat(40_000) : ''}`,
          },
        }),
      ),
    );
  }
  await h.log.append({ org_id: 'org/with.dots', event_type: 'e' });
  await h.log.flushSeals();
  const exported = [...h.log.exportText(ORG)];
  await h.reopen();
  const dir = join(h.dir, 'data', 'audit');
  const files = readdirSync(dir)
    .filter((f) => f.startsWith(`${ORG}.`))
    .sort((a, b) => {
      const n = (f: string) => (f === `${ORG}.jsonl` ? Number.POSITIVE_INFINITY : Number(f.split('.')[1]));
      return n(a) - n(b);
    });
  t.ok(files.length >= 3, `rotated into ${files.length} files`);
  t.equal(files[files.length - 1], `${ORG}.jsonl`);
  t.same(
    files.slice(0, -1),
    Array.from({ length: files.length - 1 }, (_, i) => `${ORG}.${i + 1}.jsonl`),
  );
  const max = 0.004 * 1024 * 1024;
  for (const f of files) {
    const text = readFileSync(join(dir, f), 'utf8');
    const lines = text.split('\n').filter(Boolean);
    t.ok(
      statSync(join(dir, f)).size <= max || lines.length === 1,
      `${f} is within the size (or one long line)`,
    );
  }
  const joined = files.map((f) => readFileSync(join(dir, f), 'utf8')).join('');
  t.equal(
    joined,
    exported.map((l) => `${l}\n`).join(''),
    'the files, in order, are the export byte for byte',
  );
  const lines = parseJsonl(joined);
  t.equal(lines.filter((l) => '_seal' in l).length, storedSeals(h.store, ORG).length);
  let lastSeq = 0;
  for (const l of lines) {
    if ('_seal' in l) t.equal(l._seal.size, lastSeq, 'a seal line follows the event it ends at');
    else lastSeq = (l as AuditEvent).seq;
  }
  t.match(verifyLines(lines, ORG), { status: 'intact', events: 30, chain_length: 30 });
  t.ok(readdirSync(dir).includes('org%2Fwith%2Edots.jsonl'), 'odd org ids are escaped in file names');
});

t.test('restart: heads reload, the chain and the log continue', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 4 });
  t.teardown(() => h.close());
  const first = [];
  for (let i = 0; i < 9; i++)
    first.push(await h.log.append({ org_id: ORG, event_type: 'e', details: { i } }));
  await h.log.flushSeals();
  const lastBefore = h.log.get(ORG, first[8]?.id as string) as AuditEvent;
  const sealsBefore = storedSeals(h.store, ORG);

  await h.reopen();
  const next = await h.log.append({ org_id: ORG, event_type: 'e', details: { i: 9 } });
  t.equal(next.seq, 10, 'seq continues');
  const e10 = h.log.get(ORG, next.id) as AuditEvent;
  t.equal(e10.prev_hash, lastBefore.hash, 'prev_hash links to the event before the restart');
  for (let i = 10; i < 14; i++) await h.log.append({ org_id: ORG, event_type: 'e', details: { i } });
  await h.log.flushSeals();
  const seals = storedSeals(h.store, ORG);
  t.same(seals.slice(0, sealsBefore.length), sealsBefore, 'old seals kept');
  t.ok(seals.length > sealsBefore.length, 'new seals continue the numbering');
  t.same(
    seals.map((s) => s.seq),
    seals.map((_, i) => i + 1),
  );
  const oldest = sealsBefore[0]?.size as number;
  const newest = seals[seals.length - 1]?.size as number;
  const proof = h.log.consistency(ORG, oldest, newest);
  const root = (note: string) => rootOf(note);
  t.ok(
    proof &&
      verifyConsistency(
        oldest,
        newest,
        root(proof.from_checkpoint),
        root(proof.to_checkpoint),
        proof.consistency_proof.map((x) => fromHex(x) as Uint8Array),
      ),
    'the tree after the restart extends the tree before it',
  );
  t.match(h.log.integrity(ORG), {
    status: 'intact',
    events: 14,
    chain_length: 14,
    current_head: h.log.search(ORG, { limit: 1 }).data[0]?.hash,
  });
  const r = h.log.receipt(ORG, next.id);
  t.same(r && verifyReceipt(r, testSigner().verifiers), { ok: true });

  t.test('the JSONL log repairs a torn line and lines it missed', async (t) => {
    const path = h.log.jsonlPath(ORG);
    await h.log.close();
    const text = readFileSync(path, 'utf8');
    const lines = text.split('\n').filter(Boolean);
    // Lose the last three lines and tear the one before them, as a crash mid-write would.
    const kept = lines.slice(0, -3);
    writeFileSync(path, `${kept.join('\n')}\n`);
    truncateSync(path, Buffer.byteLength(`${kept.join('\n')}\n`) - 10);
    await h.reopen();
    await h.log.append({ org_id: ORG, event_type: 'after-repair' });
    await h.log.flushSeals();
    const exported = [...h.log.exportText(ORG)];
    await h.reopen();
    t.equal(
      readFileSync(path, 'utf8'),
      exported.map((l) => `${l}\n`).join(''),
      'the file matches the store again',
    );
    t.match(verifyLines(parseJsonl(readFileSync(path, 'utf8')), ORG), { status: 'intact', events: 15 });
  });
});

t.test('events left unsealed by a previous run are sealed at start', async (t) => {
  const signer = new TestSigner();
  signer.failing = true;
  const h = tempLog({ sealIntervalMs: 10, sealEvery: 100 }, signer);
  t.teardown(() => h.close());
  for (let i = 0; i < 3; i++) await h.log.append({ org_id: ORG, event_type: 'e' });
  await h.reopen(); // the failing signer leaves them unsealed
  t.same(storedSeals(h.store, ORG), []);
  signer.failing = false;
  await h.reopen();
  await waitFor(() => storedSeals(h.store, ORG).length === 1, 'the start-up seal');
  t.equal(storedSeals(h.store, ORG)[0]?.size, 3);
});

t.test('bounded exports start at a seal with a bridge and verify alone', async (t) => {
  const clock = manualClock();
  const h = tempLog({ sealIntervalMs: 60_000, sealEvery: 5, clock: clock.fn });
  t.teardown(() => h.close());
  for (let i = 0; i < 23; i++) {
    clock.now = BASE + i * 1000;
    await h.log.append({ org_id: ORG, event_type: 'e', details: { i } });
    if (i % 4 === 3) await h.log.flushSeals();
  }
  await h.log.flushSeals();
  const since = new Date(BASE + 12 * 1000).toISOString(); // event 13
  const until = new Date(BASE + 18 * 1000).toISOString(); // event 19
  const lines = [...h.log.exportLines(ORG, { since, until })];
  const first = lines[0] as { _chain_bridge?: { bridged_to_seq: number } };
  t.ok(first._chain_bridge, 'starts with a bridge');
  const events = lines.filter((l): l is AuditEvent => 'seq' in l);
  const bridgedTo = first._chain_bridge?.bridged_to_seq as number;
  t.ok(bridgedTo <= 12, 'the bridge ends at or before the range');
  t.equal(events[0]?.seq, bridgedTo + 1);
  const endSeal = storedSeals(h.store, ORG).find((s) => s.size >= 19)?.size as number;
  t.ok(endSeal > 19, 'event 19 (the last in range) is not at a seal boundary');
  t.equal(events[events.length - 1]?.seq, endSeal, 'ends at the seal covering the last event in range');
  t.match(lines[lines.length - 1], { _seal: { size: endSeal } }, 'with that seal');
  t.match(verifyLines(lines, ORG), { status: 'intact', chain_length: endSeal });
  const dir = tempDir('govgate-bounded-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'bounded.jsonl');
  writeFileSync(file, `${[...h.log.exportText(ORG, { since, until })].join('\n')}\n`);
  t.match(await verifyFile(file, testSigner().publicDocument()), {
    status: 'intact',
    unsealed_events: 0,
  });
  t.same([...h.log.exportLines(ORG, { since: new Date(BASE + 99_000).toISOString() })], []);
  const whole = [...h.log.exportLines(ORG)];
  t.notOk('_chain_bridge' in (whole[0] as object), 'a whole export needs no bridge');
  t.match(verifyLines(whole, ORG), { status: 'intact', events: 23 });
});

const ORG_IDS = ['org_x', 'org_y', 'org_z'];

function loadInput(i: number, org = ORG): AuditInput {
  return {
    org_id: org,
    event_type: i % 3 === 0 ? 'govern.decision' : 'llm_call',
    agent_id: `agent-${i % 10}`,
    session_id: `sess-${i % 100}`,
    pipeline_id: `pl_${i >> 1}`,
    outcome: i % 5 === 0 ? 'block' : 'allow',
    provider: 'mock',
    model: 'mock-echo',
    usage: { prompt_tokens: 12, completion_tokens: 30, total_tokens: 42 },
    cost: 0.00042,
    details: { latency_ms: i % 97, route: '/v1/chat/completions' },
    ...(i % 2 === 0 ? { personal: { end_user: `user${i}@example.com` } } : {}),
  };
}

/** Appends `n` events, `inFlight` at a time, and seals them; returns appends/s (wall, CPU). */
async function appendRate(log: TempLog['log'], n: number, inFlight: number, org = ORG) {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < n; i += inFlight) {
    await Promise.all(Array.from({ length: inFlight }, (_, k) => log.append(loadInput(i + k, org))));
  }
  await log.flushSeals();
  const wall = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { wall: Math.round(n / wall), cpu: Math.round(n / ((cpu.user + cpu.system) / 1e6)) };
}

t.test('throughput (measured, not asserted)', async (t) => {
  const h = tempLog();
  t.teardown(() => h.close());
  const N = 20_000;
  for (let i = 0; i < 1000; i++) void h.log.append(loadInput(i));
  await h.log.flushSeals();
  const r1 = await appendRate(h.log, N, 250);
  t.comment(
    `append + commit + seals signed in-process (ML-DSA on this thread): ${r1.wall}/s wall, ${r1.cpu}/s CPU`,
  );
  const s0 = performance.now();
  const r = h.log.integrity(ORG);
  const scan = (performance.now() - s0) / 1000;
  t.comment(`integrity scan: ${Math.round(r.events / scan)} events/s (${r.events} events, first scan)`);
  const s1 = performance.now();
  h.log.integrity(ORG);
  t.comment(
    `integrity scan again (seal signatures remembered): ${Math.round(r.events / ((performance.now() - s1) / 1000))} events/s`,
  );
  t.match(r, { status: 'intact', events: N + 1000, broken: 0 });

  const keysDir = tempDir('govgate-audit-keys-');
  const signer = await WorkerSealSigner.start(AuditKeys.load({ keysDir }));
  const w = tempLog({}, signer);
  t.teardown(async () => {
    await w.close();
    await signer.close();
    rmSync(keysDir, { recursive: true, force: true });
  });
  for (let i = 0; i < 1000; i++) void w.log.append(loadInput(i));
  await w.log.flushSeals();
  const r2 = await appendRate(w.log, N, 250);
  t.comment(
    `append + commit + seals with the worker signer (ML-DSA off-thread): ${r2.wall}/s wall, ${r2.cpu}/s CPU`,
  );
  const r3 = await Promise.all(ORG_IDS.map((org) => appendRate(w.log, N / 4, 50, org)));
  t.comment(`three orgs at once, 50 in flight each: ${r3.map((x) => x.wall).join(', ')}/s wall per org`);
  for (const org of [ORG, ...ORG_IDS]) t.equal(w.log.integrity(org).status, 'intact');
});

t.test('with the worker seal signer, the rotated JSONL files pass govgate verify', async (t) => {
  const keysDir = tempDir('govgate-audit-keys-');
  const signer = await WorkerSealSigner.start(AuditKeys.load({ keysDir }));
  const h = tempLog({ rotationMaxMb: 0.02, sealEvery: 40, sealIntervalMs: 5 }, signer);
  t.teardown(async () => {
    await h.close();
    await signer.close();
    rmSync(keysDir, { recursive: true, force: true });
  });
  for (let i = 0; i < 300; i += 30) {
    await Promise.all(Array.from({ length: 30 }, (_, k) => h.log.append(loadInput(i + k))));
    await new Promise((r) => setTimeout(r, 3));
  }
  await h.reopen(); // close() seals what is left and flushes the files
  const dir = join(h.dir, 'data', 'audit');
  const order = (f: string): number =>
    f === `${ORG}.jsonl` ? Number.POSITIVE_INFINITY : Number(f.split('.')[1]);
  const files = readdirSync(dir)
    .filter((f) => f.startsWith(`${ORG}.`))
    .sort((a, b) => order(a) - order(b))
    .map((f) => join(dir, f));
  t.ok(files.length > 1, 'rotated');
  const result = await verifyFile(files, signer.publicDocument());
  t.match(result, { status: 'intact', events: 300, broken: 0, origin: `govgate/${ORG}` });
  t.equal(result.seals_checked, storedSeals(h.store, ORG).length);
  t.ok(result.seals_checked > 1);
});

t.test('keys that are not plain identifiers survive storage and verification', async (t) => {
  const h = tempLog({ sealIntervalMs: 60_000 });
  t.teardown(() => h.close());
  // JSON.parse makes "__proto__" an own key, as request bodies do.
  const details = JSON.parse('{"__proto__": {"polluted": true}, "constructor": 1, "a\\u0000b": "x"}');
  const personal = JSON.parse('{"constructor": "secret", "toString": {"__proto__": 2}}');
  const ref = await h.log.append({ org_id: ORG, event_type: 'odd', details, personal });
  const e = h.log.get(ORG, ref.id) as AuditEvent;
  t.same(Object.keys(e.details).sort(), ['__proto__', 'a\u0000b', 'constructor']);
  t.same(Object.keys(e.personal).sort(), ['constructor', 'toString']);
  t.same((e.personal.toString as unknown as { value: unknown }).value, JSON.parse('{"__proto__": 2}'));
  // A top-level personal field named __proto__ is committed and hashed like any other.
  const proto = await h.log.append({
    org_id: ORG,
    event_type: 'odd',
    personal: JSON.parse('{"__proto__": "x"}'),
  });
  t.same(Object.keys((h.log.get(ORG, proto.id) as AuditEvent).personal), ['__proto__']);
  t.equal(({} as { polluted?: boolean }).polluted, undefined, 'no prototype pollution');
  await h.log.flushSeals();
  t.match(h.log.integrity(ORG), { status: 'intact', events: 2 });
  t.match(verifyLines(parseJsonl(readFileSync(h.log.jsonlPath(ORG), 'utf8')), ORG), { status: 'intact' });
});
