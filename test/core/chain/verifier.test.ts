import fc from 'fast-check';
import t from 'tap';
import {
  type BrokenEvent,
  bridgeRecord,
  buildReceipt,
  type ChainEvent,
  ChainVerifier,
  ERASED,
  formatCheckpoint,
  GENESIS,
  hashEvent,
  type IntegrityResult,
  leafHash,
  MerkleBuilder,
  type NodeReader,
  verifyReceipt,
} from '../../../src/core/chain/index.js';
import {
  type BuiltChain,
  buildChain,
  type ChainSpec,
  clone,
  feed,
  type Line,
  makeKeys,
  ORIGIN,
  orgKeys,
  sealNote,
} from './helpers.js';

const FC = { seed: 2026, numRuns: 25 };

function verify(lines: readonly Line[], opts: Partial<ConstructorParameters<typeof ChainVerifier>[0]> = {}) {
  const v = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN, ...opts });
  feed(v, lines);
  return v.result();
}

const key = (b: BrokenEvent): string => `${String(b.line).padStart(4, '0')}|${b.reason}|${b.event_id ?? '-'}`;
function sameFindings(actual: IntegrityResult, expected: BrokenEvent[]): void {
  const a = actual.broken_events.map(key).sort();
  const e = expected.map(key).sort();
  if (a.join('\n') !== e.join('\n')) {
    throw new Error(`findings differ\nexpected:\n${e.join('\n')}\nactual:\n${a.join('\n')}`);
  }
  const lines = actual.broken_events.map((b) => b.line);
  if (lines.some((l, i) => i > 0 && l < (lines[i - 1] as number)))
    throw new Error('broken_events not sorted by line');
  if (actual.status !== (expected.length > 0 ? 'compromised' : 'intact'))
    throw new Error(`status ${actual.status}`);
  if (actual.valid + actual.broken !== actual.events) throw new Error('valid + broken != events');
}

const idOf = (seq: number): string => `ae_${seq.toString().padStart(6, '0')}`;

// Random chain shapes: 3..20 events, seals on ~1/3 of them, personal data on ~1/2, some erased.
const chainArb: fc.Arbitrary<ChainSpec> = fc
  .record({
    n: fc.integer({ min: 3, max: 20 }),
    seal: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 20, maxLength: 20 }),
    personal: fc.array(fc.boolean(), { minLength: 20, maxLength: 20 }),
    erase: fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 20, maxLength: 20 }),
    sealTail: fc.boolean(),
  })
  .map(({ n, seal, personal, erase, sealTail }) => {
    const seqs = Array.from({ length: n }, (_, i) => i + 1);
    const personalAt = seqs.filter((s) => personal[s - 1]);
    return {
      n,
      sealAt: seqs.filter((s) => seal[s - 1] === 0),
      personalAt,
      erasedAt: personalAt.filter((s) => erase[s - 1] === 0),
      sealTail,
    };
  });

function eventLines(c: BuiltChain): number[] {
  return c.lines.flatMap((l, i) => (l.kind === 'event' ? [i] : []));
}
const sealSizes = (c: BuiltChain): number[] => c.seals.map((s) => s.size);
const total = (c: BuiltChain): number => c.events.length;
function erasedSeqs(c: BuiltChain): number[] {
  return c.events.filter((e) => e.personal?.end_user?.value === ERASED).map((e) => e.seq);
}

t.test('an honest chain is intact', async (t) => {
  fc.assert(
    fc.property(chainArb, (spec) => {
      const c = buildChain(spec);
      const r = verify(c.lines);
      sameFindings(r, []);
      const last = c.events[c.events.length - 1] as ChainEvent;
      return (
        r.events === total(c) &&
        r.valid === total(c) &&
        r.chain_length === total(c) &&
        r.current_head === last.hash
      );
    }),
    FC,
  );
  t.pass('intact');
});

t.test('an empty stream is empty', async (t) => {
  const r = new ChainVerifier({ verifiers: [] }).result();
  t.same(r, {
    status: 'empty',
    events: 0,
    valid: 0,
    broken: 0,
    broken_events: [],
    chain_length: 0,
    current_head: GENESIS,
  });
});

