import type { Test } from 'tap';
import t from 'tap';
import {
  ApprovalFeed,
  type ApprovalFeedOptions,
  ApprovalStore,
  type FeedTrail,
  registerApprovalFeedRoutes,
  registerApprovalRoutes,
} from '../../src/approvals/index.js';
import type { ChainLog } from '../../src/audit/chain-log.js';
import { type CoreHarness, startCoreHarness } from '../helpers/core-harness.js';
import { ENGINES, type Engine, publishOrgPolicy, startService } from '../helpers/service.js';

// The approval decision stream (SSE) and the long poll, through real listeners: an agent learns
// of its approval's decision as it is made, resumes after a reconnect without a gap, and sees no
// other agent's or org's.

interface SseEvent {
  readonly id: string | undefined;
  readonly event: string;
  readonly data: any;
}

/** An SSE client over fetch: collects frames, and comment lines (heartbeats) as counts. */
class SseClient {
  readonly events: SseEvent[] = [];
  comments = 0;
  retry: number | undefined;
  status = 0;
  headers: Headers | undefined;
  ended = false;
  readonly #ac = new AbortController();
  #buffer = '';
  #waiters: Array<() => void> = [];
  done!: Promise<void>;

  static async open(url: string, token: string, headers: Record<string, string> = {}): Promise<SseClient> {
    const c = new SseClient();
    const res = await fetch(url, {
      headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream', ...headers },
      signal: c.#ac.signal,
    });
    c.status = res.status;
    c.headers = res.headers;
    if (res.status !== 200 || res.body === null) {
      c.ended = true;
      c.events.push({ id: undefined, event: 'error', data: await res.json() });
      c.done = Promise.resolve();
      return c;
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    c.done = (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          c.#feed(decoder.decode(value, { stream: true }));
        }
      } catch {
        // aborted by close()
      } finally {
        c.ended = true;
        c.#wake();
      }
    })();
    return c;
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  #feed(text: string): void {
    this.#buffer += text;
    for (let i = this.#buffer.indexOf('\n\n'); i >= 0; i = this.#buffer.indexOf('\n\n')) {
      const block = this.#buffer.slice(0, i);
      this.#buffer = this.#buffer.slice(i + 2);
      let id: string | undefined;
      let event = 'message';
      let data: string | undefined;
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) this.comments++;
        else if (line.startsWith('id: ')) id = line.slice(4);
        else if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data = line.slice(6);
        else if (line.startsWith('retry: ')) this.retry = Number(line.slice(7));
      }
      if (data !== undefined) this.events.push({ id, event, data: JSON.parse(data) });
    }
    this.#wake();
  }

  /** Waits (at most `ms`) until `ok` holds of what was received. */
  async until(ok: (c: SseClient) => boolean, ms = 5000): Promise<boolean> {
    const end = Date.now() + ms;
    while (!ok(this)) {
      if (this.ended || Date.now() > end) return ok(this);
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
    return true;
  }

  close(): void {
    this.#ac.abort();
  }
}

interface FeedHarness {
  readonly h: CoreHarness<any>;
  readonly approvals: ApprovalStore;
  readonly feed: ApprovalFeed;
  readonly agent: { uuid: string; name: string; key: string; keyId: string };
  readonly other: { uuid: string; name: string; key: string; keyId: string };
  /** A new pending approval of `agent` (or `other`). */
  ask(who?: 'agent' | 'other', tool?: string): Promise<string>;
  /** A developer's PAT, which may decide. */
  readonly dev: string;
  readonly requester: string;
  stream(token: string, headers?: Record<string, string>, query?: string): Promise<SseClient>;
}

