import type { Test } from 'tap';
import t from 'tap';
import { ChainLog } from '../../src/audit/chain-log.js';
import { INTEGRITY_TTL_MS, registerAuditRoutes } from '../../src/audit/routes.js';
import type { AuditEvent, ChainLine } from '../../src/audit/types.js';
import {
  ChainVerifier,
  checkpointOrigin,
  fromHex,
  parseCheckpoint,
  verifyConsistency,
  verifyNote,
  verifyReceipt,
} from '../../src/core/chain/index.js';
import { ERROR_CATALOG, type ErrorCode } from '../../src/core/errors.js';
import {
  type CoreHarness,
  type HarnessResponse,
  orgWithRoles,
  type RoleName,
  type RoleOrg,
  startCoreHarness,
} from '../helpers/core-harness.js';
import { testSigner } from './helpers.js';

type Res = HarnessResponse;
type Call = (path: string, token?: string) => Promise<Res>;

interface Harness {
  readonly call: Call;
  readonly pat: string;
  readonly log: ChainLog;
  readonly clock: { now: number };
  close(): Promise<void>;
}

async function startHarness(): Promise<Harness> {
  const clock = { now: Date.UTC(2025, 5, 1) };
  const h = await startCoreHarness<ChainLog>({
    prefix: 'audit-routes',
    engine: 'node',
    sink: (store, config) =>
      new ChainLog(store, testSigner(), {
        dataDir: config.dataDir,
        rotationMaxMb: config.audit.rotationMaxMb,
        sealIntervalMs: 60_000,
      }),
    closeSink: (log) => log.close(),
    register: ({ snapshot, orgExists, router }, log) => {
      registerAuditRoutes(router, { snapshot, log, orgExists, clock: () => clock.now });
    },
  });
  core = h;
  return {
    call: (path, token) => h.call(path, token === undefined ? {} : { token }),
    pat: h.pat,
    log: h.audit,
    clock,
    close: h.close,
  };
}

/** The harness behind `Harness`, for org set-up. */
let core: CoreHarness<ChainLog>;

interface Org {
  readonly orgId: string;
  readonly tokens: Readonly<Record<RoleName, string>>;
  readonly agentKey: string;
}

async function makeOrg(_h: Harness, name: string): Promise<Org> {
  const o = await orgWithRoles(core, name);
  return { orgId: o.orgId, tokens: o.tokens, agentKey: (o.agents[0] as RoleOrg['agents'][number]).apiKey };
}

function assertError(t: Test, res: Res, code: ErrorCode, msg = ''): void {
  t.equal(res.status, ERROR_CATALOG[code].status, `${msg}: ${res.text}`);
  t.equal(res.body?.error?.code, code, msg);
}

/** Calls the gateway would have made: a few sessions, tasks and pipelines. */
async function traffic(h: Harness, org: Org, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const ref = await h.log.append({
      org_id: org.orgId,
      event_type: i % 3 === 0 ? 'govern.decision' : 'llm_call',
      agent_id: `${org.orgId}-agent`,
      session_id: `sess-${i % 2}`,
      task_id: `task-${i % 3}`,
      pipeline_id: `pl-${org.orgId}-${i}`,
      outcome: i % 4 === 0 ? 'block' : 'allow',
      provider: 'mock',
      model: 'mock-echo',
      usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
      cost: 0.25,
      personal: { end_user: `user-${i}@example.com` },
    });
    ids.push(ref.id);
  }
  return ids;
}