t.test('tamper: edit a field → content_modified at that line only', async (t) => {
  fc.assert(
    fc.property(
      chainArb,
      fc.nat(),
      fc.constantFrom('outcome', 'details', 'model', 'cost'),
      (spec, r, field) => {
        const c = buildChain(spec);
        const lines = clone(c.lines);
        const k = (r % total(c)) + 1;
        const line = lines[eventLines(c)[k - 1] as number] as Line & { kind: 'event' };
        const e = line.event as unknown as Record<string, unknown>;
        e[field] = field === 'details' ? { latency_ms: -1 } : field === 'cost' ? 99 : 'tampered';
        const expected: BrokenEvent[] = [{ line: k, event_id: idOf(k), reason: 'content_modified' }];
        const erased = erasedSeqs(c);
        if (erased.length > 0 && k === total(c)) {
          // A modified erasure event authorises nothing.
          for (const s of erased)
            expected.push({ line: s, event_id: idOf(s), reason: 'unauthorized_erasure' });
        }
        sameFindings(verify(lines), expected);
        return true;
      },
    ),
    FC,
  );
  t.pass('detected');
});

t.test(
  'tamper: edit a field and re-hash → chain_broken after it, checkpoint_mismatch at later seals',
  async (t) => {
    fc.assert(
      fc.property(chainArb, fc.nat(), (spec, r) => {
        const c = buildChain(spec);
        const lines = clone(c.lines);
        const k = (r % total(c)) + 1;
        const ev = (lines[eventLines(c)[k - 1] as number] as Line & { kind: 'event' }).event;
        ev.outcome = 'block';
        ev.hash = hashEvent(ev.prev_hash, ev);
        const expected: BrokenEvent[] = [];
        if (k < total(c)) expected.push({ line: k + 1, event_id: idOf(k + 1), reason: 'chain_broken' });
        for (const s of sealSizes(c))
          if (s >= k) expected.push({ line: s, event_id: idOf(s), reason: 'checkpoint_mismatch' });
        sameFindings(verify(lines), expected);
        return true;
      }),
      FC,
    );
    t.pass('detected');
  },
);

t.test('tamper: edit a personal value → content_modified', async (t) => {
  fc.assert(
    fc.property(
      chainArb.filter((s) => (s.personalAt ?? []).some((p) => !(s.erasedAt ?? []).includes(p))),
      fc.nat(),
      fc.constantFrom('end_user', 'prompt'),
      (spec, r, field) => {
        const c = buildChain(spec);
        const live = c.events.filter((e) => e.personal !== null && e.personal.end_user?.value !== ERASED);
        const k = (live[r % live.length] as ChainEvent).seq;
        const lines = clone(c.lines);
        const ev = (lines[eventLines(c)[k - 1] as number] as Line & { kind: 'event' }).event;
        const f = ev.personal?.[field];
        if (f === undefined) throw new Error('no field');
        f.value = field === 'prompt' ? { text: 'rewritten', n: k } : 'someone-else@example.com';
        sameFindings(verify(lines), [{ line: k, event_id: idOf(k), reason: 'content_modified' }]);
        return true;
      },
    ),
    FC,
  );
  t.pass('detected');
});

t.test('tamper: insert a forged, well-hashed event → chain_broken, later seals mismatch', async (t) => {
  fc.assert(
    fc.property(chainArb, fc.nat(), (spec, r) => {
      const c = buildChain(spec);
      const k = r % total(c); // insert after event k (0 = before the first)
      const prev = k === 0 ? GENESIS : (c.events[k - 1] as ChainEvent).hash;
      const forged = {
        ...clone(c.events[k] as ChainEvent),
        id: 'ae_forged',
        prev_hash: prev,
        personal: null,
      };
      delete (forged as { seal?: unknown }).seal;
      forged.hash = hashEvent(prev, forged);
      const lines = clone(c.lines);
      // Before the next event line (after event k's seal line, if any).
      const at = k === 0 ? 0 : (eventLines(c)[k] as number);
      lines.splice(at, 0, { kind: 'event', event: forged });
      const expected: BrokenEvent[] = [{ line: k + 1, event_id: idOf(k + 1), reason: 'chain_broken' }];
      for (const s of sealSizes(c)) {
        if (s >= k + 1) expected.push({ line: s, event_id: idOf(s), reason: 'checkpoint_mismatch' });
      }
      const res = verify(lines);
      sameFindings(res, expected);
      return res.events === total(c) + 1;
    }),
    FC,
  );
  t.pass('detected');
});