async function feedHarness(
  t: Test,
  opts: ApprovalFeedOptions = {},
  engine: Engine = 'uws',
  trail?: (log: ChainLog) => FeedTrail,
): Promise<FeedHarness> {
  let approvals: ApprovalStore | undefined;
  let feed: ApprovalFeed | undefined;
  const h = await startCoreHarness({
    prefix: 'appr-feed',
    engine,
    register: ({ store, snapshot, router, orgExists }, audit) => {
      approvals = new ApprovalStore(store, audit);
      feed = new ApprovalFeed(approvals, trail?.(audit) ?? audit, opts);
      registerApprovalRoutes(router, { snapshot, approvals, orgExists });
      registerApprovalFeedRoutes(router, { snapshot, feed, baseUrl: 'http://govgate.test', orgExists });
    },
  });
  t.teardown(async () => {
    feed?.close();
    await h.close();
  });
  const onboard = async (name: string) => {
    const r = await h.call('/api/agents/onboard', { token: h.pat, body: { agent_id: name } });
    return { uuid: r.body.agent_uuid, name, key: r.body.api_key.api_key, keyId: r.body.api_key.key_id };
  };
  const pat = async (role: string) => {
    const u = await h.call('/api/users', { token: h.pat, body: { email: `${role}@feed.test`, role } });
    const tok = await h.call('/api/tokens', { token: h.pat, body: { user_id: u.body.user_id } });
    return tok.body.token as string;
  };
  const agent = await onboard('feed-agent');
  const other = await onboard('feed-other');
  let n = 0;
  const store = approvals as ApprovalStore;
  return {
    h,
    approvals: store,
    feed: feed as ApprovalFeed,
    agent,
    other,
    dev: await pat('developer'),
    requester: await pat('requester'),
    async ask(who = 'agent', tool = 'payments.transfer') {
      const a = who === 'agent' ? agent : other;
      n++;
      const rec = await store.create({
        org_id: 'default',
        agent_id: a.name,
        agent_uuid: a.uuid,
        fingerprint: `${'f'.repeat(60)}${String(n).padStart(4, '0')}`,
        tier: 'standard',
        summary: `TOOL_CALL ${tool}`,
        matched_rule: 'big-transfers',
        pipeline_id: null,
        behavior_type: 'TOOL_CALL',
        tool,
      });
      return rec.id;
    },
    stream: (token, headers = {}, query = '') =>
      SseClient.open(`${h.url}/v1/me/approvals/stream${query}`, token, headers),
  };
}

const decide = (f: FeedHarness, id: string, decision: 'approve' | 'deny') =>
  f.h.call(`/v1/me/approvals/${id}/decide`, { token: f.dev, body: { decision, reason: 'checked' } });

for (const engine of ENGINES) {
  t.test(
    `an agent's stream: its own approvals' transitions, as they are committed (${engine})`,
    async (t) => {
      const f = await feedHarness(t, {}, engine);
      const s = await f.stream(f.agent.key);
      t.teardown(() => s.close());
      t.equal(s.status, 200);
      t.match(s.headers?.get('content-type'), /^text\/event-stream/);
      t.equal(s.headers?.get('cache-control'), 'no-cache');
      t.ok(await s.until((c) => c.retry !== undefined), 'a retry interval first');
      const mine = await f.ask('agent');
      const theirs = await f.ask('other');
      t.ok(await s.until((c) => c.events.length >= 1));
      t.equal((await decide(f, mine, 'approve')).status, 200);
      t.equal((await decide(f, theirs, 'deny')).status, 200);
      t.ok(await s.until((c) => c.events.length >= 2));
      // Nothing more arrives for the other agent's approval.
      await new Promise((r) => setTimeout(r, 200));
      t.same(
        s.events.map((e) => [e.event, e.data.approval_id, e.data.status]),
        [
          ['approval.created', mine, 'pending'],
          ['approval.decided', mine, 'approved'],
        ],
      );
      const decided = s.events[1]?.data;
      t.match(decided, {
        transition: 'decided',
        agent_id: 'feed-agent',
        tier: 'standard',
        tool: 'payments.transfer',
      });
      t.equal(decided.reason, 'checked');
      t.equal(decided.actor_kind, 'user');
      t.match(decided.event_id, /^ae_/);
      // `id:` is the transition's place in the org chain: the audit event says so too.
      t.equal(s.events[1]?.id, String(decided.seq));
      const event = f.h.audit.get('default', decided.event_id);
      t.equal(event?.seq, decided.seq);
      t.equal(event?.event_type, 'approval.decided');
      t.ok(Number(s.events[0]?.id) < Number(s.events[1]?.id), 'in chain order');
    },
  );
}

