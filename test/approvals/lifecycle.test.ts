import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type { Test } from 'tap';
import t from 'tap';
import {
  type ApprovalRecord,
  ApprovalStore,
  type CreateApprovalInput,
  MAX_LIVE_PER_AGENT,
  registerApprovalRoutes,
} from '../../src/approvals/index.js';
import type { AuditInput, AuditRef, AuditSink } from '../../src/audit/types.js';
import type { Principal } from '../../src/identity/types.js';
import { openStore, type Store } from '../../src/store/db.js';
import { startCoreHarness } from '../helpers/core-harness.js';
import { tempDir } from '../helpers/tmp.js';

const MIN = 60_000;
const T0 = Date.parse('2030-01-01T00:00:00.000Z');

/** An audit sink that keeps what it is given, in order. */
class RecordingSink implements AuditSink {
  readonly events: AuditInput[] = [];
  append(input: AuditInput): Promise<AuditRef> {
    this.events.push(input);
    return Promise.resolve({ id: `ae_${this.events.length}`, seq: this.events.length });
  }
  types(): string[] {
    return this.events.map((e) => e.event_type);
  }
}

function tempStore(t: Test): Store {
  const dir = tempDir('govgate-appr-');
  const store = openStore(dir);
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return store;
}

function setup(t: Test): {
  store: Store;
  sink: RecordingSink;
  approvals: ApprovalStore;
  clock: { now: number };
} {
  const store = tempStore(t);
  const sink = new RecordingSink();
  const clock = { now: T0 };
  return { store, sink, approvals: new ApprovalStore(store, sink, () => clock.now), clock };
}

const user = (id: string, role: Principal['role'], org = 'org_a'): Principal => ({
  kind: 'user',
  id,
  org_id: org,
  role,
  agent_id: null,
  credential_id: `tok_${id}`,
  email: `${id}@example.test`,
});
const agent = (uuid: string, org = 'org_a'): Principal => ({
  kind: 'agent',
  id: uuid,
  org_id: org,
  role: null,
  agent_id: `name-${uuid}`,
  credential_id: `key_${uuid}`,
  email: null,
});

const DEV = user('usr_dev', 'developer');
const AUDITOR = user('usr_aud', 'auditor');
const REQUESTER = user('usr_req', 'requester');
const ADMIN = user('usr_adm', 'org_admin');
const OTHER_DEV = user('usr_dev_b', 'developer', 'org_b');
const AGENT = agent('agent-1');
const AGENT2 = agent('agent-2');

function input(over: Partial<CreateApprovalInput> = {}): CreateApprovalInput {
  return {
    org_id: 'org_a',
    agent_id: 'name-agent-1',
    agent_uuid: 'agent-1',
    fingerprint: 'a'.repeat(64),
    tier: 'standard',
    summary: 'transfers over 1000 need an approval',
    matched_rule: 'big-transfers',
    pipeline_id: 'pl_1',
    behavior_type: 'TOOL_CALL',
    tool: 'payments.transfer',
    ...over,
  };
}

async function rejects(
  t: Test,
  p: Promise<unknown>,
  code: string,
  status: number,
  msg: string,
): Promise<void> {
  await t.rejects(p, { code, status }, msg);
}

t.test('store: create, fields and default expiry', async (t) => {
  const { approvals, sink } = setup(t);
  const rec = await approvals.create(input());
  t.match(rec.id, /^apr_[A-Za-z0-9]{20}$/);
  t.same(
    { ...rec, id: '' },
    {
      id: '',
      org_id: 'org_a',
      agent_id: 'name-agent-1',
      agent_uuid: 'agent-1',
      status: 'pending',
      tier: 'standard',
      fingerprint: 'a'.repeat(64),
      summary: 'transfers over 1000 need an approval',
      matched_rule: 'big-transfers',
      pipeline_id: 'pl_1',
      behavior_type: 'TOOL_CALL',
      tool: 'payments.transfer',
      credential_id: null,
      created_at: '2030-01-01T00:00:00.000Z',
      expires_at: '2030-01-01T00:15:00.000Z',
      decided_by: null,
      decided_at: null,
      reason: null,
    },
  );
  const custom = await approvals.create(input({ fingerprint: 'b'.repeat(64), ttl_ms: 2 * MIN }));
  t.equal(custom.expires_at, '2030-01-01T00:02:00.000Z', 'ttl_ms is honoured');
  t.same(sink.types(), ['approval.created', 'approval.created']);
  const ev = sink.events[0] as AuditInput;
  t.equal(ev.org_id, 'org_a');
  t.equal(ev.agent_id, 'name-agent-1');
  t.equal(ev.pipeline_id, 'pl_1');
  t.equal(ev.outcome, 'pending');
  t.equal(ev.rule_id, 'big-transfers');
  t.match(ev.details, {
    approval_id: rec.id,
    fingerprint: 'a'.repeat(64),
    tier: 'standard',
    status: 'pending',
    matched_rule: 'big-transfers',
  });
});