t.test(
  'tamper: delete an event → chain_broken after it, its seal unmatched, later seals mismatch',
  async (t) => {
    fc.assert(
      fc.property(chainArb, fc.nat(), (spec, r) => {
        const c = buildChain(spec);
        const n = total(c);
        const k = (r % n) + 1;
        const lines = clone(c.lines);
        lines.splice(eventLines(c)[k - 1] as number, 1);
        const expected: BrokenEvent[] = [];
        if (k < n) expected.push({ line: k + 1, event_id: idOf(k + 1), reason: 'chain_broken' });
        for (const s of sealSizes(c)) {
          if (s === k) expected.push({ line: s, event_id: null, reason: 'checkpoint_mismatch' });
          if (s > k) expected.push({ line: s, event_id: idOf(s), reason: 'checkpoint_mismatch' });
        }
        const erased = erasedSeqs(c);
        if (erased.length > 0 && k === n) {
          // The erasure event itself is gone: its tombstones lose their authority.
          for (const s of erased)
            expected.push({ line: s, event_id: idOf(s), reason: 'unauthorized_erasure' });
        }
        sameFindings(verify(lines), expected);
        return true;
      }),
      FC,
    );
    t.pass('detected');
  },
);

t.test('tamper: reorder two adjacent events → chain_broken around them, seals mismatch', async (t) => {
  fc.assert(
    fc.property(chainArb, fc.nat(), (spec, r) => {
      const c = buildChain(spec);
      const n = total(c);
      const k = (r % (n - 1)) + 1; // swap k and k+1
      const lines = clone(c.lines);
      const ia = eventLines(c)[k - 1] as number;
      const ib = eventLines(c)[k] as number;
      const tmp = lines[ia] as Line;
      lines[ia] = lines[ib] as Line;
      lines[ib] = tmp;
      const expected: BrokenEvent[] = [
        { line: k + 1, event_id: idOf(k + 1), reason: 'chain_broken' },
        { line: k, event_id: idOf(k), reason: 'chain_broken' },
      ];
      if (k + 2 <= n) expected.push({ line: k + 2, event_id: idOf(k + 2), reason: 'chain_broken' });
      for (const s of sealSizes(c)) {
        if (s === k || s === k + 1) expected.push({ line: s, event_id: null, reason: 'checkpoint_mismatch' });
        if (s >= k + 2) expected.push({ line: s, event_id: idOf(s), reason: 'checkpoint_mismatch' });
      }
      sameFindings(verify(lines), expected);
      return true;
    }),
    FC,
  );
  t.pass('detected');
});

t.test('tamper: swap a seal signature → signature_invalid at the seal line', async (t) => {
  const stranger = makeKeys('govgate/org_test', 99);
  fc.assert(
    fc.property(
      chainArb.filter((s) => s.sealAt.length > 0),
      fc.nat(),
      fc.boolean(),
      (spec, r, ml) => {
        const c = buildChain(spec);
        const seal = c.seals[r % c.seals.length];
        if (seal === undefined) throw new Error('no seal');
        const lines = clone(c.lines);
        const target = lines.find((l) => l.kind === 'seal' && l.seal.seq === seal.seq) as Line & {
          kind: 'seal';
        };
        const [body, sigs] = splitNote(seal.note);
        // Take one signature line from another seal's note (or a stranger's, if only one seal).
        const donor = c.seals.find((s) => s.seq !== seal.seq);
        const donorSigs =
          donor !== undefined ? splitNote(donor.note)[1] : splitNote(sealNote(body, stranger))[1];
        const which = ml ? 1 : 0;
        const mixed = sigs.map((s, i) => (i === which ? (donorSigs[i] as string) : s));
        target.seal.note = `${body}\n${mixed.join('\n')}\n`;
        sameFindings(verify(lines), [
          { line: seal.size, event_id: idOf(seal.size), reason: 'signature_invalid' },
        ]);
        return true;
      },
    ),
    FC,
  );
  t.pass('detected');
});