t.test("a person's stream: every approval of the org; roles and other orgs", async (t) => {
  const f = await feedHarness(t);
  const s = await f.stream(f.dev);
  t.teardown(() => s.close());
  t.equal(s.status, 200);
  const a = await f.ask('agent');
  const b = await f.ask('other');
  t.ok(await s.until((c) => c.events.length >= 2));
  t.same(
    s.events.map((e) => e.data.approval_id),
    [a, b],
  );

  const requester = await f.stream(f.requester);
  t.equal(requester.status, 403, 'a requester cannot read the org approvals');
  t.equal(requester.events[0]?.data.error.code, 'forbidden');
  const anonymous = await SseClient.open(`${f.h.url}/v1/me/approvals/stream`, 'gk_pat_nope');
  t.equal(anonymous.status, 401);

  // Another org's admin sees nothing of this org's approvals; a super_admin names the org.
  const org = await f.h.call('/api/orgs', { token: f.h.pat, body: { name: 'elsewhere' } });
  const user = await f.h.call('/api/users', {
    token: f.h.pat,
    body: { email: 'admin@elsewhere.test', role: 'admin', org_id: org.body.org_id },
  });
  const tok = await f.h.call('/api/tokens', { token: f.h.pat, body: { user_id: user.body.user_id } });
  const outsider = await f.stream(tok.body.token);
  t.teardown(() => outsider.close());
  const root = await f.stream(f.h.pat, {}, `?org_id=${org.body.org_id}`);
  t.teardown(() => root.close());
  t.equal(outsider.status, 200);
  t.equal(root.status, 200);
  const later = await f.ask('agent');
  t.ok(await s.until((c) => c.events.some((e) => e.data.approval_id === later)));
  await new Promise((r) => setTimeout(r, 200));
  t.same(outsider.events, [], "another org's admin hears nothing");
  t.same(root.events, [], 'nor a super_admin watching that org');
  const crossed = await f.stream(tok.body.token, {}, '?org_id=default');
  t.equal(crossed.status, 403, "an org admin cannot name another org's stream");
});

t.test('a reconnect with Last-Event-ID gets what it missed, once, in order', async (t) => {
  const f = await feedHarness(t);
  const first = await f.stream(f.agent.key);
  const a = await f.ask('agent');
  t.ok(await first.until((c) => c.events.length === 1));
  const lastId = first.events[0]?.id as string;
  first.close();
  await first.done;

  // While it is away: a decision on its approval, another agent's, and a new request of its own.
  await decide(f, a, 'deny');
  await decide(f, await f.ask('other'), 'approve');
  const b = await f.ask('agent');
  const again = await f.stream(f.agent.key, { 'last-event-id': lastId });
  t.teardown(() => again.close());
  t.ok(await again.until((c) => c.events.length >= 2));
  const c = await f.ask('agent');
  t.ok(await again.until((x) => x.events.length >= 3));
  await new Promise((r) => setTimeout(r, 200));
  t.same(
    again.events.map((e) => [e.event, e.data.approval_id]),
    [
      ['approval.decided', a],
      ['approval.created', b],
      ['approval.created', c],
    ],
    'the missed ones from the trail, then live, with no repeat',
  );
  const ids = again.events.map((e) => Number(e.id));
  t.ok(
    ids.every((id, i) => i === 0 || id > (ids[i - 1] as number)),
    'ids rise',
  );
  t.ok((ids[0] as number) > Number(lastId));

  // The query form, for a client that cannot set the header.
  const byQuery = await f.stream(f.agent.key, {}, `?last_event_id=${lastId}`);
  t.teardown(() => byQuery.close());
  t.ok(await byQuery.until((x) => x.events.length >= 3));
  t.same(
    byQuery.events.map((e) => e.data.approval_id),
    [a, b, c],
  );

  for (const bad of ['abc', '-1', '1.5']) {
    const r = await f.stream(f.agent.key, { 'last-event-id': bad });
    t.equal(r.status, 400, bad);
    t.equal(r.events[0]?.data.error.param, 'Last-Event-ID');
  }
});

t.test('too much missed: a resync event instead of the backlog; live updates follow', async (t) => {
  const f = await feedHarness(t, { replayMax: 3 });
  const first = await f.stream(f.agent.key);
  await f.ask('agent');
  t.ok(await first.until((c) => c.events.length === 1));
  const lastId = first.events[0]?.id as string;
  first.close();
  for (let i = 0; i < 4; i++) await f.ask('agent');
  const again = await f.stream(f.agent.key, { 'last-event-id': lastId });
  t.teardown(() => again.close());
  t.ok(await again.until((c) => c.events.length >= 1));
  t.equal(again.events[0]?.event, 'approval.resync');
  t.equal(again.events[0]?.id, undefined, 'a resync moves no id on');
  t.match(again.events[0]?.data.reason, /list the approvals again/);
  const live = await f.ask('agent');
  t.ok(await again.until((c) => c.events.length >= 2));
  t.same(
    again.events.slice(1).map((e) => e.data.approval_id),
    [live],
  );
});

