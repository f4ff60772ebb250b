import OpenAI from 'openai';
import t from 'tap';
import type { TextItem } from '../../src/core/guardrails/index.js';
import {
  MAX_QUEUED_CHARS,
  MAX_QUEUED_CHARS_PER_ORG,
  MAX_QUEUED_SCANS,
  MAX_QUEUED_SCANS_PER_ORG,
  OFFLOAD_CHARS,
  ScanPool,
} from '../../src/govern/scan-pool.js';
import { JobDropped } from '../../src/util/job-worker.js';
import { HELD_SCAN_WORKER, heldScans } from '../helpers/held-scans.js';
import {
  createOrg,
  ENGINES,
  serviceOnMockUpstream,
  startService,
  type TestService,
} from '../helpers/service.js';

// The scan queue is bounded, and a call whose client left is dropped from it: each large call
// waiting for the scan worker holds its body, the parsed request and its texts, so 20 slow 4.5
// MiB bodies whose clients had gone took the process from 347 MB to 1.0 GB for a minute. The held
// scan worker (test/helpers/held-scan-worker.ts) scans only when a test lets it: what waits is
// decided here, not by how slow a text is.

const OPTS = { pii: true, secrets: true, injection: true, unicode: true };
const MI = 1024 * 1024;

const texts = (chars: number): TextItem[] => [{ message: 0, part: -1, text: 'x'.repeat(chars) }];

/** The settled state of a promise, without waiting for it. */
function settled<T>(p: Promise<T>): () => 'pending' | 'ok' | string {
  let state = 'pending';
  p.then(
    () => {
      state = 'ok';
    },
    (err: { code?: string; message?: string }) => {
      state = err.code ?? err.message ?? 'error';
    },
  );
  return () => state;
}

t.test('an org past its share is refused with 429, the queue past its bounds with 503', async (t) => {
  const held = heldScans();
  const pool = new ScanPool(HELD_SCAN_WORKER);
  t.teardown(async () => {
    await pool.close();
    held.close();
  });
  const scans: Promise<unknown>[] = [];
  const scan = (org: string, chars = OFFLOAD_CHARS) => pool.scan(texts(chars), OPTS, { org });

  // By count: an org holds at most MAX_QUEUED_SCANS_PER_ORG, the queue MAX_QUEUED_SCANS.
  for (let i = 0; i < MAX_QUEUED_SCANS_PER_ORG; i++) scans.push(scan('org_a'));
  await held.startedCount(1);
  const refused = await scan('org_a').then(
    () => undefined,
    (err) => err,
  );
  t.equal(refused?.code, 'rate_limited', 'past its share: 429');
  t.equal(refused?.status, 429);
  t.same(refused?.headers, { 'retry-after': '2' });
  t.match(refused?.message, /this org already has 8 large calls waiting for the content scan/);
  const orgs = MAX_QUEUED_SCANS / MAX_QUEUED_SCANS_PER_ORG;
  for (let o = 1; o < orgs; o++)
    for (let i = 0; i < MAX_QUEUED_SCANS_PER_ORG; i++) scans.push(scan(`org_${o}`));
  t.equal(pool.pending, MAX_QUEUED_SCANS, 'other orgs still got in');
  const full = await scan('org_z').then(
    () => undefined,
    (err) => err,
  );
  t.equal(full?.code, 'unavailable', 'past the whole queue: 503');
  t.equal(full?.status, 503);
  t.same(full?.headers, { 'retry-after': '2' });
  t.same(pool.refused, { org: 1, all: 1 });
  t.equal(pool.pending, MAX_QUEUED_SCANS, 'a refused call takes no place');
  t.equal(held.started.length, 1, 'one scan at a time in the worker');
  held.release(MAX_QUEUED_SCANS);
  await Promise.all(scans);
  t.equal(pool.pending, 0);
  await held.startedCount(MAX_QUEUED_SCANS);
  t.equal(held.started.length, MAX_QUEUED_SCANS, 'every call that was taken was scanned');
  // Answers (detectAll) are never refused: the provider already answered.
  const answers = Array.from({ length: MAX_QUEUED_SCANS + 1 }, () =>
    pool.detectAll(['x'.repeat(OFFLOAD_CHARS)], OPTS),
  );
  const next = scan('org_b');
  t.rejects(next, /govgate already has 33 large calls waiting/, 'but they count towards the queue');
  held.release(MAX_QUEUED_SCANS + 1);
  await Promise.all(answers);
  const again = scan('org_b');
  held.release();
  await t.resolves(again, 'room again once they are scanned');
});

