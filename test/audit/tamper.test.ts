import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { ChainReader } from '../../src/audit/chain-reader.js';
import { IntegrityScan, verifiersFor } from '../../src/audit/integrity.js';
import { IntegrityPool } from '../../src/audit/integrity-pool.js';
import type { AuditEvent, StoredSeal } from '../../src/audit/types.js';
import {
  type BrokenEvent,
  ERASED,
  ERASURE_EVENT_TYPE,
  erasureDetails,
  hashEvent,
  type IntegrityResult,
} from '../../src/core/chain/index.js';
import { storedSeals, tempLog } from './helpers.js';

// Tampering straight in LMDB, behind the log's back, must always be found and pinned to the
// right line. One honest chain is built once; every run tampers, scans and restores it. Each scan
// runs three ways: inline, through the log's integrity workers (the endpoint's path) and on a pool
// cutting the chain into chunks of a size that changes every run; all three must agree exactly.

const ORG = 'org_tamper';
const N = 40; // ordinary events; event N + 1 is an erasure event
const SEAL_AT = [8, 16, 24, 32, 40, 41];
const PERSONAL = (seq: number): boolean => seq % 3 === 0 || seq === 5;
const ERASED_SEQ = 5;

const h = tempLog({
  sealIntervalMs: 60_000,
  sealEvery: 10_000,
  integrityWorkers: 2,
  integrityParallelMin: 0,
  integrityChunk: 6,
});
const pool = new IntegrityPool({ dataDir: join(h.dir, 'data'), workers: 2 });
t.teardown(async () => {
  await pool.close();
  await h.close();
});

let prevCut = 0;
const ids: string[] = [];
for (const cut of SEAL_AT) {
  const batch = [];
  for (let seq = prevCut + 1; seq <= cut; seq++) {
    if (seq === N + 1) {
      batch.push(
        h.log.append({
          org_id: ORG,
          event_type: ERASURE_EVENT_TYPE,
          details: erasureDetails('er_1', [
            { event_id: ids[ERASED_SEQ - 1] as string, fields: ['end_user'] },
          ]),
        }),
      );
    } else {
      batch.push(
        h.log.append({
          org_id: ORG,
          event_type: seq % 2 === 0 ? 'llm_call' : 'govern.decision',
          agent_id: `agent-${seq % 3}`,
          outcome: seq % 4 === 0 ? 'block' : 'allow',
          reason: seq % 4 === 0 ? 'policy says no' : null,
          model: 'mock-echo',
          cost: seq / 1000,
          details: { n: seq, tool: 'shell.exec' },
          ...(PERSONAL(seq)
            ? { personal: { end_user: `user-${seq}@example.com`, prompt: `hello ${seq}` } }
            : {}),
        }),
      );
    }
  }
  for (const ref of await Promise.all(batch)) ids.push(ref.id);
  await h.log.flushSeals();
  prevCut = cut;
}
const TOTAL = N + 1;

type Raw = { key: [string, number]; value: string };
const originalEvents: Raw[] = [];
for (const { key, value } of h.store.auditEvents.getRange({
  start: [ORG, 0],
  end: [ORG, Number.MAX_SAFE_INTEGER],
}))
  originalEvents.push({ key: key as [string, number], value: value as string });
const originalSeals = storedSeals(h.store, ORG);

function restore(): void {
  h.store.root.transactionSync(() => {
    for (const key of h.store.auditEvents.getKeys({ start: [ORG, 0], end: [ORG, Number.MAX_SAFE_INTEGER] }))
      h.store.auditEvents.removeSync(key);
    for (const r of originalEvents) h.store.auditEvents.putSync(r.key, r.value);
    for (const s of originalSeals) h.store.auditMeta.putSync([ORG, 's', s.seq], s);
  });
}

const eventAt = (seq: number): AuditEvent =>
  JSON.parse(originalEvents[seq - 1]?.value as string) as AuditEvent;
const put = (key: number, e: unknown): void => {
  h.store.auditEvents.putSync([ORG, key], JSON.stringify(e));
};
const sealOf = (size: number): StoredSeal => originalSeals.find((s) => s.size === size) as StoredSeal;

const CHUNKS = [1, 2, 3, 5, 7, 8, 13, 40, 41, 100];
let scans = 0;
let disagreements = 0;