t.test('store: the identical blocked call does not create a second pending approval', async (t) => {
  const { approvals, sink, clock } = setup(t);
  const first = await approvals.create(input());
  const again = await approvals.create(input({ pipeline_id: 'pl_2' }));
  t.equal(again.id, first.id, 'retry returns the pending one');
  const [c1, c2] = await Promise.all([
    approvals.create(input({ fingerprint: 'c'.repeat(64) })),
    approvals.create(input({ fingerprint: 'c'.repeat(64) })),
  ]);
  t.equal(c1.id, c2.id, 'two concurrent identical requests share one approval');
  const otherFp = await approvals.create(input({ fingerprint: 'd'.repeat(64) }));
  const otherAgent = await approvals.create(input({ agent_uuid: 'agent-2', agent_id: 'name-agent-2' }));
  const otherOrg = await approvals.create(input({ org_id: 'org_b' }));
  const signed = await approvals.create(input({ tier: 'signed' }));
  const ids = new Set([first.id, c1.id, otherFp.id, otherAgent.id, otherOrg.id, signed.id]);
  t.equal(ids.size, 6, 'another action, agent, org or tier is another approval');
  t.equal(sink.types().filter((x) => x === 'approval.created').length, 6, 'one created event each');

  clock.now += 15 * MIN;
  const fresh = await approvals.create(input());
  t.not(fresh.id, first.id, 'an expired request is not reused');
  t.equal((await approvals.get(first.id, 'org_a'))?.status, 'expired');
  t.ok(sink.types().includes('approval.expired'), 'the expiry found on the way is audited');
});

t.test('store: an approved action is allowed exactly once', async (t) => {
  const { approvals, sink } = setup(t);
  const rec = await approvals.create(input());
  t.equal(approvals.consume('org_a', 'agent-1', rec.fingerprint), undefined, 'pending: nothing');
  const approved = await approvals.decide(rec.id, DEV, 'approve', 'looks fine');
  t.match(approved, {
    status: 'approved',
    decided_by: 'usr_dev',
    decided_at: '2030-01-01T00:00:00.000Z',
    reason: 'looks fine',
  });
  t.equal(approvals.consume('org_a', 'agent-2', rec.fingerprint), undefined, 'another agent: nothing');
  t.equal(approvals.consume('org_b', 'agent-1', rec.fingerprint), undefined, 'another org: nothing');
  t.equal(approvals.consume('org_a', 'agent-1', 'f'.repeat(64)), undefined, 'another action: nothing');
  const used = approvals.consume('org_a', 'agent-1', rec.fingerprint, { pipelineId: 'pl_9' });
  t.equal(used?.id, rec.id);
  t.equal(used?.status, 'consumed');
  t.equal(approvals.consume('org_a', 'agent-1', rec.fingerprint), undefined, 'not a second time');
  t.equal((await approvals.get(rec.id, 'org_a'))?.status, 'consumed');
  const consumed = sink.events.find((e) => e.event_type === 'approval.consumed');
  t.equal(consumed?.pipeline_id, 'pl_9', 'the consuming call is recorded');
  t.equal(consumed?.details?.request_pipeline_id, 'pl_1', 'and the call that asked');
  await rejects(t, approvals.revoke(rec.id, DEV), 'approval_not_pending', 409, 'consumed cannot be revoked');
});

t.test('store: a consume asked again with its id gets what it spent, once, until expiry', async (t) => {
  const { approvals, sink, clock } = setup(t);
  const first = await approvals.create(input());
  await approvals.decide(first.id, DEV, 'approve');
  const again = (id: string) => approvals.consume('org_a', 'agent-1', first.fingerprint, { consumeId: id });
  t.equal(again('consume-aaaaaaaaaaaa')?.id, first.id, 'spent under its id');
  t.equal(again('consume-aaaaaaaaaaaa')?.id, first.id, 'the same id gets it again');
  t.equal(again('consume-bbbbbbbbbbbb'), undefined, 'another id gets nothing: it is spent');
  t.equal(approvals.consume('org_a', 'agent-1', first.fingerprint), undefined, 'nor does a call without one');
  t.equal(
    approvals.consume('org_a', 'agent-2', first.fingerprint, { consumeId: 'consume-aaaaaaaaaaaa' }),
    undefined,
    "another agent's call with the id gets nothing",
  );
  t.equal(sink.types().filter((e) => e === 'approval.consumed').length, 1, 'one consumed event');
  // A second approval of the action: the id that spent the first does not spend it too.
  const second = await approvals.create(input());
  await approvals.decide(second.id, DEV, 'approve');
  t.equal(again('consume-aaaaaaaaaaaa')?.id, first.id, 'still the first');
  t.equal((await approvals.get(second.id, 'org_a'))?.status, 'approved', 'the second stays unspent');
  t.equal(
    approvals.consume('org_a', 'agent-1', first.fingerprint, {
      consumeId: 'consume-aaaaaaaaaaaa',
      minTier: 'signed',
    })?.id,
    undefined,
    'a rule that now asks for a signed approval is not met by the standard one it spent',
  );
  t.equal(
    (await approvals.get(second.id, 'org_a'))?.status,
    'approved',
    'nor by the standard one still live',
  );
  clock.now = Date.parse(first.expires_at);
  t.equal(again('consume-aaaaaaaaaaaa'), undefined, 'past its expiry the spent approval allows nothing');
});