t.test('by characters: the largest body is always taken, a share holds at most 16 Mi', async (t) => {
  t.equal(MAX_QUEUED_CHARS_PER_ORG, 16 * MI);
  t.equal(MAX_QUEUED_CHARS, 32 * MI);
  const held = heldScans();
  const pool = new ScanPool(HELD_SCAN_WORKER);
  t.teardown(async () => {
    await pool.close();
    held.close();
  });
  const scan = (org: string, chars: number) => pool.scan(texts(chars), OPTS, { org });
  const taken = [scan('org_a', 17 * MI)];
  const first = settled(taken[0] as Promise<unknown>);
  await held.startedCount(1);
  t.equal(first(), 'pending', 'a call larger than the share, in an empty queue: taken');
  t.equal(await scan('org_a', MI).catch((e) => e.code), 'rate_limited', 'then its org is full');
  taken.push(scan('org_b', 8 * MI), scan('org_b', 7 * MI));
  t.equal(pool.pending, 3, '17 + 8 + 7 = 32 Mi: the queue is full');
  t.equal(await scan('org_c', 1).catch((e) => e.code), 'unavailable', 'past 32 Mi: 503');
  t.equal(await scan('org_b', 1 * MI + 1).catch((e) => e.code), 'rate_limited', 'the org first');
  held.release(3);
  await Promise.all(taken);
  const whole = scan('org_c', 32 * MI);
  held.release();
  await t.resolves(whole, 'an empty queue takes any call');
});

t.test('a scan whose caller goes away before its turn is dropped, never scanned', async (t) => {
  const held = heldScans();
  const pool = new ScanPool(HELD_SCAN_WORKER);
  t.teardown(async () => {
    await pool.close();
    held.close();
  });
  const listeners: (() => void)[] = [];
  const request = { aborted: false, onAbort: (l: () => void) => listeners.push(l) };
  const ahead = pool.scan(texts(OFFLOAD_CHARS), OPTS, { org: 'org_a', cancel: request });
  await held.startedCount(1);
  const behind = pool.scan(texts(OFFLOAD_CHARS + 1), OPTS, { org: 'org_a', cancel: request });
  t.equal(pool.pending, 2);
  request.aborted = true;
  for (const l of listeners) l();
  await t.rejects(behind, JobDropped);
  t.equal(pool.pending, 1, 'the waiting one left the queue; the running one runs to its end');
  t.equal(pool.dropped, 1);
  held.release();
  await ahead;
  t.same(held.started, [OFFLOAD_CHARS], 'the worker never got the dropped one');
  // Its share is free again: four more fit.
  const more = Array.from({ length: MAX_QUEUED_SCANS_PER_ORG }, () =>
    pool.scan(texts(OFFLOAD_CHARS), OPTS, { org: 'org_a' }),
  );
  held.release(MAX_QUEUED_SCANS_PER_ORG);
  await Promise.all(more);
});