async function scan(): Promise<IntegrityResult> {
  try {
    const inline = h.log.integrity(ORG);
    const chunk = CHUNKS[scans++ % CHUNKS.length] as number;
    const doc = h.log.publicDocument();
    const pooled = await pool.run(
      new IntegrityScan(new ChainReader(h.store), ORG, verifiersFor(doc)),
      JSON.stringify(doc),
      chunk,
    );
    const endpoint = await h.log.integrityAsync(ORG);
    const want = JSON.stringify(inline);
    if (JSON.stringify(pooled) !== want || JSON.stringify(endpoint) !== want) {
      disagreements++;
      t.comment(JSON.stringify({ chunk, inline, pooled, endpoint }));
    }
    return inline;
  } finally {
    restore();
  }
}

/** The findings hold `expected`, and nothing is reported before the tampered line. */
function check(r: IntegrityResult, expected: readonly BrokenEvent[], from: number, exact = false): boolean {
  const ok =
    r.status === 'compromised' &&
    expected.every((x) =>
      r.broken_events.some((b) => b.line === x.line && b.reason === x.reason && b.event_id === x.event_id),
    ) &&
    r.broken_events.every((b) => b.line >= from) &&
    (!exact || r.broken_events.length === expected.length);
  if (!ok) t.comment(JSON.stringify({ expected, got: r.broken_events }));
  return ok;
}

const seqArb = fc.integer({ min: 1, max: TOTAL });
const OPTS = { numRuns: 40 };

t.test('the honest chain is intact', async (t) => {
  t.match(h.log.integrity(ORG), {
    status: 'intact',
    events: TOTAL,
    valid: TOTAL,
    broken: 0,
    chain_length: TOTAL,
  });
  t.same(
    originalSeals.map((s) => s.size),
    SEAL_AT,
  );
});

t.test('an edited field is content_modified at its line', async (t) => {
  const edits: Array<(e: Record<string, unknown>) => void> = [
    (e) => {
      e.outcome = e.outcome === 'allow' ? 'block' : 'allow';
    },
    (e) => {
      e.reason = 'nothing to see';
    },
    (e) => {
      e.agent_id = 'someone-else';
    },
    (e) => {
      e.ts = '2000-01-01T00:00:00.000Z';
    },
    (e) => {
      e.cost = 0;
    },
    (e) => {
      (e.details as Record<string, unknown>).n = -1;
    },
    (e) => {
      e.extra = true;
    },
  ];
  await fc.assert(
    fc.asyncProperty(seqArb, fc.integer({ min: 0, max: edits.length - 1 }), async (seq, which) => {
      const e = eventAt(seq) as unknown as Record<string, unknown>;
      edits[which]?.(e);
      put(seq, e);
      const expected = [{ line: seq, event_id: ids[seq - 1] as string, reason: 'content_modified' as const }];
      return check(await scan(), expected, seq, true);
    }),
    OPTS,
  );
  t.pass();
});

t.test(
  'a line not as written (duplicate members, aliased numbers, spacing, escapes) is content_modified',
  async (t) => {
    // JSON.parse keeps the last of duplicate members, and reads `5.0000000000000001` as 5: the
    // parsed event hashes as the original, but a reader that takes the first member, or keeps a
    // number's digits, sees something else. Only the bytes as written verify.
    const rewrites: Array<[string, (text: string, seq: number) => string]> = [
      ['duplicate members', (text) => `{"outcome":"block","reason":"injected",${text.slice(1)}`],
      ['an aliased number', (text, seq) => text.replace(`"n":${seq}`, `"n":${seq}.0000000000000001`)],
      ['a space', (text) => text.replace('{"', '{ "')],
      ['an escaped letter', (text) => text.replace('"agent_id":"agent-', '"agent_id":"\\u0061gent-')],
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: N }),
        fc.integer({ min: 0, max: rewrites.length - 1 }),
        async (seq, which) => {
          const [, rewrite] = rewrites[which] as [string, (text: string, seq: number) => string];
          const text = rewrite(originalEvents[seq - 1]?.value as string, seq);
          if (text === originalEvents[seq - 1]?.value) throw new Error('the rewrite changed nothing');
          t.same(JSON.parse(text).hash, eventAt(seq).hash);
          h.store.auditEvents.putSync([ORG, seq], text);
          const expected = [
            { line: seq, event_id: ids[seq - 1] as string, reason: 'content_modified' as const },
          ];
          return check(await scan(), expected, seq, true);
        },
      ),
      OPTS,
    );
    t.pass();
  },
);

