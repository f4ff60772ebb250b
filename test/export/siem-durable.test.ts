import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startReceiver } from '../helpers/receiver.js';
import { createOrg, startService, type TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

// The SIEM export reads the org chains from a cursor it keeps in the store: a receiver that is
// down, a batch that fails, a restart in between lose nothing, and nothing is sent twice.

t.test(
  'nothing is lost when the receiver is down, across a restart, and nothing is sent twice',
  async (t) => {
    const hook = await startReceiver();
    t.teardown(() => hook.close());
    const start = (dataDir?: string) =>
      startService({
        env: { SERVICE_EGRESS_ALLOW: `127.0.0.1:${hook.port}` },
        ...(dataDir ? { dataDir } : {}),
      });
    let svc: TestService = await start();
    t.teardown(() => svc.close());
    // The first start's secrets: a restart on the same data dir makes none.
    const { pat, agentKey } = svc;
    const set = await svc.call('/api/settings/siem', {
      method: 'PUT',
      token: pat,
      body: {
        destination: 'webhook',
        url: `http://127.0.0.1:${hook.port}/siem`,
        auth_token: 'durable-token-1',
        buffer_size: 5,
        flush_interval_seconds: 1,
        max_retries: 0,
        retry_backoff_seconds: 0,
        event_types: ['llm_call'],
      },
    });
    t.equal(set.status, 200, JSON.stringify(set.body));
    const chat = (s: TestService, content: string, token = agentKey) =>
      s.call('/v1/chat/completions', {
        token,
        body: { model: 'mock-echo', messages: [{ role: 'user', content }] },
      });
    const exported = () =>
      hook.posts.flatMap((p) => (p.body?.events ?? []) as Array<{ id: string; seq: number; org_id: string }>);
    const stats = async (s: TestService) => (await s.call('/api/settings/siem/stats', { token: pat })).body;

    // Five calls exported while the receiver takes them (one full batch).
    for (let i = 0; i < 5; i++) t.equal((await chat(svc, `early ${i}`)).status, 200);
    await waitFor(() => exported().length === 5, 'the first batch');

    // The receiver refuses everything for a while: the calls go on, the export waits.
    hook.fail(1_000_000, 503);
    for (let i = 0; i < 12; i++) t.equal((await chat(svc, `call ${i}`)).status, 200);
    for (let i = 0; i < 100 && (await stats(svc)).failed_batches < 1; i++) await sleep(50);
    const waiting = await stats(svc);
    t.ok(waiting.failed_batches >= 1, 'batches failed');
    t.ok(waiting.queued >= 12, `${waiting.queued} events wait`);
    t.equal(waiting.dropped_events, 0, 'none dropped');
    t.equal(exported().length, 5, 'only the first batch went');

    // A restart while they wait; two more calls after it.
    await svc.close(true);
    svc = await start(svc.dataDir);
    for (let i = 12; i < 14; i++) t.equal((await chat(svc, `call ${i}`)).status, 200);
    // A new org's chain is read from its first event.
    const other = await createOrg({ ...svc, pat }, 'late-org', { mock: true });
    t.equal((await chat(svc, 'from the new org', other.agentKey)).status, 200);

    // The receiver is back: everything arrives, in order, once.
    hook.fail(0);
    await waitFor(() => exported().length >= 20, 'the backlog exported', 20_000);
    await sleep(1_500); // anything sent twice would have arrived by now
    const got = exported();
    const mine = got.filter((e) => e.org_id === 'default');
    t.equal(mine.length, 19, 'every call of the default org, once');
    t.same(
      mine.map((e) => e.seq),
      [...mine.map((e) => e.seq)].sort((a, b) => a - b),
      'in chain order',
    );
    t.equal(new Set(got.map((e) => e.id)).size, got.length, 'no event twice');
    t.equal(got.filter((e) => e.org_id === other.orgId).length, 1, "the new org's call");
    const after = await stats(svc);
    t.equal(after.queued, 0, 'nothing waits');
    t.equal(after.dropped_events, 0);
  },
);