function splitNote(note: string): [string, string[]] {
  const i = note.lastIndexOf('\n\n');
  return [note.slice(0, i + 1), note.slice(i + 2, -1).split('\n')];
}

t.test('tamper: forge a tombstone → unauthorized_erasure', async (t) => {
  fc.assert(
    fc.property(
      chainArb.filter((s) => (s.personalAt ?? []).some((p) => !(s.erasedAt ?? []).includes(p))),
      fc.nat(),
      (spec, r) => {
        const c = buildChain(spec);
        const live = c.events.filter((e) => e.personal !== null && e.personal.end_user?.value !== ERASED);
        const k = (live[r % live.length] as ChainEvent).seq;
        const lines = clone(c.lines);
        const ev = (lines[eventLines(c)[k - 1] as number] as Line & { kind: 'event' }).event;
        const f = ev.personal?.end_user;
        if (f === undefined) throw new Error('no field');
        f.value = ERASED;
        delete f.salt;
        sameFindings(verify(lines), [{ line: k, event_id: idOf(k), reason: 'unauthorized_erasure' }]);
        return true;
      },
    ),
    FC,
  );
  t.pass('detected');
});

t.test('erasure authority: in-stream event, external callback, tampered erasure event', async (t) => {
  const c = buildChain({ n: 6, sealAt: [3, 6], personalAt: [2, 4], erasedAt: [2], sealTail: true });
  t.equal(verify(c.lines).status, 'intact', 'the erasure event authorises the tombstone');

  // Without the erasure event (a partial export), a callback can vouch for it.
  const partial = c.lines.filter(
    (l) => !(l.kind === 'event' && l.event.seq === 7) && !(l.kind === 'seal' && l.seal.size === 7),
  );
  const r1 = verify(partial);
  t.same(r1.broken_events, [{ line: 2, event_id: idOf(2), reason: 'unauthorized_erasure' }]);
  t.equal(r1.broken, 1);
  const r2 = verify(partial, {
    erasures: (e, field) => e.id === idOf(2) && (field === 'end_user' || field === 'prompt'),
  });
  t.equal(r2.status, 'intact');

  // An erasure event whose own hash fails grants nothing.
  const lines = clone(c.lines);
  const erasure = lines.find((l) => l.kind === 'event' && l.event.seq === 7) as Line & { kind: 'event' };
  erasure.event.reason = 'edited';
  const r3 = verify(lines);
  t.same(
    r3.broken_events.map((b) => [b.line, b.reason]),
    [
      [2, 'unauthorized_erasure'],
      [7, 'content_modified'],
    ],
  );
});

/**
 * A tombstone in a sealed event is proven only by a sealed erasure event: anyone can append a
 * well-hashed, well-linked erasure event after the last seal, so one that is not sealed leaves
 * the events it tombstones unproven (their seal covered the values, not the tombstones).
 */
t.test('a tombstone is proven only once the erasure event naming it is sealed', async (t) => {
  const coverage = (lines: readonly Line[]) => {
    const v = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN });
    feed(v, lines);
    return { result: v.result(), coverage: v.coverage() };
  };
  const spec = { n: 6, sealAt: [3, 6], personalAt: [2, 4], erasedAt: [2] };
  const sealed = coverage(buildChain({ ...spec, sealTail: true }).lines);
  t.equal(sealed.result.status, 'intact');
  t.same(sealed.coverage, { sealed_through: 7, unsealed: 0 }, 'the erasure event sealed: all proven');
  const open = coverage(buildChain({ ...spec, sealTail: false }).lines);
  t.equal(open.result.status, 'intact', 'nothing wrong in it');
  t.same(
    open.coverage,
    { sealed_through: 1, unsealed: 6 },
    'proven only up to the event before the tombstone: its authority is unsealed',
  );
  // An authority proven otherwise (an export's `_erasure_authority`, checked by its receipt).
  const partial = buildChain({ ...spec, sealTail: true }).lines.filter(
    (l) => !(l.kind === 'event' && l.event.seq === 7) && !(l.kind === 'seal' && l.seal.size === 7),
  );
  const v = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN });
  v.authorize([{ event_id: idOf(2), fields: ['end_user', 'prompt'] }]);
  feed(v, partial);
  t.equal(v.result().status, 'intact');
  t.same(v.coverage(), { sealed_through: 6, unsealed: 0 });
});