t.test(
  "store: pruneBefore deletes the org's approvals that are over and older than the cutoff",
  async (t) => {
    const { approvals, clock } = setup(t);
    const fp = (c: string) => c.repeat(64);
    const denied = await approvals.create(input({ fingerprint: fp('1') }));
    await approvals.decide(denied.id, DEV, 'deny');
    const consumed = await approvals.create(input({ fingerprint: fp('2') }));
    await approvals.decide(consumed.id, DEV, 'approve');
    t.equal(
      approvals.consume('org_a', 'agent-1', fp('2'), { consumeId: 'consume-cccccccccccc' })?.id,
      consumed.id,
    );
    const pending = await approvals.create(input({ fingerprint: fp('3'), ttl_ms: 600 * MIN }));
    const otherOrg = await approvals.create(input({ org_id: 'org_b', fingerprint: fp('4') }));
    await approvals.decide(otherOrg.id, user('usr_dev_b', 'developer', 'org_b'), 'deny');
    clock.now += 30 * MIN;
    const cutoff = clock.now;
    const recent = await approvals.create(input({ fingerprint: fp('5') }));
    await approvals.decide(recent.id, DEV, 'deny');

    t.equal(await approvals.pruneBefore('org_a', cutoff), 2, 'the denied and the consumed one');
    t.equal(await approvals.get(denied.id, 'org_a'), undefined);
    t.equal(await approvals.get(consumed.id, 'org_a'), undefined);
    t.equal((await approvals.get(pending.id, 'org_a'))?.status, 'pending', 'a live one stays');
    t.equal((await approvals.get(recent.id, 'org_a'))?.status, 'denied', 'a newer one stays');
    t.equal((await approvals.get(otherOrg.id, 'org_b'))?.status, 'denied', "another org's stays");
    t.equal(
      approvals.consume('org_a', 'agent-1', fp('2'), { consumeId: 'consume-cccccccccccc' }),
      undefined,
      'the consume id went with the approval it spent',
    );
    const listed = await approvals.list('org_a', { limit: 100 });
    t.same(listed.data.map((r) => r.id).sort(), [pending.id, recent.id].sort(), 'the listing agrees');
    t.equal(await approvals.pruneBefore('org_a', cutoff), 0, 'a second run finds nothing');
  },
);

t.test('store: two identical calls back to back cannot both consume one approval', async (t) => {
  const { store, sink, approvals } = setup(t);
  const rec = await approvals.create(input());
  await approvals.decide(rec.id, DEV, 'approve');
  // Two store instances over one environment, as two handlers would hold.
  const other = new ApprovalStore(store, sink);
  const results = [
    approvals.consume('org_a', 'agent-1', rec.fingerprint),
    other.consume('org_a', 'agent-1', rec.fingerprint),
  ];
  t.equal(results.filter((r) => r !== undefined).length, 1, 'exactly one is allowed');
  await new Promise((r) => setImmediate(r));
  t.equal(sink.types().filter((x) => x === 'approval.consumed').length, 1, 'one consumed event');
});

/** Runs in a worker thread: consumes each fingerprint once it is released; posts those it won. */
const RACER = `
const { workerData, parentPort } = require('node:worker_threads');
(async () => {
  const { openStore } = await import(workerData.dbUrl);
  const { ApprovalStore } = await import(workerData.storeUrl);
  const store = openStore(workerData.dir);
  const approvals = new ApprovalStore(store, { append: async () => ({ id: 'ae_x', seq: 0 }) });
  const gate = new Int32Array(workerData.gate);
  Atomics.add(gate, 1, 1);
  Atomics.wait(gate, 0, 0);
  const won = [];
  for (const fp of workerData.fps) {
    if (approvals.consume('org_a', 'agent-1', fp) !== undefined) won.push(fp);
  }
  await store.close();
  parentPort.postMessage(won);
})();
`;

t.test('store: two threads racing over the same approvals consume each exactly once', async (t) => {
  const dir = tempDir('govgate-appr-race-');
  const store = openStore(dir);
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const approvals = new ApprovalStore(store, new RecordingSink());
  const fps: string[] = [];
  for (let i = 0; i < 200; i++) {
    const fp = i.toString(16).padStart(64, '0');
    fps.push(fp);
    const rec = await approvals.create(input({ fingerprint: fp }));
    await approvals.decide(rec.id, DEV, 'approve');
  }
  const gate = new SharedArrayBuffer(8);
  const flags = new Int32Array(gate);
  const workerData = {
    dir,
    fps,
    gate,
    dbUrl: new URL('../../src/store/db.js', import.meta.url).href,
    storeUrl: new URL('../../src/approvals/store.js', import.meta.url).href,
  };
  const racers = [0, 1].map(() => new Worker(RACER, { eval: true, workerData }));
  const results = racers.map(
    (w) =>
      new Promise<string[]>((resolve, reject) => {
        w.once('message', resolve);
        w.once('error', reject);
      }),
  );
  while (Atomics.load(flags, 1) < 2) await new Promise((r) => setTimeout(r, 5));
  Atomics.store(flags, 0, 1);
  Atomics.notify(flags, 0);
  const [a, b] = await Promise.all(results);
  const won = [...(a ?? []), ...(b ?? [])];
  t.equal(won.length, fps.length, 'every approval was used, none twice');
  t.same(new Set(won).size, fps.length);
  for (const fp of fps.slice(0, 3)) {
    const rec = approvals.consume('org_a', 'agent-1', fp);
    t.equal(rec, undefined, 'nothing left to consume');
  }
});