t.test('a member added inside a personal field is content_modified', async (t) => {
  // Only each field's commitment is hashed, so the line's hash is unchanged by it.
  for (const extra of ['"Value":"mallory"', '"erased":true', '"__proto__":{"x":1}']) {
    const seq = 3;
    const text = originalEvents[seq - 1]?.value as string;
    const c = (eventAt(seq) as unknown as { personal: { end_user: { c: string } } }).personal.end_user.c;
    const tampered = text.replace(`"c":"${c}"}`, `"c":"${c}",${extra}}`);
    t.not(tampered, text, extra);
    h.store.auditEvents.putSync([ORG, seq], tampered);
    const expected = [{ line: seq, event_id: ids[seq - 1] as string, reason: 'content_modified' as const }];
    t.ok(check(await scan(), expected, seq, true), extra);
  }
});

t.test('an edited field with its hash recomputed breaks the link after it', async (t) => {
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: TOTAL - 1 }), async (seq) => {
      const e = eventAt(seq) as unknown as Record<string, unknown>;
      e.outcome = 'forged';
      e.hash = hashEvent(e.prev_hash as string, { ...e, hash: undefined });
      put(seq, e);
      const expected = [{ line: seq + 1, event_id: ids[seq] as string, reason: 'chain_broken' as const }];
      const seal = SEAL_AT.find((s) => s >= seq) as number;
      const withSeal = [
        ...expected,
        { line: seal, event_id: ids[seal - 1] as string, reason: 'checkpoint_mismatch' as const },
      ];
      return check(await scan(), withSeal, seq);
    }),
    OPTS,
  );
  t.pass();
});

t.test('an edited personal value is content_modified at its line', async (t) => {
  const personal = ids.map((_, i) => i + 1).filter((s) => s <= N && PERSONAL(s));
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...personal),
      fc.constantFrom('end_user', 'prompt'),
      fc.string(),
      async (seq, field, v) => {
        const e = eventAt(seq) as unknown as { personal: Record<string, { value: unknown }> };
        const f = e.personal[field] as { value: unknown };
        f.value = f.value === v ? `${v}!` : v;
        put(seq, e);
        const expected = [
          { line: seq, event_id: ids[seq - 1] as string, reason: 'content_modified' as const },
        ];
        return check(await scan(), expected, seq, true);
      },
    ),
    OPTS,
  );
  t.pass();
});

t.test('an inserted event breaks the chain at the next original line', async (t) => {
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 0, max: TOTAL - 1 }), async (after) => {
      // A well-formed forgery: right seq, linked to its predecessor, correct hash of its own.
      const prev = after === 0 ? '0'.repeat(64) : eventAt(after).hash;
      const forged: Record<string, unknown> = {
        ...eventAt(after + 1),
        id: 'ae_forged',
        seq: after + 1,
        prev_hash: prev,
        outcome: 'allow',
        reason: 'inserted',
        personal: {},
      };
      forged.hash = hashEvent(prev as string, { ...forged, hash: undefined });
      put(after + 0.5, forged);
      const expected = [{ line: after + 1, event_id: ids[after] as string, reason: 'chain_broken' as const }];
      return check(await scan(), expected, after + 1);
    }),
    OPTS,
  );
  t.pass();
});

t.test('a legacy v1 event anywhere in the org chain is chain_broken, at any key', async (t) => {
  // A v1-shaped event needs no key and no predecessor: SHA-256(GENESIS ‖ JCS(event)).
  const legacy = (): Record<string, unknown> => {
    const e: Record<string, unknown> = {
      id: 'ae_forged_v1',
      org_id: ORG,
      ts: eventAt(1).ts,
      event_type: 'approval.decided',
      outcome: 'approved',
      details: {},
      prev_hash: '0'.repeat(64),
    };
    e.hash = hashEvent('0'.repeat(64), e);
    return e;
  };
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 0, max: TOTAL }), fc.boolean(), async (after, whole) => {
      // Between two events (a key that is not a whole number), or first, at key 0 with a `seq`
      // of 0 that matches its key.
      const at = whole ? 0 : after + 0.5;
      const e = legacy();
      if (whole) {
        e.seq = 0;
        e.hash = hashEvent('0'.repeat(64), { ...e, hash: undefined });
      }
      put(at, e);
      const line = whole ? 1 : after + 1;
      const expected = [{ line, event_id: 'ae_forged_v1', reason: 'chain_broken' as const }];
      return check(await scan(), expected, line, true);
    }),
    OPTS,
  );
  t.pass();
});