t.test('seals: pushed before their event, late, or for events that never come', async (t) => {
  const c = buildChain({ n: 6, sealAt: [2, 4, 6] });
  const events = c.lines.filter((l) => l.kind === 'event');
  const seals = c.lines.filter((l) => l.kind === 'seal');
  t.equal(verify([...seals, ...events]).status, 'intact', 'seals first: checked when their event arrives');
  const late = verify([...events, ...seals]);
  t.same(
    late.broken_events.map((b) => [b.line, b.reason, b.event_id]),
    [
      [2, 'checkpoint_mismatch', null],
      [4, 'checkpoint_mismatch', null],
    ],
    'seals pushed after later events cannot be confirmed',
  );
  const truncated = verify(c.lines.filter((l) => !(l.kind === 'event' && l.event.seq >= 5)));
  t.same(
    truncated.broken_events.map((b) => [b.line, b.reason, b.event_id]),
    [[6, 'checkpoint_mismatch', null]],
    'a truncated tail leaves its seal unmatched',
  );
  const wrongOrigin = verify(c.lines, { origin: 'govgate/other' });
  t.equal(wrongOrigin.broken_events.filter((b) => b.reason === 'checkpoint_mismatch').length, 3);
  const noKeys = verify(c.lines, { verifiers: [] });
  t.equal(noKeys.broken_events.filter((b) => b.reason === 'signature_invalid').length, 3);
  const capped = verify(c.lines, { verifiers: [], maxBrokenEvents: 2 });
  t.equal(capped.broken_events.length, 2);
  t.equal(capped.broken, 3);
});

t.test('a head that does not match the sealed event is checkpoint_mismatch', async (t) => {
  const c = buildChain({ n: 4, sealAt: [] });
  const lines = clone(c.lines);
  const e4 = c.events[3] as ChainEvent;
  const body = formatCheckpoint({ origin: ORIGIN, size: 4, rootHash: c.tree.root(), head: e4.prev_hash });
  lines.push({ kind: 'seal', seal: { seq: 1, size: 4, note: sealNote(body) } });
  t.same(verify(lines).broken_events, [{ line: 4, event_id: idOf(4), reason: 'checkpoint_mismatch' }]);
});

t.test('garbage input is reported, never thrown', async (t) => {
  const v = new ChainVerifier({ verifiers: orgKeys().verifiers });
  v.pushEvent(null);
  v.pushEvent({ _chain_version: 2, seq: 'x', personal: 5, details: { n: 1 } });
  v.pushEvent({ _chain_bridge: { bridged_from_seq: 0 } });
  v.pushSeal({ seq: 1, size: -1, note: 'x' });
  v.pushSeal({ seq: 1, size: 2, note: 'not a note' });
  v.pushEvent({ _chain_version: 2, seq: 2, id: 'ae_x', prev_hash: 7 });
  // Valid JSON nested deeper than serialising it can go: content_modified, not a stack overflow.
  let deep: unknown = 1;
  for (let i = 0; i < 20_000; i++) deep = { d: deep };
  const text = JSON.stringify({ n: 1 }).replace('1', '2'); // a text that is not the event's
  t.doesNotThrow(() => v.pushEvent({ _chain_version: 2, seq: 3, id: 'ae_y', details: deep }, text));
  t.doesNotThrow(() => v.pushEvent({ _chain_version: 2, seq: 4, id: 'ae_z', personal: { p: deep } }));
  const r = v.result();
  t.equal(r.status, 'compromised');
  t.equal(r.events, 5);
  t.equal(r.broken, 5);
  t.ok(r.broken_events.some((b) => b.reason === 'signature_invalid'));
});