t.test('store: a rule asking for a signed approval accepts only a signed one', async (t) => {
  const { approvals } = setup(t);
  const pre = await approvals.preApprove(input(), DEV);
  t.equal(pre.tier, 'standard');
  t.equal(
    approvals.consume('org_a', 'agent-1', pre.fingerprint, { minTier: 'signed' }),
    undefined,
    'standard does not satisfy signed',
  );
  t.equal(approvals.consume('org_a', 'agent-1', pre.fingerprint)?.id, pre.id, 'standard satisfies standard');
});

t.test('store: expiry is lazy and follows the injected clock', async (t) => {
  const { approvals, sink, clock } = setup(t);
  const pending = await approvals.create(input());
  const approved = await approvals.create(input({ fingerprint: 'b'.repeat(64) }));
  await approvals.decide(approved.id, DEV, 'approve');
  clock.now += 15 * MIN - 1;
  t.equal((await approvals.pendingFor(DEV)).length, 1, 'one ms before expiry it is still pending');
  t.equal((await approvals.get(pending.id, 'org_a'))?.status, 'pending');
  clock.now += 1;
  const before = sink.events.length;
  t.same(await approvals.pendingFor(DEV), [], 'at expires_at it is no longer listed');
  t.same(await approvals.pendingFor(AGENT), []);
  t.equal((await approvals.get(pending.id, 'org_a'))?.status, 'expired', 'read as expired');
  t.equal(
    approvals.consume('org_a', 'agent-1', approved.fingerprint),
    undefined,
    'an expired approval allows nothing',
  );
  t.equal((await approvals.get(approved.id, 'org_a'))?.status, 'expired');
  const expired = sink.events.slice(before).filter((e) => e.event_type === 'approval.expired');
  t.same(expired.map((e) => e.details?.approval_id).sort(), [pending.id, approved.id].sort(), 'each once');
  await rejects(t, approvals.decide(pending.id, DEV, 'approve'), 'approval_not_pending', 409, 'too late');
  await rejects(t, approvals.revoke(approved.id, DEV), 'approval_not_pending', 409, 'nothing to revoke');
  t.equal(sink.events.slice(before).length, 2, 'no event for refused transitions');
});

t.test('store: decide on a due approval persists the expiry even though it refuses', async (t) => {
  const { approvals, sink, clock } = setup(t);
  const rec = await approvals.create(input());
  clock.now += 16 * MIN;
  await rejects(t, approvals.decide(rec.id, DEV, 'approve'), 'approval_not_pending', 409, 'expired');
  t.equal(sink.types().at(-1), 'approval.expired');
  t.equal((await approvals.list('org_a', { status: 'expired', limit: 10 })).data[0]?.id, rec.id);
});

t.test('store: sweepExpired expires due approvals of every org', async (t) => {
  const { approvals, clock } = setup(t);
  const a = await approvals.create(input());
  const b = await approvals.create(input({ org_id: 'org_b' }));
  const later = await approvals.create(input({ fingerprint: 'b'.repeat(64), ttl_ms: 60 * MIN }));
  clock.now += 20 * MIN;
  t.equal(await approvals.sweepExpired(), 2);
  t.equal((await approvals.get(a.id, 'org_a'))?.status, 'expired');
  t.equal((await approvals.get(b.id, 'org_b'))?.status, 'expired');
  t.equal((await approvals.get(later.id, 'org_a'))?.status, 'pending');
  t.equal(await approvals.sweepExpired(), 0, 'nothing twice');
});

t.test('store: who may decide, cancel and revoke', async (t) => {
  const { approvals, sink } = setup(t);
  const rec = await approvals.create(input());
  await rejects(t, approvals.decide(rec.id, AGENT, 'approve'), 'forbidden', 403, 'the agent itself');
  await rejects(t, approvals.decide(rec.id, AGENT2, 'approve'), 'forbidden', 403, 'another agent');
  await rejects(t, approvals.decide(rec.id, AUDITOR, 'approve'), 'forbidden', 403, 'auditor');
  await rejects(t, approvals.decide(rec.id, REQUESTER, 'deny'), 'forbidden', 403, 'requester');
  await rejects(t, approvals.decide(rec.id, OTHER_DEV, 'approve'), 'not_found', 404, 'another org');
  await rejects(t, approvals.decide('apr_missing', DEV, 'approve'), 'not_found', 404, 'missing');
  await rejects(t, approvals.cancel(rec.id, AGENT2), 'not_found', 404, 'another agent cannot cancel');
  await rejects(t, approvals.cancel(rec.id, AUDITOR), 'forbidden', 403, 'auditor cannot cancel');
  t.same(sink.types(), ['approval.created'], 'refusals change nothing');

  const denied = await approvals.decide(rec.id, DEV, 'deny', 'no');
  t.match(denied, { status: 'denied', decided_by: 'usr_dev', reason: 'no' });
  await rejects(t, approvals.decide(rec.id, DEV, 'approve'), 'approval_not_pending', 409, 'decided twice');
  await rejects(t, approvals.cancel(rec.id, AGENT), 'approval_not_pending', 409, 'cancel after deny');
  t.equal(approvals.consume('org_a', 'agent-1', rec.fingerprint), undefined, 'denied allows nothing');

  const mine = await approvals.create(input({ fingerprint: 'b'.repeat(64) }));
  t.match(await approvals.cancel(mine.id, AGENT), { status: 'cancelled', decided_by: 'agent-1' });
  const byHuman = await approvals.create(input({ fingerprint: 'c'.repeat(64) }));
  t.match(await approvals.cancel(byHuman.id, DEV, 'duplicate'), { status: 'cancelled', reason: 'duplicate' });

  const granted = await approvals.create(input({ fingerprint: 'd'.repeat(64) }));
  await rejects(t, approvals.revoke(granted.id, DEV), 'approval_not_pending', 409, 'pending: not revocable');
  await approvals.decide(granted.id, DEV, 'approve');
  await rejects(t, approvals.revoke(granted.id, AGENT), 'forbidden', 403, 'an agent cannot revoke');
  await rejects(t, approvals.revoke(granted.id, AUDITOR), 'forbidden', 403, 'an auditor cannot revoke');
  t.match(await approvals.revoke(granted.id, ADMIN), { status: 'revoked', decided_by: 'usr_adm' });
  t.equal(approvals.consume('org_a', 'agent-1', granted.fingerprint), undefined, 'revoked allows nothing');

  t.same(sink.types(), [
    'approval.created',
    'approval.decided',
    'approval.created',
    'approval.cancelled',
    'approval.created',
    'approval.cancelled',
    'approval.created',
    'approval.decided',
    'approval.revoked',
  ]);
  const statuses = sink.events.map((e) => e.details?.status);
  t.same(statuses, [
    'pending',
    'denied',
    'pending',
    'cancelled',
    'pending',
    'cancelled',
    'pending',
    'approved',
    'revoked',
  ]);
  const decided = sink.events[1] as AuditInput;
  t.match(decided.details, { actor: 'usr_dev', actor_kind: 'user', approval_id: rec.id, tier: 'standard' });
  t.equal(decided.details?.credential_id, 'tok_usr_dev', 'and the token it used');
  t.equal(decided.reason, null, 'what the decider wrote is not in the hashed reason');
  t.same(decided.personal, { reason: 'no' }, 'but in a personal field, which an erasure reaches');
  t.equal(sink.events[3]?.details?.actor_kind, 'agent');
});