/** A metric's value (the first series of that name and labels). */
async function metric(svc: TestService, series: string): Promise<number> {
  const m = await svc.call('/api/metrics', { token: svc.pat });
  const escaped = series.replace(/[{}"]/g, (c) => `\\${c}`);
  return Number(String(m.body).match(new RegExp(`^${escaped} (\\d+)`, 'm'))?.[1]);
}

/** Polls the service until a metric reaches a value: the server's side of a held state. */
async function until(svc: TestService, series: string, value: number): Promise<void> {
  for (let i = 0; i < 2_000; i++) {
    if ((await metric(svc, series)) === value) return;
    await new Promise((r) => setTimeout(r, 2));
  }
  throw new Error(`${series} never reached ${value}`);
}

for (const engine of ENGINES) {
  t.test(`${engine}: a large call whose client leaves while it waits is dropped and audited`, async (t) => {
    const held = heldScans();
    t.teardown(() => held.close());
    const { svc, upstream } = await serviceOnMockUpstream(t, { engine, scanWorker: HELD_SCAN_WORKER });
    upstream.reply = 'ok';
    const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${svc.url}/v1`, maxRetries: 0 });
    const big = 'The quick brown fox jumps over the lazy dog. '.repeat(2_000);
    const ahead = openai.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: big }],
    });
    await held.startedCount(1);
    const leaving = new AbortController();
    const left = openai.chat.completions
      .create(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: `${big} and more` }], user: 'u-1' },
        { signal: leaving.signal },
      )
      .catch((err: unknown) => err);
    await until(svc, 'govgate_content_scans_pending', 2);
    leaving.abort();
    t.type(await left, OpenAI.APIUserAbortError, 'the client left');
    await until(svc, 'govgate_content_scans_dropped_total', 1);
    t.equal(await metric(svc, 'govgate_content_scans_pending'), 1, 'dropped from the queue');
    held.release();
    const answer = await ahead;
    t.equal(answer.choices[0]?.message.content, 'ok', 'the call ahead is answered');
    t.equal(held.started.length, 1, 'the dropped call was never scanned');
    t.equal(upstream.requests.length, 1, 'nor sent');

    const events = (await svc.call('/api/audit?event_type=llm_call', { token: svc.pat })).body.data as any[];
    const gone = events.filter((e) => e.outcome === 'error');
    t.equal(gone.length, 1, 'the dropped call is audited');
    t.match(gone[0], {
      outcome: 'error',
      reason: 'client disconnected',
      provider: null,
      rule_id: null,
      details: {
        status: 499,
        error_code: null,
        client_disconnected: true,
        routed_provider: 'openai',
        decision: null,
        endpoint: '/v1/chat/completions',
        stream: false,
      },
    });
    t.equal(events.filter((e) => e.outcome === 'allow').length, 1);
  });
}

t.test('through the gateway: refused at once past the bounds, with Retry-After, and audited', async (t) => {
  const held = heldScans();
  t.teardown(() => held.close());
  const svc = await startService({ scanWorker: HELD_SCAN_WORKER });
  t.teardown(() => svc.close());
  const orgs = [];
  for (let o = 0; o <= MAX_QUEUED_SCANS / MAX_QUEUED_SCANS_PER_ORG; o++)
    orgs.push(await createOrg(svc, `tenant${o}`, { mock: true }));
  const big = 'The quick brown fox jumps over the lazy dog. '.repeat(2_000);
  const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${svc.url}/v1`, maxRetries: 0 });
  const chat = (key: string) =>
    client(key).chat.completions.create({ model: 'mock-echo', messages: [{ role: 'user', content: big }] });
  const embed = (key: string) => client(key).embeddings.create({ model: 'mock-echo', input: big });
  const waiting: Promise<unknown>[] = [];
  const first = orgs[0] as (typeof orgs)[0];
  for (let i = 0; i < MAX_QUEUED_SCANS_PER_ORG; i++) waiting.push(chat(first.agentKey));
  await until(svc, 'govgate_content_scans_pending', MAX_QUEUED_SCANS_PER_ORG);

  const err = await chat(first.agentKey).catch((e) => e);
  t.equal(err.status, 429, 'past its org share');
  t.equal(err.headers?.get('retry-after'), '2');
  t.match(err.error, { type: 'rate_limit_error', code: 'rate_limited', request_id: /^req_/ });
  t.match(err.error.message, /this org already has 8 large calls waiting for the content scan/);
  const eerr = await embed(first.agentKey).catch((e) => e);
  t.equal(eerr.status, 429, 'embeddings too');

  for (const org of orgs.slice(1, -1))
    for (let i = 0; i < MAX_QUEUED_SCANS_PER_ORG; i++) waiting.push(chat(org.agentKey));
  await until(svc, 'govgate_content_scans_pending', MAX_QUEUED_SCANS);
  const last = orgs.at(-1) as (typeof orgs)[0];
  const full = await chat(last.agentKey).catch((e) => e);
  t.equal(full.status, 503, 'past the whole queue');
  t.equal(full.headers?.get('retry-after'), '2');
  t.match(full.error, { type: 'api_error', code: 'unavailable' });
  t.equal(await metric(svc, 'govgate_content_scans_refused_total{limit="org"}'), 2);
  t.equal(await metric(svc, 'govgate_content_scans_refused_total{limit="all"}'), 1);
  t.equal(
    (
      await client(last.agentKey).chat.completions.create({
        model: 'mock-echo',
        messages: [{ role: 'user', content: 'hi' }],
      })
    ).choices.length,
    1,
    'an ordinary call is never queued, so never refused',
  );

  // Each refusal is audited in its org, as a call that failed before any provider saw it.
  const audit = async (pat: string, type: string) =>
    ((await svc.call(`/api/audit?event_type=${type}`, { token: pat })).body.data as any[]).filter(
      (e) => e.outcome === 'error',
    );
  const refusedChat = await audit(first.adminPat, 'llm_call');
  t.equal(refusedChat.length, 1);
  t.match(refusedChat[0], {
    outcome: 'error',
    reason: /this org already has 8 large calls/,
    provider: null,
    details: { status: 429, error_code: 'rate_limited', client_disconnected: false, decision: null },
  });
  t.match(await audit(first.adminPat, 'embedding_call'), [
    { provider: null, details: { status: 429, error_code: 'rate_limited', decision: null } },
  ]);
  t.match(await audit(last.adminPat, 'llm_call'), [
    { provider: null, details: { status: 503, error_code: 'unavailable', decision: null } },
  ]);

  // mock-echo answers with the prompt: each answer is large, and scanned in the worker too.
  held.release(2 * MAX_QUEUED_SCANS);
  const answers = await Promise.all(waiting);
  t.equal(answers.length, MAX_QUEUED_SCANS, 'every call that waited is answered');
});

/** A /v1/govern call of an agent, with a large payload; `signal` aborts it. */
function governLarge(svc: TestService, key: string, text: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${svc.url}/v1/govern`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'TOOL_CALL', payload: { tool: 'docs.summarise', args: { text } } }),
    signal,
  });
}

t.test('/v1/govern and /v1/tools/govern: refused past the bounds, and audited as not decided', async (t) => {
  const held = heldScans();
  t.teardown(() => held.close());
  const svc = await startService({ scanWorker: HELD_SCAN_WORKER });
  t.teardown(() => svc.close());
  const big = 'The quick brown fox jumps over the lazy dog. '.repeat(2_000);
  const waiting: Promise<Response>[] = [];
  for (let i = 0; i < MAX_QUEUED_SCANS_PER_ORG; i++) waiting.push(governLarge(svc, svc.agentKey, big));
  await until(svc, 'govgate_content_scans_pending', MAX_QUEUED_SCANS_PER_ORG);

  const refused = await governLarge(svc, svc.agentKey, big);
  t.equal(refused.status, 429, 'past its org share');
  t.equal(refused.headers.get('retry-after'), '2');
  t.match(await refused.json(), { error: { code: 'rate_limited', message: /this org already has 8/ } });
  const tool = await svc.call('/v1/tools/govern', {
    token: svc.agentKey,
    body: { name: 'docs.summarise', arguments: { text: big }, tool_call_id: 'call_1' },
  });
  t.equal(tool.status, 429, '/v1/tools/govern too');

  const events = (await svc.call('/api/audit?event_type=govern.decision', { token: svc.pat })).body
    .data as any[];
  const undecided = events.filter((e) => e.outcome === 'error');
  t.equal(undecided.length, 2, 'each refusal is audited');
  t.equal(events.length, 2, 'and nothing else was decided yet');
  for (const e of undecided) {
    t.match(e, {
      event_type: 'govern.decision',
      outcome: 'error',
      reason: /this org already has 8 large calls/,
      rule_id: null,
      behavior_type: 'TOOL_CALL',
      details: {
        status: 429,
        error_code: 'rate_limited',
        client_disconnected: false,
        decision: null,
        action: { type: 'TOOL_CALL', tool: 'docs.summarise' },
      },
    });
  }
  t.ok(
    undecided.some((e) => e.details.tool_call_id === 'call_1'),
    "the tools route's event names its tool call",
  );
  // A report of an execution on a pipeline that was never decided is refused.
  const pipeline = String(undecided[0]?.pipeline_id);
  const report = await svc.call('/v1/govern/execution', {
    token: svc.agentKey,
    body: { pipeline_id: pipeline, ok: true },
  });
  t.equal(report.status, 409, 'an undecided pipeline allowed nothing');

  held.release(MAX_QUEUED_SCANS_PER_ORG);
  const answers = await Promise.all(waiting);
  t.same(
    answers.map((r) => r.status),
    Array(MAX_QUEUED_SCANS_PER_ORG).fill(200),
    'every call that waited is decided',
  );
});

for (const engine of ENGINES) {
  t.test(
    `${engine}: a /v1/govern call whose client leaves while it waits is dropped and audited`,
    async (t) => {
      const held = heldScans();
      t.teardown(() => held.close());
      const svc = await startService({ engine, scanWorker: HELD_SCAN_WORKER });
      t.teardown(() => svc.close());
      const big = 'The quick brown fox jumps over the lazy dog. '.repeat(2_000);
      const ahead = governLarge(svc, svc.agentKey, big);
      await held.startedCount(1);
      const leaving = new AbortController();
      const left = governLarge(svc, svc.agentKey, `${big} and more`, leaving.signal).catch(
        (err: unknown) => err,
      );
      await until(svc, 'govgate_content_scans_pending', 2);
      leaving.abort();
      t.match(await left, { name: 'AbortError' }, 'the client left');
      await until(svc, 'govgate_content_scans_dropped_total', 1);
      t.equal(await metric(svc, 'govgate_content_scans_pending'), 1, 'dropped from the queue');
      held.release();
      t.equal((await ahead).status, 200, 'the call ahead is decided');
      t.equal(held.started.length, 1, 'the dropped call was never scanned');

      const events = (await svc.call('/api/audit?event_type=govern.decision', { token: svc.pat })).body
        .data as any[];
      t.equal(events.length, 2);
      t.match(
        events.filter((e) => e.outcome === 'error'),
        [
          {
            outcome: 'error',
            reason: 'client disconnected',
            rule_id: null,
            details: { status: 499, error_code: null, client_disconnected: true, decision: null },
          },
        ],
        'the dropped call is audited',
      );
      t.equal(events.filter((e) => e.outcome === 'allow').length, 1);
    },
  );
}