// ---- legacy v1 ----
function legacyChain(n: number, orgs: string[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  let prev = GENESIS;
  for (let i = 1; i <= n; i++) {
    const e: Record<string, unknown> = {
      id: `ev_${i}`,
      org_id: orgs[i % orgs.length],
      timestamp: `2024-06-01T00:00:0${i % 10}Z`,
      event_type: 'pii_detected',
      details: { entity_types: ['EMAIL'], action: 'redacted' },
      prev_hash: prev,
    };
    e.hash = hashEvent(prev, e);
    prev = e.hash as string;
    out.push(e);
  }
  return out;
}

t.test('legacy v1 events verify against their own global chain', async (t) => {
  const legacy = legacyChain(5, ['a', 'b']);
  const c = buildChain({ n: 3, sealAt: [3] });
  const v = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN });
  for (const e of legacy) v.pushEvent(clone(e));
  feed(v, c.lines);
  const r = v.result();
  t.equal(r.status, 'intact');
  t.equal(r.events, 8);
  t.equal(r.chain_length, 8);
  t.equal(r.current_head, (c.events[2] as ChainEvent).hash);

  const tampered = legacy.map(clone);
  (tampered[2] as Record<string, unknown>).event_type = 'nothing_happened';
  tampered.splice(3, 1);
  const v2 = new ChainVerifier({ verifiers: [] });
  for (const e of tampered) v2.pushEvent(e);
  t.same(
    v2.result().broken_events.map((b) => [b.line, b.event_id, b.reason]),
    [
      [3, 'ev_3', 'content_modified'],
      [4, 'ev_5', 'chain_broken'],
    ],
  );
  t.equal(v2.result().current_head, legacy[4]?.hash);
});

t.test(
  'a legacy v1 line once a v2 chain has begun is chain_broken; the v2 chain around it stays valid',
  async (t) => {
    const c = buildChain({ n: 8, sealAt: [4, 8] });
    const forged = legacyChain(1, ['org_a'])[0] as Record<string, unknown>;
    forged.id = 'ev_forged';
    forged.hash = hashEvent(GENESIS, { ...forged, hash: undefined });
    for (const after of [1, 4, 8]) {
      const v = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN });
      let events = 0;
      for (const line of c.lines) {
        const copy = clone(line);
        if (copy.kind === 'seal') v.pushSeal(copy.seal);
        else {
          v.pushEvent(copy.event);
          if (++events === after) v.pushEvent(clone(forged));
        }
      }
      const r = v.result();
      t.same(
        r.broken_events,
        [{ line: after + 1, event_id: 'ev_forged', reason: 'chain_broken' }],
        `inserted after event ${after}: one finding, at the position it holds`,
      );
      t.match(r, { status: 'compromised', events: 9, valid: 8, broken: 1, chain_length: 8 });
      t.same(v.coverage(), { sealed_through: 8, unsealed: 0 }, 'the seals around it still cover the chain');
    }
    // A stream that can only hold a v2 org chain (an org's store): v1 lines are findings from the start.
    const legacy = legacyChain(3, ['org_a']);
    const strict = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN, legacy: false });
    for (const e of legacy) strict.pushEvent(clone(e));
    t.same(
      strict.result().broken_events.map((b) => [b.line, b.event_id, b.reason]),
      [
        [1, 'ev_1', 'chain_broken'],
        [1, 'ev_2', 'chain_broken'],
        [1, 'ev_3', 'chain_broken'],
      ],
    );
    // An event stored under a key that is not its seq.
    const keyed = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN, legacy: false });
    for (const [i, e] of c.events.slice(0, 3).entries()) {
      keyed.pushEvent(clone(e), undefined, i === 1 ? 2.5 : i + 1);
    }
    t.same(keyed.result().broken_events, [{ line: 2, event_id: 'ae_000002', reason: 'chain_broken' }]);
  },
);

// ---- retention bridge ----
function bridged(c: BuiltChain, cut: number, edit?: (b: ReturnType<typeof bridgeRecord>) => void): unknown[] {
  const tree = new MerkleBuilder();
  for (const e of c.events.slice(0, cut)) tree.push(leafHash(e.hash));
  const seal = c.seals.find((s) => s.size === cut) ?? null;
  const record = bridgeRecord({
    fromSeq: 1,
    toSeq: cut,
    bridgedHash: (c.events[cut - 1] as ChainEvent).hash,
    subtrees: tree.subtrees(),
    lastSeal: seal,
    archive: { uri: 's3://audit-archive/org_test/1-6.jsonl.gz', sha256: 'ab'.repeat(32) },
  });
  edit?.(record);
  const rest = c.lines.filter((l) => (l.kind === 'event' ? l.event.seq > cut : l.seal.size > cut));
  return [record, ...rest];
}