t.test('store: a signed-tier approval cannot be decided without WebAuthn', async (t) => {
  const { approvals } = setup(t);
  const rec = await approvals.create(input({ tier: 'signed' }));
  await rejects(t, approvals.decide(rec.id, DEV, 'approve'), 'webauthn_required', 403, 'approve');
  await rejects(t, approvals.decide(rec.id, ADMIN, 'deny'), 'webauthn_required', 403, 'deny');
  t.equal((await approvals.get(rec.id, 'org_a'))?.status, 'pending', 'still pending');
  t.match(await approvals.cancel(rec.id, AGENT), { status: 'cancelled' }, 'its agent can still cancel it');
});

t.test('store: pre-approval', async (t) => {
  const { approvals, sink } = setup(t);
  await rejects(t, approvals.preApprove(input(), AGENT), 'forbidden', 403, 'not by an agent');
  await rejects(t, approvals.preApprove(input(), AUDITOR), 'forbidden', 403, 'not by an auditor');
  await rejects(t, approvals.preApprove(input(), OTHER_DEV), 'forbidden', 403, 'not for another org');
  t.same(sink.types(), []);

  const pre = await approvals.preApprove(input(), DEV);
  t.match(pre, { status: 'approved', decided_by: 'usr_dev', tier: 'standard' });
  t.equal((await approvals.preApprove(input(), ADMIN)).id, pre.id, 'the same action twice is one approval');
  t.match(sink.events[0], {
    event_type: 'approval.created',
    outcome: 'approved',
    details: { preapproved: true, actor: 'usr_dev', status: 'approved' },
  });

  const asked = await approvals.create(input({ fingerprint: 'b'.repeat(64) }));
  const granted = await approvals.preApprove(input({ fingerprint: 'b'.repeat(64) }), DEV);
  t.equal(granted.id, asked.id, 'a pending request of the action is approved');
  t.equal(granted.status, 'approved');
  t.equal(sink.types().at(-1), 'approval.decided');
  t.equal(approvals.consume('org_a', 'agent-1', 'b'.repeat(64))?.id, asked.id);
});

t.test('store: pending lists per caller and the org listing', async (t) => {
  const { approvals, clock } = setup(t);
  const made: ApprovalRecord[] = [];
  for (let i = 0; i < 5; i++) {
    made.push(await approvals.create(input({ fingerprint: String(i).repeat(64) })));
    clock.now += 1000;
  }
  const second = await approvals.create(input({ agent_uuid: 'agent-2', fingerprint: '9'.repeat(64) }));
  await approvals.create(input({ org_id: 'org_b' }));
  await approvals.decide((made[0] as ApprovalRecord).id, DEV, 'approve');

  const mine = await approvals.pendingFor(AGENT);
  t.same(
    mine.map((r) => r.id),
    made.slice(1).map((r) => r.id),
    'an agent sees its own pending requests only',
  );
  t.same(
    (await approvals.pendingFor(AGENT2)).map((r) => r.id),
    [second.id],
  );
  const dev = await approvals.pendingFor(DEV);
  t.same(dev.map((r) => r.id).sort(), [...made.slice(1).map((r) => r.id), second.id].sort(), 'the org');
  t.same(await approvals.pendingFor(AUDITOR), [], 'an auditor decides nothing');
  t.same(await approvals.pendingFor(REQUESTER), []);

  const all = await approvals.list('org_a', { limit: 100 });
  t.equal(all.data.length, 6);
  t.equal(all.data[0]?.id, second.id, 'newest first');
  t.equal(all.next_cursor, null);
  const approvedOnly = await approvals.list('org_a', { status: 'approved', limit: 100 });
  t.same(
    approvedOnly.data.map((r) => r.id),
    [(made[0] as ApprovalRecord).id],
  );
  const seen: string[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page = await approvals.list('org_a', { limit: 4, ...(cursor ? { cursor } : {}) });
    seen.push(...page.data.map((r) => r.id));
    cursor = page.next_cursor ?? undefined;
    pages++;
  } while (cursor !== undefined && pages < 10);
  t.equal(pages, 2);
  t.same(
    seen,
    all.data.map((r) => r.id),
    'pages cover the list once, in order',
  );
  await t.rejects(approvals.list('org_a', { limit: 1, cursor: 'nope' }), { code: 'invalid_request' });
});