t.test('a v2 event stored under a key other than its seq is chain_broken', async (t) => {
  // The event of seq 7 moved to 7.25: its content, link and seal all still check out.
  h.store.root.transactionSync(() => {
    h.store.auditEvents.removeSync([ORG, 7]);
    put(7.25, eventAt(7));
  });
  t.ok(check(await scan(), [{ line: 7, event_id: ids[6] as string, reason: 'chain_broken' }], 7, true));
});

t.test('a deleted event breaks the chain at the next line (or its seal, at the end)', async (t) => {
  await fc.assert(
    fc.asyncProperty(seqArb, async (seq) => {
      h.store.auditEvents.removeSync([ORG, seq]);
      const expected: BrokenEvent[] =
        seq < TOTAL
          ? [{ line: seq + 1, event_id: ids[seq] as string, reason: 'chain_broken' }]
          : [{ line: seq, event_id: null, reason: 'checkpoint_mismatch' }];
      if (SEAL_AT.includes(seq)) expected.push({ line: seq, event_id: null, reason: 'checkpoint_mismatch' });
      return check(await scan(), expected, seq);
    }),
    OPTS,
  );
  t.pass();
});

t.test('reordered events are chain_broken at both lines', async (t) => {
  await fc.assert(
    fc.asyncProperty(seqArb, seqArb, async (a, b) => {
      fc.pre(a !== b);
      const [i, j] = a < b ? [a, b] : [b, a];
      put(i, eventAt(j));
      put(j, eventAt(i));
      const expected: BrokenEvent[] = [
        { line: i, event_id: ids[i - 1] as string, reason: 'chain_broken' },
        { line: j, event_id: ids[j - 1] as string, reason: 'chain_broken' },
      ];
      return check(await scan(), expected, i);
    }),
    OPTS,
  );
  t.pass();
});

t.test("a seal with another seal's signature is signature_invalid at its line", async (t) => {
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...SEAL_AT),
      fc.constantFrom(...SEAL_AT),
      fc.constantFrom(0, 1),
      async (size, donor, which) => {
        fc.pre(size !== donor);
        const seal = sealOf(size);
        const sigLines = (note: string) => note.slice(note.lastIndexOf('\n\n') + 2).split('\n');
        const mine = sigLines(seal.note);
        const theirs = sigLines(sealOf(donor).note);
        mine[which] = theirs[which] as string;
        const note = `${seal.note.slice(0, seal.note.lastIndexOf('\n\n') + 2)}${mine.join('\n')}`;
        h.store.auditMeta.putSync([ORG, 's', seal.seq], { ...seal, note });
        const expected = [
          { line: size, event_id: ids[size - 1] as string, reason: 'signature_invalid' as const },
        ];
        return check(await scan(), expected, size, true);
      },
    ),
    OPTS,
  );
  t.pass();
});

t.test('a forged tombstone is unauthorized_erasure; an authorised one is fine', async (t) => {
  const tombstone = (seq: number, field: string): void => {
    const e = eventAt(seq) as unknown as { personal: Record<string, { c: string }> };
    e.personal[field] = { value: ERASED, c: (e.personal[field] as { c: string }).c } as never;
    put(seq, e);
  };
  const personal = ids.map((_, i) => i + 1).filter((s) => s <= N && PERSONAL(s));
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(...personal),
      fc.constantFrom('end_user', 'prompt'),
      async (seq, field) => {
        fc.pre(!(seq === ERASED_SEQ && field === 'end_user'));
        tombstone(seq, field);
        const expected = [
          { line: seq, event_id: ids[seq - 1] as string, reason: 'unauthorized_erasure' as const },
        ];
        return check(await scan(), expected, seq, true);
      },
    ),
    OPTS,
  );
  tombstone(ERASED_SEQ, 'end_user');
  t.match(await scan(), { status: 'intact', broken: 0 }, 'named by the gdpr.erasure_executed event');
});

t.test('restored, the chain is intact again', async (t) => {
  t.match(h.log.integrity(ORG), { status: 'intact', events: TOTAL, broken: 0 });
});

t.test('the scan on integrity workers, in chunks of any size, agrees with the inline scan', async (t) => {
  t.ok(scans >= 300, `${scans} tampered scans compared`);
  t.equal(disagreements, 0);
});