function verifyMixed(items: unknown[]): IntegrityResult {
  const v = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN });
  for (const item of items) {
    const x = clone(item) as Partial<Line> & { kind?: string };
    if (x.kind === 'event') v.pushEvent((x as Line & { kind: 'event' }).event);
    else if (x.kind === 'seal') v.pushSeal((x as Line & { kind: 'seal' }).seal);
    else v.pushEvent(x);
  }
  return v.result();
}

t.test('a _chain_bridge keeps later roots and links verifiable', async (t) => {
  const c = buildChain({ n: 11, sealAt: [3, 6, 9, 11] });
  for (const cut of [3, 6, 9]) {
    const r = verifyMixed(bridged(c, cut));
    t.equal(r.status, 'intact', `cut at ${cut}`);
    t.equal(r.events, 11 - cut);
    t.equal(r.chain_length, 11);
    t.equal(r.current_head, (c.events[10] as ChainEvent).hash);
  }
  const wrongHash = verifyMixed(
    bridged(c, 6, (b) => {
      b._chain_bridge.bridged_hash = 'cd'.repeat(32);
    }),
  );
  t.same(
    wrongHash.broken_events.map((b) => [b.line, b.reason]),
    [
      [6, 'checkpoint_mismatch'],
      [7, 'chain_broken'],
    ],
  );
  const wrongSubtree = verifyMixed(
    bridged(c, 6, (b) => {
      b._chain_bridge.subtree_hashes[0] = 'cd'.repeat(32);
    }),
  );
  t.same(
    wrongSubtree.broken_events.map((b) => [b.line, b.reason]),
    [
      [6, 'checkpoint_mismatch'],
      [9, 'checkpoint_mismatch'],
      [11, 'checkpoint_mismatch'],
    ],
  );
  const unsealed = verifyMixed(
    bridged(c, 6, (b) => {
      b._chain_bridge.last_seal = null;
    }),
  );
  t.same(
    unsealed.broken_events.map((b) => [b.line, b.reason]),
    [[6, 'checkpoint_mismatch']],
  );
  const malformed = verifyMixed(
    bridged(c, 6, (b) => {
      b._chain_bridge.subtree_hashes.pop();
    }),
  );
  t.equal(malformed.status, 'compromised');
});

// ---- receipts ----
t.test('receipts: inclusion proof + seal, checkable offline', async (t) => {
  const c = buildChain({ n: 13, sealAt: [13] });
  const nodes = new Map<string, Uint8Array>();
  const b = new MerkleBuilder();
  for (const e of c.events)
    for (const n of b.append(leafHash(e.hash))) nodes.set(`${n.level}:${n.index}`, n.hash);
  const reader: NodeReader = (l, i) => nodes.get(`${l}:${i}`);
  const seal = c.seals[0];
  if (seal === undefined) throw new Error('no seal');
  const keys = orgKeys().verifiers;
  for (const e of c.events) {
    const receipt = buildReceipt(e, seal, reader);
    t.same(verifyReceipt(receipt, keys, e), { ok: true }, `seq ${e.seq}`);
  }
  const e5 = c.events[4] as ChainEvent;
  const receipt = buildReceipt(e5, seal, reader);
  t.match(verifyReceipt({ ...receipt, seq: 6 }, keys), { ok: false, reason: 'not_included' });
  t.match(verifyReceipt(receipt, keys, { ...e5, outcome: 'block' }), {
    ok: false,
    reason: 'content_modified',
  });
  t.match(verifyReceipt({ ...receipt, tree_size: 12 }, keys), { ok: false, reason: 'checkpoint_mismatch' });
  t.match(verifyReceipt(receipt, makeKeys('govgate/org_test', 3).verifiers), {
    ok: false,
    reason: 'signature_invalid',
  });
  const proof = [...receipt.inclusion_proof];
  proof[0] = 'ee'.repeat(32);
  t.match(verifyReceipt({ ...receipt, inclusion_proof: proof }, keys), { ok: false, reason: 'not_included' });
});