// ---- over HTTP

interface Res {
  status: number;
  body: any;
}

t.test('http: the approval routes', async (t) => {
  let made: ApprovalStore | undefined;
  const h = await startCoreHarness({
    prefix: 'appr-http',
    register: ({ store, snapshot, router, orgExists }, audit) => {
      made = new ApprovalStore(store, audit);
      registerApprovalRoutes(router, { snapshot, approvals: made, orgExists });
    },
  });
  t.teardown(() => h.close());
  const approvals = made as ApprovalStore;
  const identity = h.parts.identity;
  const call = async (path: string, token: string, body?: unknown): Promise<Res> => {
    const res = await h.call(path, { token, body });
    return { status: res.status, body: JSON.parse(res.text) };
  };
  const root = h.pat;
  const defaultAgentKey = h.agentKey;
  const defaultAgent = identity.getAgentByName('default', 'default-agent');
  if (!defaultAgent) throw new Error('bootstrap made no agent');

  const patFor = async (role: string, orgId?: string): Promise<{ token: string; userId: string }> => {
    const u = await call('/api/users', root, {
      email: `${role}-${orgId ?? 'default'}@example.test`,
      role,
      ...(orgId ? { org_id: orgId } : {}),
    });
    t.equal(u.status, 201, `user ${role} created`);
    const tok = await call('/api/tokens', root, { user_id: u.body.user_id });
    t.equal(tok.status, 201, `token ${role} created`);
    return { token: tok.body.token, userId: u.body.user_id };
  };
  const dev = await patFor('developer');
  const auditor = await patFor('auditor');
  const requester = await patFor('requester');
  const second = await call('/api/agents/onboard', dev.token, { agent_id: 'second-agent' });
  t.equal(second.status, 201);
  const secondKey = second.body.api_key.api_key as string;
  const org = await call('/api/orgs', root, { name: 'other' });
  const otherDev = await patFor('developer', org.body.org_id);
  const otherAgent = await call('/api/agents/onboard', otherDev.token, { agent_id: 'other-agent' });

  const ask = (over: Partial<CreateApprovalInput> = {}): Promise<ApprovalRecord> =>
    approvals.create({
      org_id: 'default',
      agent_id: defaultAgent.agent_id,
      agent_uuid: defaultAgent.agent_uuid,
      fingerprint: randomBytes(32).toString('hex'),
      tier: 'standard',
      summary: 'needs a human',
      matched_rule: 'r1',
      pipeline_id: `pl_${randomBytes(6).toString('hex')}`,
      behavior_type: 'TOOL_CALL',
      tool: 'payments.transfer',
      ...over,
    });
  const a1 = await ask();
  const a2 = await ask();
  const b1 = await ask({
    agent_id: 'second-agent',
    agent_uuid: second.body.agent_uuid,
  });
  const signed = await ask({ tier: 'signed' });
  const foreign = await ask({
    org_id: org.body.org_id,
    agent_id: 'other-agent',
    agent_uuid: otherAgent.body.agent_uuid,
  });

  await t.test('listing', async (t) => {
    const mine = await call('/v1/me/approvals', defaultAgentKey);
    t.equal(mine.status, 200);
    t.same(mine.body.data.map((r: ApprovalRecord) => r.id).sort(), [a1.id, a2.id, signed.id].sort(), 'own');
    const other = await call('/v1/me/approvals', secondKey);
    t.same(
      other.body.data.map((r: ApprovalRecord) => r.id),
      [b1.id],
    );
    const human = await call('/v1/me/approvals', dev.token);
    t.same(human.body.data.map((r: ApprovalRecord) => r.id).sort(), [a1.id, a2.id, b1.id, signed.id].sort());
    t.notOk(
      human.body.data.some((r: ApprovalRecord) => r.id === foreign.id),
      'never another org',
    );
    t.same((await call('/v1/me/approvals', auditor.token)).body.data, []);
    t.equal((await call('/v1/me/approvals', 'gk_pat_nope')).status, 401);

    const one = await call(`/v1/me/approvals/${a1.id}`, defaultAgentKey);
    t.equal(one.status, 200);
    t.equal(one.body.fingerprint, a1.fingerprint);
    t.equal((await call(`/v1/me/approvals/${a1.id}`, secondKey)).status, 404, "another agent's");
    t.equal((await call(`/v1/me/approvals/${a1.id}`, auditor.token)).status, 200);
    t.equal((await call(`/v1/me/approvals/${a1.id}`, requester.token)).status, 403);
    t.equal((await call(`/v1/me/approvals/${foreign.id}`, dev.token)).status, 404, "another org's");
  });

  await t.test('deciding', async (t) => {
    for (const [who, token] of [
      ['auditor', auditor.token],
      ['requester', requester.token],
      ['the agent itself', defaultAgentKey],
      ['another agent', secondKey],
    ] as const) {
      const r = await call(`/v1/me/approvals/${a1.id}/decide`, token, { decision: 'approve' });
      t.equal(r.status, 403, `${who} cannot decide`);
      t.equal(r.body.error.code, 'forbidden');
    }
    const other = await call(`/v1/me/approvals/${a1.id}/decide`, otherDev.token, { decision: 'approve' });
    t.equal(other.status, 404, "another org's developer");
    t.equal(other.body.error.code, 'not_found');
    const bad = await call(`/v1/me/approvals/${a1.id}/decide`, dev.token, { decision: 'maybe' });
    t.equal(bad.status, 400);
    t.equal(bad.body.error.param, 'decision');

    const ok = await call(`/v1/me/approvals/${a1.id}/decide`, dev.token, {
      decision: 'approve',
      reason: 'fine',
      client_note: 'unknown /v1 fields are ignored',
    });
    t.equal(ok.status, 200);
    t.match(ok.body, { id: a1.id, status: 'approved', decided_by: dev.userId, reason: 'fine' });
    const twice = await call(`/v1/me/approvals/${a1.id}/decide`, dev.token, { decision: 'deny' });
    t.equal(twice.status, 409);
    t.equal(twice.body.error.code, 'approval_not_pending');

    const deny = await call(`/v1/me/approvals/${b1.id}/decide`, dev.token, { decision: 'deny' });
    t.match(deny.body, { status: 'denied', decided_by: dev.userId });

    const s = await call(`/v1/me/approvals/${signed.id}/decide`, dev.token, { decision: 'approve' });
    t.equal(s.status, 403);
    t.equal(s.body.error.code, 'webauthn_required');
    t.match(s.body.error.message, /WebAuthn/);

    const pending = await call('/v1/me/approvals', defaultAgentKey);
    t.same(
      pending.body.data.map((r: ApprovalRecord) => r.id).sort(),
      [a2.id, signed.id].sort(),
      'decided ones leave the pending list',
    );
  });

  await t.test('cancel and revoke', async (t) => {
    t.equal((await call(`/v1/me/approvals/${a2.id}/cancel`, secondKey, {})).status, 404, 'not its own');
    t.equal((await call(`/v1/me/approvals/${a2.id}/revoke`, dev.token, {})).status, 409, 'pending');
    const c = await call(`/v1/me/approvals/${a2.id}/cancel`, defaultAgentKey, {});
    t.equal(c.status, 200);
    t.equal(c.body.status, 'cancelled');
    const again = await call(`/v1/me/approvals/${a2.id}/cancel`, defaultAgentKey, {});
    t.equal(again.status, 409);
    t.equal(again.body.error.code, 'approval_not_pending');

    t.equal((await call(`/v1/me/approvals/${a1.id}/revoke`, defaultAgentKey, {})).status, 403, 'agent');
    t.equal((await call(`/v1/me/approvals/${a1.id}/revoke`, auditor.token, {})).status, 403, 'auditor');
    t.equal((await call(`/v1/me/approvals/${a1.id}/revoke`, otherDev.token, {})).status, 404, 'other org');
    const r = await call(`/v1/me/approvals/${a1.id}/revoke`, dev.token, { reason: 'changed my mind' });
    t.equal(r.status, 200);
    t.match(r.body, { status: 'revoked', reason: 'changed my mind' });
    t.equal(
      approvals.consume('default', defaultAgent.agent_uuid, a1.fingerprint),
      undefined,
      'a revoked approval allows nothing',
    );
  });

  await t.test('the control-plane listing', async (t) => {
    const all = await call('/api/approvals', auditor.token);
    t.equal(all.status, 200);
    const created = all.body.data.map((r: ApprovalRecord) => Date.parse(r.created_at));
    t.ok(
      created.every((ms: number, i: number) => i === 0 || ms <= created[i - 1]),
      'newest first',
    );
    t.same(
      new Set(all.body.data.map((r: ApprovalRecord) => r.id)),
      new Set([a1.id, a2.id, b1.id, signed.id]),
    );
    const revoked = await call('/api/approvals?status=revoked', auditor.token);
    t.same(
      revoked.body.data.map((r: ApprovalRecord) => r.id),
      [a1.id],
    );
    const page = await call('/api/approvals?limit=3', dev.token);
    t.equal(page.body.data.length, 3);
    t.type(page.body.next_cursor, 'string');
    const rest = await call(`/api/approvals?limit=3&cursor=${page.body.next_cursor}`, dev.token);
    t.equal(rest.body.data.length, 1);
    t.equal(rest.body.next_cursor, null);
    t.same(
      [...page.body.data, ...rest.body.data].map((r: ApprovalRecord) => r.id),
      all.body.data.map((r: ApprovalRecord) => r.id),
      'the pages are the list',
    );
    t.equal((await call('/api/approvals?status=nope', auditor.token)).status, 400);
    t.equal((await call('/api/approvals?limit=1001', auditor.token)).status, 400);
    t.equal((await call('/api/approvals', requester.token)).status, 403, 'auditor+');
    t.equal((await call('/api/approvals', defaultAgentKey)).status, 403, 'not with an agent key');
    const cross = await call(`/api/approvals?org_id=${org.body.org_id}`, root);
    t.same(
      cross.body.data.map((r: ApprovalRecord) => r.id),
      [foreign.id],
      'a super_admin names another org',
    );
    t.equal((await call(`/api/approvals?org_id=${org.body.org_id}`, dev.token)).status, 403);
    // An org that does not exist is 404, as on every other org-scoped route.
    const ghost = await call('/api/approvals?org_id=org_NoSuchOrg', root);
    t.equal(ghost.status, 404, 'a missing org');
    // `?org_id=` on /v1/me/approvals: another org's pending list for a super_admin, 403 for others.
    const mine = await call(`/v1/me/approvals?org_id=${org.body.org_id}`, root);
    t.equal(mine.status, 200);
    t.same(
      mine.body.data.map((r: ApprovalRecord) => r.id),
      [foreign.id],
      "the named org's pending approvals",
    );
    t.equal((await call(`/v1/me/approvals?org_id=${org.body.org_id}`, dev.token)).status, 403);
    t.equal((await call(`/v1/me/approvals?org_id=${org.body.org_id}`, defaultAgentKey)).status, 403);
    const one = await call(`/v1/me/approvals/${foreign.id}?org_id=${org.body.org_id}`, root);
    t.equal(one.status, 200, 'one of them, read as the list reads it');
    t.equal(one.body.id, foreign.id);
  });

  await t.test('every transition is in the org chain', async (t) => {
    const types = (a: ApprovalRecord): string[] =>
      h.audit.byPipeline(a.org_id, a.pipeline_id as string).map((e) => e.event_type);
    t.same(types(a1), ['approval.created', 'approval.decided', 'approval.revoked']);
    t.same(types(a2), ['approval.created', 'approval.cancelled']);
    t.same(types(b1), ['approval.created', 'approval.decided']);
    t.same(types(signed), ['approval.created']);
    t.same(types(foreign), ['approval.created']);
    const decided = h.audit.byPipeline('default', b1.pipeline_id as string)[1];
    t.match(decided, {
      org_id: 'default',
      agent_id: 'second-agent',
      outcome: 'denied',
      details: { approval_id: b1.id, status: 'denied', tier: 'standard', actor: dev.userId },
    });
  });
});