t.test('a revoked credential: its stream ends before the next event, its long poll is refused', async (t) => {
  const f = await feedHarness(t);
  const s = await f.stream(f.agent.key);
  t.teardown(() => s.close());
  const seen = await f.ask('agent');
  t.ok(await s.until((c) => c.events.length === 1));
  const waiting = f.h.call(`/v1/me/approvals/${seen}/wait?timeout=3`, { token: f.agent.key });
  await new Promise((r) => setTimeout(r, 200));
  const revoked = await f.h.call(`/api/agents/${f.agent.uuid}/keys/${f.agent.keyId}`, {
    method: 'DELETE',
    token: f.h.pat,
  });
  t.equal(revoked.status, 200);
  const unseen = await f.ask('agent');
  await decide(f, seen, 'approve');
  await s.done;
  t.ok(s.ended, 'the stream ended');
  t.same(
    s.events.map((e) => e.data.approval_id),
    [seen],
    'nothing after the revocation reached it',
  );
  t.not(unseen, seen);
  const answer = await waiting;
  t.equal(answer.status, 401, 'the long poll answers nothing to a revoked key');
  t.equal(answer.body.error.code, 'unauthenticated');
});

t.test('a replay that cannot read the trail ends the stream and leaves nothing subscribed', async (t) => {
  const f = await feedHarness(t, { heartbeatMs: 20 }, 'uws', (log) => ({
    get: (org, id) => log.get(org, id),
    lastSeq: (org) => log.lastSeq(org),
    scanEvents: () => {
      throw new Error('the trail cannot be read');
    },
  }));
  const s = await f.stream(f.agent.key, { 'last-event-id': '1' });
  t.equal(s.status, 200, 'the stream had begun');
  await s.done;
  t.ok(s.ended, 'and it ends');
  t.equal(s.comments, 0, 'no heartbeat after it');
  t.equal(f.feed.streams, 0, 'nothing is left subscribed');
});