t.test('audit endpoints over HTTP', async (t) => {
  const h = await startHarness();
  t.teardown(() => h.close());
  const a = await makeOrg(h, 'alpha');
  const b = await makeOrg(h, 'beta');
  const aIds = await traffic(h, a, 12);
  const bIds = await traffic(h, b, 5);
  await h.log.flushSeals();
  const late = (await h.log.append({ org_id: a.orgId, event_type: 'llm_call', pipeline_id: 'pl-late' })).id;

  t.test('roles', async (t) => {
    const cases: Array<[string, RoleName | 'agent' | 'none', number]> = [
      ['/api/audit', 'requester', 403],
      ['/api/audit', 'auditor', 200],
      ['/api/audit', 'developer', 200],
      ['/api/audit', 'agent', 403],
      ['/api/audit', 'none', 401],
      ['/api/audit/_overview', 'requester', 403],
      ['/api/audit/_overview', 'auditor', 200],
      [`/api/audit/events/${aIds[0]}`, 'auditor', 200],
      [`/api/audit/events/${aIds[0]}/receipt`, 'auditor', 200],
      [`/api/audit/events/${aIds[0]}/receipt`, 'requester', 403],
      ['/api/audit/export', 'auditor', 200],
      ['/api/audit/export', 'agent', 403],
      ['/api/audit/integrity', 'auditor', 403],
      ['/api/audit/integrity', 'developer', 200],
      ['/api/audit/integrity', 'agent', 403],
      ['/api/audit/signing-key', 'auditor', 403],
      ['/api/audit/signing-key', 'developer', 200],
      ['/api/audit/session/sess-0', 'auditor', 200],
      ['/api/audit/session/sess-0', 'requester', 403],
    ];
    for (const [path, who, status] of cases) {
      const token = who === 'none' ? undefined : who === 'agent' ? a.agentKey : a.tokens[who];
      const res = await h.call(path, token);
      t.equal(res.status, status, `${who} ${path} → ${status}: ${res.text.slice(0, 200)}`);
    }
  });

  t.test('search: filters, pages, validation', async (t) => {
    const tok = a.tokens.auditor;
    const all = await h.call('/api/audit?limit=1000', tok);
    t.equal(all.status, 200);
    const events = all.body.data as AuditEvent[];
    t.ok(
      events.every((e) => e.org_id === a.orgId),
      'only the caller org',
    );
    t.same(
      events.map((e) => e.seq),
      [...events.map((e) => e.seq)].sort((x, y) => y - x),
      'newest first',
    );
    t.equal(all.body.next_cursor, null);
    t.ok(
      events.some((e) => e.event_type.startsWith('admin.')),
      'admin changes are in the org chain',
    );
    const blocks = await h.call('/api/audit?action=block&category=govern&limit=1000', tok);
    t.same(
      (blocks.body.data as AuditEvent[]).map((e) => e.seq),
      events.filter((e) => e.outcome === 'block' && e.event_type.startsWith('govern')).map((e) => e.seq),
    );
    const q = await h.call('/api/audit?q=MOCK-ECHO&session_id=sess-1', tok);
    t.ok(q.body.data.length > 0);
    t.ok((q.body.data as AuditEvent[]).every((e) => e.model === 'mock-echo' && e.session_id === 'sess-1'));
    // Spec 4.3 names the filters agent, session, task and text: the same search by either name.
    const bySpec = await h.call('/api/audit?text=MOCK-ECHO&session=sess-1&limit=1000', tok);
    t.equal(bySpec.status, 200);
    t.same(bySpec.body, (await h.call('/api/audit?q=MOCK-ECHO&session_id=sess-1&limit=1000', tok)).body);
    for (const [spec, design] of [
      ['agent', 'agent_id'],
      ['session', 'session_id'],
      ['task', 'task_id'],
    ] as const) {
      const value = events.find((e) => e[design] != null)?.[design] as string;
      t.ok(value, `some event has a ${design}`);
      const res = await h.call(`/api/audit?${spec}=${encodeURIComponent(value)}&limit=1000`, tok);
      t.ok(res.body.data.length > 0 && res.body.data.length < events.length, `${spec} filters`);
      t.ok((res.body.data as AuditEvent[]).every((e) => e[design] === value));
      assertError(
        t,
        await h.call(`/api/audit?${spec}=${encodeURIComponent(value)}&${design}=other`, tok),
        'invalid_request',
        `${spec} and ${design} disagree`,
      );
    }
    // A parameter the search does not know is refused: a misspelt filter never widens a search.
    for (const unknown of ['sesion=sess-1', 'agentid=x', 'foo=bar', 'Session=sess-1']) {
      const res = await h.call(`/api/audit?${unknown}`, tok);
      assertError(t, res, 'invalid_request', unknown);
      t.equal(res.body.error.param, unknown.split('=')[0]);
    }
    const seen: number[] = [];
    let cursor: string | null = '';
    while (cursor !== null) {
      const page: Res = await h.call(`/api/audit?limit=4${cursor ? `&cursor=${cursor}` : ''}`, tok);
      t.equal(page.status, 200);
      seen.push(...(page.body.data as AuditEvent[]).map((e) => e.seq));
      cursor = page.body.next_cursor;
    }
    t.same(
      seen,
      events.map((e) => e.seq),
      'pages cover the chain once',
    );
    for (const bad of [
      'limit=0',
      'limit=1001',
      'limit=x',
      'since=nope',
      'until=2025-99-01',
      'cursor=%21%21',
      // A parameter given twice: the first won and the rest were never checked.
      'limit=1&limit=2',
      'limit=2&limit=5000',
    ]) {
      assertError(t, await h.call(`/api/audit?${bad}`, tok), 'invalid_request', bad);
    }
    const sealed = events.find((e) => e.id === aIds[0]);
    t.same(sealed?.seal, { seq: 1 }, 'list items name their seal');
    t.equal(events.find((e) => e.id === late)?.seal, null, 'unsealed items say so');
  });

  t.test('org isolation', async (t) => {
    assertError(
      t,
      await h.call(`/api/audit/events/${bIds[0]}`, a.tokens.admin),
      'not_found',
      "another org's event",
    );
    assertError(t, await h.call(`/api/audit/pipeline/pl-${b.orgId}-0`, a.tokens.auditor), 'not_found');
    assertError(
      t,
      await h.call(`/api/audit?org_id=${b.orgId}`, a.tokens.admin),
      'forbidden',
      'naming another org',
    );
    const asSuper = await h.call(`/api/audit?org_id=${b.orgId}&limit=1000`, h.pat);
    t.equal(asSuper.status, 200);
    t.ok((asSuper.body.data as AuditEvent[]).every((e) => e.org_id === b.orgId));
    assertError(t, await h.call('/api/audit?org_id=org_nope', h.pat), 'not_found');
    const bInt = await h.call(`/api/audit/integrity?org_id=${b.orgId}`, h.pat);
    t.match(bInt.body, { status: 'intact' });
    t.equal(bInt.body.events, (asSuper.body.data as AuditEvent[]).length);
  });

  t.test('views: session, task, pipeline, overview', async (t) => {
    const tok = a.tokens.auditor;
    const s = await h.call('/api/audit/session/sess-1', tok);
    t.equal(s.body.session_id, 'sess-1');
    t.same(
      (s.body.data as AuditEvent[]).map((e) => e.session_id),
      Array(6).fill('sess-1'),
    );
    t.equal((await h.call('/api/audit/task/task-2', tok)).body.data.length, 4);
    const p = await h.call(`/api/audit/pipeline/pl-${a.orgId}-3`, tok);
    t.equal(p.body.pipeline_id, `pl-${a.orgId}-3`);
    t.equal(p.body.data[0].id, aIds[3]);
    assertError(t, await h.call('/api/audit/session/nope', tok), 'not_found');
    assertError(t, await h.call('/api/audit/task/nope', tok), 'not_found');
    assertError(t, await h.call('/api/audit/session/sess-1?limit=0', tok), 'invalid_request');
    // A filter on a view is refused, not ignored (ignored, it would widen what is read).
    for (const q of ['agent_id=other', 'foo=1'])
      assertError(t, await h.call(`/api/audit/session/sess-1?${q}`, tok), 'invalid_request');
    t.equal(s.body.next_cursor, null, 'the whole session in one page says so');
    // A view longer than a page says so, and pages on in order, each event once.
    for (const [path, key, count] of [
      ['/api/audit/session/sess-1', 'session_id', 6],
      ['/api/audit/task/task-2', 'task_id', 4],
    ] as const) {
      const seen: number[] = [];
      let cursor: string | null = '';
      let pages = 0;
      while (cursor !== null && pages < 10) {
        const page: Res = await h.call(`${path}?limit=4${cursor ? `&cursor=${cursor}` : ''}`, tok);
        t.equal(page.status, 200);
        t.ok((page.body.data as AuditEvent[]).every((e) => e[key] === path.split('/').pop()));
        seen.push(...(page.body.data as AuditEvent[]).map((e) => e.seq));
        cursor = page.body.next_cursor;
        pages++;
      }
      t.equal(seen.length, count, `${path}: every event`);
      t.same(
        seen,
        [...seen].sort((x, y) => x - y),
        'oldest first, no repeats',
      );
      t.equal(new Set(seen).size, count);
    }
    const first = await h.call('/api/audit/session/sess-1?limit=2', tok);
    t.type(first.body.next_cursor, 'string', 'a partial page has a cursor');
    assertError(t, await h.call('/api/audit/session/sess-1?cursor=%21%21', tok), 'invalid_request');
    const o = await h.call('/api/audit/_overview', tok);
    t.equal(o.body.by_agent[`${a.orgId}-agent`], 12);
    t.equal(o.body.by_outcome.block, 3);
    t.same(o.body.tokens, { prompt: 12, completion: 24, total: 36 });
    t.equal(o.body.cost, 3);
    const none = await h.call('/api/audit/_overview?since=2999-01-01T00:00:00Z', tok);
    t.equal(none.body.events, 0);
  });

  t.test('an event with its seal and receipt', async (t) => {
    const tok = a.tokens.auditor;
    const keys = (await h.call('/api/audit/signing-key', a.tokens.developer)).body;
    t.same(keys, testSigner().publicDocument());
    const res = await h.call(`/api/audit/events/${aIds[5]}`, tok);
    t.equal(res.status, 200);
    const { seal, receipt, ...event } = res.body;
    t.equal(event.id, aIds[5]);
    t.match(event.personal.end_user, { value: 'user-5@example.com', salt: String, c: String });
    t.match(seal, { seq: 1, size: Number, note: String });
    t.same(
      seal.signatures,
      keys.keys.map((k: { name: string; key_id: string; alg: string }) => ({
        name: k.name,
        key_id: k.key_id,
        alg: k.alg,
      })),
      'both signatures, named',
    );
    t.ok(verifyNote(seal.note, testSigner().verifiers).ok);
    t.same(
      verifyReceipt(receipt, testSigner().verifiers, event),
      { ok: true },
      'the inlined receipt verifies',
    );
    const alone = await h.call(`/api/audit/events/${aIds[5]}/receipt`, tok);
    t.same(alone.body, receipt);
    const unsealed = await h.call(`/api/audit/events/${late}`, tok);
    t.equal(unsealed.body.seal, null);
    t.equal(unsealed.body.receipt, null);
    const pending = await h.call(`/api/audit/events/${late}/receipt`, tok);
    assertError(t, pending, 'conflict', 'receipt before the seal');
    t.equal(pending.headers.get('retry-after'), '1');
    assertError(t, await h.call('/api/audit/events/ae_nope', tok), 'not_found');
    assertError(t, await h.call('/api/audit/events/ae_nope/receipt', tok), 'not_found');
  });

  t.test('consistency between seals', async (t) => {
    const tok = a.tokens.auditor;
    await h.log.flushSeals(); // seals `late`
    await traffic(h, a, 3);
    await h.log.flushSeals();
    const lines = (await h.call('/api/audit/export', tok)).text.split('\n').filter(Boolean);
    const sizes = lines
      .map((l) => JSON.parse(l) as ChainLine)
      .flatMap((l) => ('_seal' in l ? [l._seal.size] : []));
    t.ok(sizes.length >= 3);
    const [from, to] = [sizes[0] as number, sizes[sizes.length - 1] as number];
    const res = await h.call(`/api/audit/consistency?from=${from}&to=${to}`, tok);
    t.equal(res.status, 200);
    const root = (note: string) => {
      const v = verifyNote(note, testSigner().verifiers);
      return v.ok ? parseCheckpoint(v.body).rootHash : new Uint8Array(32);
    };
    t.ok(
      verifyConsistency(
        from,
        to,
        root(res.body.from_checkpoint),
        root(res.body.to_checkpoint),
        (res.body.consistency_proof as string[]).map((x) => fromHex(x) as Uint8Array),
      ),
    );
    assertError(t, await h.call(`/api/audit/consistency?from=${from}`, tok), 'invalid_request');
    assertError(t, await h.call(`/api/audit/consistency?from=${to}&to=${from}`, tok), 'invalid_request');
    assertError(t, await h.call('/api/audit/consistency?from=x&to=2', tok), 'invalid_request');
    const notASeal = [...Array(to).keys()].find((k) => k > 0 && !sizes.includes(k)) as number;
    assertError(t, await h.call(`/api/audit/consistency?from=${notASeal}&to=${to}`, tok), 'not_found');
  });

  t.test('integrity is cached 5 minutes per org; admins may refresh', async (t) => {
    const dev = a.tokens.developer;
    // The roles test already scanned this org: that result is what a developer gets now.
    t.equal((await h.call('/api/audit/integrity', dev)).headers.get('x-cache'), 'hit');
    const first = await h.call(`/api/audit/integrity?refresh=true&org_id=${a.orgId}`, h.pat);
    t.equal(first.status, 200);
    t.equal(first.headers.get('x-cache'), 'miss', 'a super_admin refreshes');
    t.same(Object.keys(first.body).sort(), [
      'broken',
      'broken_events',
      'chain_length',
      'current_head',
      'events',
      'status',
      'valid',
    ]);
    t.match(first.body, { status: 'intact', broken: 0, broken_events: [] });
    t.equal(first.body.valid, first.body.events);
    const n = first.body.events as number;
    await traffic(h, a, 2);
    const second = await h.call('/api/audit/integrity', a.tokens.org_admin);
    t.equal(second.headers.get('x-cache'), 'hit');
    t.equal(second.body.events, n, 'the cached result');
    const devRefresh = await h.call('/api/audit/integrity?refresh=true', dev);
    t.equal(devRefresh.headers.get('x-cache'), 'hit', 'refresh needs admin');
    const adminRefresh = await h.call('/api/audit/integrity?refresh=true', a.tokens.admin);
    t.equal(adminRefresh.headers.get('x-cache'), 'miss');
    t.equal(adminRefresh.body.events, n + 2);
    await traffic(h, a, 1);
    h.clock.now += INTEGRITY_TTL_MS - 1;
    t.equal((await h.call('/api/audit/integrity', dev)).headers.get('x-cache'), 'hit');
    h.clock.now += 2;
    const expired = await h.call('/api/audit/integrity', dev);
    t.equal(expired.headers.get('x-cache'), 'miss', 'recomputed after 5 minutes');
    t.equal(expired.body.events, n + 3);
    const other = await h.call(`/api/audit/integrity`, b.tokens.developer);
    t.equal(other.headers.get('x-cache'), 'miss', "per org: B's earlier result expired too");
    t.equal(other.body.events, (await h.call('/api/audit?limit=1000', b.tokens.auditor)).body.data.length);
    t.equal(
      other.body.current_head,
      (await h.call('/api/audit?limit=1', b.tokens.auditor)).body.data[0].hash,
    );
  });

  t.test('export streams a chain the verifier accepts', async (t) => {
    await h.log.flushSeals();
    const res = await h.call('/api/audit/export?format=jsonl', a.tokens.auditor);
    t.equal(res.status, 200);
    t.match(res.headers.get('content-type'), /^application\/x-ndjson/);
    t.ok(res.text.endsWith('\n'));
    const lines = res.text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as ChainLine);
    const keys = (await h.call('/api/audit/signing-key', a.tokens.developer)).body;
    const v = new ChainVerifier({ verifiers: testSigner().verifiers, origin: checkpointOrigin(a.orgId) });
    for (const l of lines) {
      if ('_seal' in l) v.pushSeal(l._seal);
      else v.pushEvent(l);
    }
    const events = lines.filter((l) => 'seq' in l) as AuditEvent[];
    t.ok(keys.keys.length === 2);
    t.match(v.result(), { status: 'intact', events: events.length, broken: 0 });
    t.ok(events.every((e) => e.org_id === a.orgId));
    t.same(
      events.map((e) => e.seq),
      events.map((_, i) => i + 1),
    );
    t.equal(res.text, [...h.log.exportText(a.orgId)].map((l) => `${l}\n`).join(''));
    assertError(t, await h.call('/api/audit/export?format=csv', a.tokens.auditor), 'invalid_request');
    assertError(t, await h.call('/api/audit/export?since=soon', a.tokens.auditor), 'invalid_request');
    const future = await h.call('/api/audit/export?since=2999-01-01T00:00:00Z', a.tokens.auditor);
    t.equal(future.status, 200);
    t.equal(future.text, '');
  });
});