t.test('store: an agent holds at most MAX_LIVE_PER_AGENT live approvals', async (t) => {
  const { approvals, sink, clock } = setup(t);
  const fp = (i: number): string => i.toString(16).padStart(64, '0');
  // Half of them short-lived: they are what the cap expires first once it is reached.
  for (let i = 0; i < MAX_LIVE_PER_AGENT; i++)
    await approvals.create(input({ fingerprint: fp(i), ...(i < 10 ? { ttl_ms: MIN } : {}) }));
  const same = await approvals.create(input({ fingerprint: fp(5) }));
  t.equal(same.status, 'pending', 'the identical call still gets its pending approval at the cap');
  const created = sink.types().length;
  await t.rejects(
    approvals.create(input({ fingerprint: fp(MAX_LIVE_PER_AGENT) })),
    { code: 'rate_limited', status: 429, headers: { 'retry-after': '60' } },
    'one more is refused, with when to come back',
  );
  t.equal(sink.types().length, created, 'a refused approval is not recorded as created');
  const other = await approvals.create(input({ agent_uuid: 'agent-2', agent_id: 'name-agent-2' }));
  t.equal(other.status, 'pending', "another agent's approvals are not counted");
  t.equal((await approvals.pendingFor(AGENT)).length, MAX_LIVE_PER_AGENT, 'the list stays at the cap');

  clock.now += 2 * MIN; // ten of them expire
  const fresh = await approvals.create(input({ fingerprint: fp(MAX_LIVE_PER_AGENT) }));
  t.equal(fresh.status, 'pending', 'once some expire, there is room again');
  t.equal(sink.types().filter((e) => e === 'approval.expired').length, 10, 'the expired ones are recorded');
  t.equal((await approvals.pendingFor(AGENT)).length, MAX_LIVE_PER_AGENT - 9);
});