t.test("a Last-Event-ID past the trail's end: a resync, and no live event held back by it", async (t) => {
  const f = await feedHarness(t);
  await f.ask('agent');
  const s = await f.stream(f.agent.key, { 'last-event-id': '999999' });
  t.teardown(() => s.close());
  t.ok(await s.until((c) => c.events.length >= 1));
  t.equal(s.events[0]?.event, 'approval.resync');
  t.match(s.events[0]?.data.reason, /past the end of this org's trail/);
  const live = await f.ask('agent');
  t.ok(await s.until((c) => c.events.length >= 2), 'the next transition arrives');
  t.equal(s.events[1]?.data.approval_id, live);
});

t.test('heartbeats keep an idle stream alive; a bounded number of streams per org', async (t) => {
  const f = await feedHarness(t, { heartbeatMs: 50, maxStreamsPerOrg: 2 });
  const a = await f.stream(f.agent.key);
  const b = await f.stream(f.dev);
  t.teardown(() => {
    a.close();
    b.close();
  });
  t.ok(await a.until((c) => c.comments >= 3, 2000), 'comment lines while nothing happens');
  const third = await f.stream(f.dev);
  t.equal(third.status, 429);
  t.equal(third.events[0]?.data.error.code, 'rate_limited');
  a.close();
  await a.done;
  // The closed stream's place is free again once the server has seen it go.
  let again: SseClient | undefined;
  for (let i = 0; i < 50 && again?.status !== 200; i++) {
    again?.close();
    again = await f.stream(f.dev);
    if (again.status !== 200) await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(again?.status, 200);
  again?.close();
});

/**
 * Long polls have a bound of their own and take no stream's place: one agent key holding 300 of
 * them locked every approver out of the stream.
 */
t.test('long polls are bounded per org, and take no place from the streams', async (t) => {
  const f = await feedHarness(t, { maxStreamsPerOrg: 2, maxPollsPerOrg: 3 });
  const id = await f.ask('agent');
  const polls = [1, 2, 3].map(() =>
    f.h.call(`/v1/me/approvals/${id}/wait?timeout=5`, { token: f.agent.key }),
  );
  for (let i = 0; i < 100 && f.feed.polls < 3; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(f.feed.polls, 3, 'three long polls wait');
  const fourth = await f.h.call(`/v1/me/approvals/${id}/wait?timeout=5`, { token: f.agent.key });
  t.equal(fourth.status, 429, 'a fourth is refused');
  t.equal(fourth.body.error.code, 'rate_limited');
  const a = await f.stream(f.dev);
  const b = await f.stream(f.dev);
  t.teardown(() => {
    a.close();
    b.close();
  });
  t.same([a.status, b.status], [200, 200], 'the streams still open while the polls wait');
  await decide(f, id, 'approve');
  for (const p of await Promise.all(polls)) t.equal(p.body.status, 'approved');
});

t.test('the long poll: answers at the decision, at the timeout, or at once; deprecated', async (t) => {
  const f = await feedHarness(t);
  const id = await f.ask('agent');
  const url = (q: string) => `/v1/me/approvals/${id}/wait${q}`;
  const started = Date.now();
  const waiting = f.h.call(url('?timeout=10'), { token: f.agent.key });
  await new Promise((r) => setTimeout(r, 300));
  await decide(f, id, 'approve');
  const answered = await waiting;
  t.equal(answered.status, 200);
  t.equal(answered.body.status, 'approved');
  t.ok(Date.now() - started < 5000, 'at the decision, not the timeout');
  t.match(answered.headers.get('deprecation'), /^@\d+$/);
  t.match(
    answered.headers.get('link'),
    /<http:\/\/govgate\.test\/v1\/me\/approvals\/stream>; rel="successor-version"/,
  );

  const decidedAlready = await f.h.call(url(''), { token: f.agent.key });
  t.equal(decidedAlready.body.status, 'approved', 'no longer pending: at once');

  const pending = await f.ask('agent');
  const t0 = Date.now();
  const timedOut = await f.h.call(`/v1/me/approvals/${pending}/wait?timeout=1`, { token: f.agent.key });
  t.equal(timedOut.body.status, 'pending');
  t.ok(Date.now() - t0 >= 900, 'held for the timeout');
  const now = await f.h.call(`/v1/me/approvals/${pending}/wait?timeout=0`, { token: f.dev });
  t.equal(now.body.status, 'pending', 'timeout=0 answers at once; a person may wait too');

  const theirs = await f.ask('other');
  const hidden = await f.h.call(`/v1/me/approvals/${theirs}/wait?timeout=0`, { token: f.agent.key });
  t.equal(hidden.status, 404, "another agent's approval is missing to this agent");
  for (const bad of ['61', '-1', 'x', '1.5']) {
    const r = await f.h.call(`/v1/me/approvals/${pending}/wait?timeout=${bad}`, { token: f.agent.key });
    t.equal(r.status, 400, bad);
    t.equal(r.body.error.param, 'timeout');
  }
  t.equal((await f.h.call(`/v1/me/approvals/${pending}/wait`, { token: f.requester })).status, 403);
});

t.test(
  'the whole service: govern asks, a person approves, the agent hears it; a stop ends streams',
  async (t) => {
    const svc = await startService();
    let open = true;
    t.teardown(async () => {
      if (open) await svc.close();
    });
    await publishOrgPolicy(svc, 'transfers', {
      rules: [
        {
          id: 'big-transfers',
          when: { type: 'TOOL_CALL', tool: 'payments.transfer' },
          then: 'require_approval',
          reason: 'transfers need a person',
        },
      ],
    });
    const stream = await SseClient.open(`${svc.url}/v1/me/approvals/stream`, svc.agentKey);
    t.equal(stream.status, 200);
    const metrics = await svc.call('/api/metrics');
    t.match(String(metrics.body), /^govgate_approval_streams 1$/m, 'the gauge counts it');
    const action = { type: 'TOOL_CALL', payload: { tool: 'payments.transfer', args: { amount: 5 } } };
    const asked = await svc.call('/v1/govern', { token: svc.agentKey, body: action });
    t.equal(asked.body.outcome, 'needs_approval');
    const id = asked.body.approval.request_id as string;
    t.ok(await stream.until((c) => c.events.some((e) => e.event === 'approval.created')));
    await svc.call(`/v1/me/approvals/${id}/decide`, { token: svc.pat, body: { decision: 'approve' } });
    t.ok(await stream.until((c) => c.events.some((e) => e.event === 'approval.decided')));
    t.equal((await svc.call('/v1/govern', { token: svc.agentKey, body: action })).body.outcome, 'allow');
    t.ok(await stream.until((c) => c.events.some((e) => e.event === 'approval.consumed')));
    t.same(
      stream.events.map((e) => [e.event, e.data.approval_id]),
      [
        ['approval.created', id],
        ['approval.decided', id],
        ['approval.consumed', id],
      ],
    );

    // A stop does not wait on open streams or long polls: they end at once and the drain goes on.
    const again = await svc.call('/v1/govern', {
      token: svc.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool: 'payments.transfer', args: { amount: 6 } } },
    });
    const second = again.body.approval.request_id as string;
    const waiting = svc.call(`/v1/me/approvals/${second}/wait?timeout=30`, { token: svc.agentKey });
    await new Promise((r) => setTimeout(r, 200));
    const stopStarted = Date.now();
    open = false;
    await svc.close();
    await stream.done;
    t.ok(stream.ended, 'the stream ended');
    t.ok(Date.now() - stopStarted < 1500, 'without holding the drain to its end');
    const answered = await waiting;
    t.equal(answered.status, 200, 'a long poll is answered as it stands');
    t.equal(answered.body.status, 'pending');
  },
);