t.test('store: pre-approvals count against the cap and are capped; a refusal reads no record', async (t) => {
  const { approvals, store } = setup(t);
  const fp = (i: number): string => `p${i.toString(16).padStart(63, '0')}`;
  for (let i = 0; i < MAX_LIVE_PER_AGENT; i++) await approvals.preApprove(input({ fingerprint: fp(i) }), DEV);
  await rejects(
    t,
    approvals.preApprove(input({ fingerprint: fp(-1) }), DEV),
    'rate_limited',
    429,
    'a developer cannot pre-approve past the cap',
  );
  const again = await approvals.preApprove(input({ fingerprint: fp(7) }), DEV);
  t.equal(again.status, 'approved', 'the same action is still answered with its approval');
  // The agent's own request is refused too, without reading its 1,000 records.
  const get = store.approvals.get.bind(store.approvals);
  let reads = 0;
  store.approvals.get = ((id: string) => {
    reads++;
    return get(id);
  }) as typeof store.approvals.get;
  t.teardown(() => {
    store.approvals.get = get;
  });
  await rejects(
    t,
    approvals.create(input({ fingerprint: 'f'.repeat(64) })),
    'rate_limited',
    429,
    'the agent is at its cap',
  );
  t.ok(reads <= 1, `a refusal reads no record of the agent's (${reads} read)`);
});
