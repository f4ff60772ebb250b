import type { Test } from 'tap';
import t from 'tap';
import type { ChainLog } from '../../src/audit/chain-log.js';
import {
  personalValue,
  REPLAYED_EVENT_TYPES,
  type ReplayResult,
  replay,
  replayedAction,
  replayMany,
  storedDetections,
} from '../../src/audit/replay.js';
import { MAX_CANDIDATES, registerReplayRoutes } from '../../src/audit/replay-routes.js';
import type { AuditEvent, AuditInput, AuditLog, AuditQuery } from '../../src/audit/types.js';
import { ERASED, erasePersonal, personalField } from '../../src/core/chain/index.js';
import { ERROR_CATALOG, type ErrorCode } from '../../src/core/errors.js';
import { stringsIn } from '../../src/core/guardrails/index.js';
import { type CompiledPolicy, compilePolicy } from '../../src/core/policy/index.js';
import { Governor } from '../../src/govern/governor.js';
import type { Snapshot } from '../../src/snapshot/types.js';
import { PolicyRepo } from '../../src/store/policies.js';
import {
  type CoreHarness,
  type HarnessResponse,
  orgWithRoles,
  ROLES,
  type RoleName,
  type RoleOrg,
  startCoreHarness,
} from '../helpers/core-harness.js';

function compiled(ruleSet: unknown): CompiledPolicy {
  const c = compilePolicy(ruleSet);
  if (!c.ok) throw new Error(JSON.stringify(c.problems));
  return c.policy;
}

// ---------------------------------------------------------------------------------------------
// Hand-built events in the shapes govern/routes.ts and gateway/service.ts record.

let seq = 0;
function event(over: Partial<AuditEvent> & { event_type: string }): AuditEvent {
  seq++;
  return {
    id: `ae_${seq}`,
    org_id: 'org_t',
    seq,
    ts: new Date(Date.UTC(2025, 0, 1, 0, 0, seq)).toISOString(),
    agent_id: 'bot',
    session_id: null,
    task_id: null,
    pipeline_id: null,
    behavior_type: null,
    outcome: null,
    reason: null,
    rule_id: null,
    provider: null,
    model: null,
    usage: null,
    cost: null,
    detections: null,
    details: {},
    personal: {},
    ...over,
  };
}

const NO_DETECTIONS = { pii: [], secrets: [], injection: {}, unicode: [], counts: {} };

function governDecision(
  outcome: string,
  tool: string | null,
  opts: {
    args?: unknown;
    personal?: Record<string, unknown>;
    detections?: unknown;
    approvalConsumed?: string;
    agent?: string;
    type?: string;
  } = {},
): AuditEvent {
  const type = opts.type ?? 'TOOL_CALL';
  const args = opts.args ?? {};
  return event({
    event_type: 'govern.decision',
    agent_id: opts.agent ?? 'bot',
    behavior_type: type,
    outcome,
    rule_id: 'old-rule',
    detections: { input: opts.detections ?? NO_DETECTIONS },
    details: {
      action: { type, tool, server: null, model: null, provider: null },
      decision: {
        mode: 'enforce',
        outcome,
        rule_id: 'old-rule',
        approval_consumed: opts.approvalConsumed ?? null,
        policy_id: null,
        policy_version: null,
      },
    },
    personal: opts.personal ?? {
      args: personalField('args', args, 'salt-a'),
      payload: personalField('payload', { tool, args }, 'salt-p'),
    },
  });
}

const TRANSITIONS = {
  mode: 'enforce',
  rules: [
    { id: 'block-a', when: { type: 'TOOL_CALL', tool: 'a' }, then: 'block', reason: 'a is off' },
    { id: 'approve-b', when: { type: 'TOOL_CALL', tool: 'b' }, then: 'require_approval' },
  ],
};

t.test('replay counts every transition', async (t) => {
  const events: AuditEvent[] = [];
  for (const old of ['allow', 'block', 'needs_approval']) {
    for (const tool of ['a', 'b', 'c']) events.push(governDecision(old, tool));
  }
  // Not decisions: skipped.
  events.push(event({ event_type: 'admin.policy_created', outcome: 'allow' }));
  events.push(event({ event_type: 'govern.execution', outcome: 'ok' }));
  events.push(event({ event_type: 'pii_detected', outcome: 'blocked', behavior_type: 'LLM_CALL' }));

  const r = replay(events, compiled(TRANSITIONS));
  t.equal(r.evaluated, 9);
  t.equal(r.skipped, 3);
  t.equal(r.changed, 6);
  t.equal(r.truncated, false);
  t.same(r.summary, {
    allow_to_block: 1,
    allow_to_needs_approval: 1,
    block_to_allow: 1,
    block_to_needs_approval: 1,
    needs_approval_to_allow: 1,
    needs_approval_to_block: 1,
    unchanged: 3,
  });
  t.same(
    r.changes.map((c) => [c.tool, c.old_outcome, c.new_outcome, c.rule_id]),
    [
      ['a', 'allow', 'block', 'block-a'],
      ['b', 'allow', 'needs_approval', 'approve-b'],
      ['b', 'block', 'needs_approval', 'approve-b'],
      ['c', 'block', 'allow', null],
      ['a', 'needs_approval', 'block', 'block-a'],
      ['c', 'needs_approval', 'allow', null],
    ],
    'oldest first, with the deciding rule',
  );
  const first = r.changes[0];
  t.same(first, {
    event_id: events[0]?.id,
    seq: events[0]?.seq,
    ts: events[0]?.ts,
    behavior_type: 'TOOL_CALL',
    agent_id: 'bot',
    tool: 'a',
    old_outcome: 'allow',
    new_outcome: 'block',
    old_rule_id: 'old-rule',
    rule_id: 'block-a',
    reason: 'a is off',
  });

  const capped = replay(events, compiled(TRANSITIONS), { limit: 2 });
  t.equal(capped.changes.length, 2, 'changes listed up to the limit');
  t.equal(capped.changed, 6, 'all counted');
  t.same(capped.summary, r.summary);

  const none = replay(events, compiled(TRANSITIONS), { limit: 0 });
  t.same(none.changes, []);
  t.equal(none.changed, 6);
});

t.test('replay stops at maxEvents and says so', async (t) => {
  const events = [governDecision('allow', 'a'), governDecision('allow', 'a'), governDecision('allow', 'a')];
  const r = replay(events, compiled(TRANSITIONS), { maxEvents: 2 });
  t.equal(r.evaluated, 2);
  t.equal(r.truncated, true);
  const exact = replay(events, compiled(TRANSITIONS), { maxEvents: 3 });
  t.equal(exact.evaluated, 3);
  t.equal(exact.truncated, false);
});

t.test('the old outcome is the policy outcome', async (t) => {
  const candidate = compiled({
    rules: [
      { id: 'no-big', when: { type: 'LLM_CALL', model: 'big' }, then: 'block' },
      { id: 'no-embed', when: { type: 'EMBEDDING_CALL', provider: 'openai' }, then: 'require_approval' },
      { id: 'approve-x', when: { type: 'TOOL_CALL', tool: 'x' }, then: 'require_approval' },
    ],
  });
  const llm = (outcome: string, decision: string | null, model = 'big'): AuditEvent =>
    event({
      event_type: 'llm_call',
      behavior_type: 'LLM_CALL',
      model,
      provider: 'openai',
      outcome,
      details: decision === null ? {} : { decision: { outcome: decision, rule_id: null } },
    });
  const events = [
    llm('error', 'allow'), // upstream failure after an allow
    llm('error', null), // no stored decision: error counts as allow
    llm('block', 'allow'), // blocked by the output guard, allowed by the policy
    llm('block', 'block', 'small'), // blocked by the policy
    llm('weird', null), // unreadable: skipped
    event({
      event_type: 'embedding_call',
      model: 'text-embedding-3-small',
      provider: 'openai',
      outcome: 'allow',
      details: { decision: { outcome: 'allow' } },
    }),
    governDecision('allow', 'x', { approvalConsumed: 'apr_1' }), // asked for approval, got it
  ];
  const r = replay(events, candidate);
  t.equal(r.evaluated, 6);
  t.equal(r.skipped, 1);
  t.same(
    r.changes.map((c) => [c.event_id, c.behavior_type, c.old_outcome, c.new_outcome]),
    [
      [events[0]?.id, 'LLM_CALL', 'allow', 'block'],
      [events[1]?.id, 'LLM_CALL', 'allow', 'block'],
      [events[2]?.id, 'LLM_CALL', 'allow', 'block'],
      [events[3]?.id, 'LLM_CALL', 'block', 'allow'],
      [events[5]?.id, 'EMBEDDING_CALL', 'allow', 'needs_approval'],
    ],
  );
  t.equal(r.summary.unchanged, 1, 'the consumed approval is needs_approval → needs_approval');
});

t.test('a call never decided (refused or dropped by the scan queue) is not replayed', async (t) => {
  const candidate = compiled({
    rules: [{ id: 'no-x', when: { type: 'TOOL_CALL', tool: 'x' }, then: 'block' }],
  });
  // The shape gateway/undecided.ts records: outcome error, decision null.
  const undecided = (event_type: string, behavior_type: string, details: Record<string, unknown>) =>
    event({
      event_type,
      behavior_type,
      outcome: 'error',
      reason: 'client disconnected',
      details: Object.assign(details, { decision: null, status: 499, error_code: null }),
    });
  const events = [
    undecided('govern.decision', 'TOOL_CALL', { action: { type: 'TOOL_CALL', tool: 'x' } }),
    undecided('llm_call', 'LLM_CALL', { routed_provider: 'openai' }),
    governDecision('allow', 'x'),
  ];
  t.equal(replayedAction(events[0] as AuditEvent), undefined, 'nothing was decided: nothing to replay');
  const r = replay(events, candidate);
  t.equal(r.evaluated, 1, 'only the decided call');
  t.equal(r.skipped, 2);
  t.same(
    r.changes.map((c) => [c.event_id, c.old_outcome, c.new_outcome]),
    [[events[2]?.id, 'allow', 'block']],
  );
});

t.test('erased or missing personal values are undefined for the candidate', async (t) => {
  const candidate = compiled({
    rules: [
      {
        id: 'big-payment',
        when: { type: 'TOOL_CALL', tool: 'pay', field: 'args.amount', op: 'gt', value: 100 },
        then: 'block',
      },
      {
        id: 'note-present',
        when: { type: 'TOOL_CALL', tool: 'note', field: 'payload.text', op: 'exists', value: true },
        then: 'block',
      },
    ],
  });
  const committed = {
    args: personalField('args', { amount: 500 }, 's1'),
    payload: personalField('payload', { tool: 'pay', args: { amount: 500 } }, 's2'),
  };
  const events = [
    governDecision('allow', 'pay', { personal: committed }),
    governDecision('allow', 'pay', { personal: erasePersonal(committed) }),
    governDecision('allow', 'pay', { personal: erasePersonal(committed, ['payload']) }),
    governDecision('allow', 'pay', { personal: { args: { amount: 500 } } }), // stored plain
    governDecision('allow', 'pay', { personal: {} }),
    governDecision('allow', 'pay', { personal: { args: personalField('args', { amount: 5 }, 's3') } }),
    governDecision('allow', 'note', { personal: { payload: personalField('payload', { text: 'hi' }, 's') } }),
    governDecision('allow', 'note', {
      personal: erasePersonal({ payload: personalField('payload', { text: 'hi' }, 's') }),
    }),
  ];
  const r = replay(events, candidate);
  t.same(
    r.changes.map((c) => c.event_id),
    [events[0]?.id, events[2]?.id, events[3]?.id, events[6]?.id],
    'only events whose value is still there match',
  );
  t.equal(r.summary.unchanged, 4);

  const erased = replayedAction(events[1] as AuditEvent);
  t.equal(erased?.action.args, undefined);
  t.equal(erased?.action.payload, undefined);
  t.notOk(erased && 'args' in erased.action, 'no args key at all');

  t.same(personalValue({ a: personalField('a', { x: 1 }, 's') }, 'a'), { x: 1 });
  t.equal(personalValue({ a: { value: ERASED, c: 'f'.repeat(64) } }, 'a'), undefined);
  t.equal(personalValue({ a: ERASED }, 'a'), undefined);
  t.equal(personalValue({}, 'a'), undefined);
  t.same(personalValue({ a: [1, 2] }, 'a'), [1, 2]);
});

t.test('stored detections drive the candidate detectors', async (t) => {
  const candidate = compiled({
    detectors: {
      pii: { action: 'block', types: ['email'] },
      secrets: { action: 'flag' },
      injection: { action: 'block', threshold: 0.5 },
    },
    rules: [],
  });
  const det = (d: Record<string, unknown>) => ({ ...NO_DETECTIONS, ...d });
  const events = [
    governDecision('allow', 't', { detections: det({ pii: ['email'] }) }),
    governDecision('allow', 't', { detections: det({ pii: ['phone'] }) }),
    governDecision('allow', 't', { detections: det({ injection: { direct: 0.6 } }) }),
    governDecision('allow', 't', { detections: det({ injection: { direct: 0.4 } }) }),
    governDecision('allow', 't', { detections: det({ secrets: ['github_token'] }) }),
    event({
      event_type: 'llm_call',
      behavior_type: 'LLM_CALL',
      model: 'm',
      outcome: 'allow',
      detections: null,
      details: { decision: { outcome: 'allow' } },
    }),
  ];
  const r = replay(events, candidate);
  t.same(
    r.changes.map((c) => [c.event_id, c.rule_id]),
    [
      [events[0]?.id, 'detector:pii'],
      [events[2]?.id, 'detector:injection'],
    ],
  );
  t.match(r.changes[0]?.reason, /email/);
  t.same(storedDetections(null), { pii: [], secrets: [], injection: {}, unicode: [] });
  t.same(storedDetections({ input: { pii: ['email', 3], injection: { a: 0.9, b: 'x' } } }), {
    pii: ['email'],
    secrets: [],
    injection: { a: 0.9 },
    unicode: [],
  });
});

t.test('the candidate mode applies', async (t) => {
  const observe = compiled({ ...TRANSITIONS, mode: 'observe' });
  const r = replay([governDecision('block', 'a'), governDecision('allow', 'a')], observe);
  t.same(r.summary, { ...replay([], observe).summary, block_to_allow: 1, unchanged: 1 });
});

t.test('replayMany reads the events once and matches single replays', async (t) => {
  const events: AuditEvent[] = [];
  for (const old of ['allow', 'block', 'needs_approval']) {
    for (const tool of ['a', 'b', 'c']) events.push(governDecision(old, tool));
  }
  let reads = 0;
  const once = {
    *[Symbol.iterator]() {
      reads++;
      yield* events;
    },
  };
  const policies = [
    compiled(TRANSITIONS),
    compiled({ default: 'block', rules: [] }),
    compiled({ rules: [] }),
  ];
  const many = replayMany(once, policies, { limit: 5 });
  t.equal(reads, 1);
  t.same(
    many,
    policies.map((p) => replay(events, p, { limit: 5 })),
  );
  t.equal(many[1]?.summary.allow_to_block, 3, 'default block blocks every allowed event');
  t.same(Object.keys(REPLAYED_EVENT_TYPES).sort(), ['embedding_call', 'govern.decision', 'llm_call']);
});

// ---------------------------------------------------------------------------------------------
// Over HTTP: a real store and listener, the routes reading the real ChainLog through a wrapper
// that records their scans and counts their appends.

type Res = HarnessResponse;
type Call = CoreHarness<ChainLog>['call'];

interface Harness {
  readonly call: Call;
  readonly pat: string;
  /** The org chains; events appended here directly are not counted in `appends`. */
  readonly log: ChainLog;
  readonly policies: PolicyRepo;
  /** Filters the routes handed to scanEvents, newest last. */
  readonly scans: { orgId: string; filters: Omit<AuditQuery, 'cursor' | 'limit'>; limit: number }[];
  /** Appends made through the AuditLog given to the routes. */
  readonly appends: number;
  close(): Promise<void>;
}

/** `log` as the replay routes see it: every call delegated, scans recorded, appends counted. */
function observed(log: ChainLog, state: { scans: Harness['scans']; appends: number }): AuditLog {
  return new Proxy(log, {
    get(target, prop) {
      if (prop === 'append')
        return (input: AuditInput) => {
          state.appends++;
          return target.append(input);
        };
      if (prop === 'scanEvents')
        return (orgId: string, filters: Omit<AuditQuery, 'cursor' | 'limit'>, limit: number) => {
          state.scans.push({ orgId, filters, limit });
          return target.scanEvents(orgId, filters, limit);
        };
      // ChainLog keeps its state in private fields: its methods must run on the log itself.
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

async function startHarness(): Promise<Harness> {
  const state = { scans: [] as Harness['scans'], appends: 0 };
  let policies: PolicyRepo | undefined;
  const h = await startCoreHarness({
    prefix: 'replay',
    policies: (store) => {
      policies = new PolicyRepo(store);
      return policies;
    },
    register: ({ snapshot, orgExists, router }, log) => {
      registerReplayRoutes(router, {
        snapshot,
        log: observed(log, state),
        policies: policies as PolicyRepo,
        orgExists,
      });
    },
  });
  return {
    call: h.call,
    pat: h.pat,
    log: h.audit,
    policies: policies as PolicyRepo,
    scans: state.scans,
    get appends() {
      return state.appends;
    },
    close: h.close,
  };
}

interface Org {
  readonly orgId: string;
  readonly tokens: Readonly<Record<RoleName, string>>;
  readonly agentKey: string;
}

async function makeOrg(h: Harness, name: string): Promise<Org> {
  const o = await orgWithRoles(h, name, [`${name}-bot`]);
  return { orgId: o.orgId, tokens: o.tokens, agentKey: (o.agents[0] as RoleOrg['agents'][number]).apiKey };
}

function assertError(t: Test, res: Res, code: ErrorCode, msg = ''): void {
  const entry = ERROR_CATALOG[code];
  t.equal(res.status, entry.status, `${msg} status ${entry.status} (${code}): ${JSON.stringify(res.body)}`);
  t.equal(res.body?.error?.code, code, msg);
}

/** A govern.decision as /v1/govern records it, appended to the org's log. */
async function record(
  h: Harness,
  orgId: string,
  outcome: string,
  tool: string,
  opts: { agent?: string; session?: string; args?: Record<string, unknown> } = {},
): Promise<void> {
  const args = opts.args ?? {};
  await h.log.append({
    org_id: orgId,
    event_type: 'govern.decision',
    agent_id: opts.agent ?? 'bot-1',
    session_id: opts.session ?? null,
    behavior_type: 'TOOL_CALL',
    outcome,
    reason: 'recorded',
    rule_id: null,
    detections: { input: NO_DETECTIONS },
    details: {
      action: { type: 'TOOL_CALL', tool, server: null, model: null, provider: null },
      decision: { mode: 'enforce', outcome, rule_id: null, approval_consumed: null },
    },
    // Plain values, as /v1/govern hands them over; the log wraps each in its commitment.
    personal: { args, payload: { tool, args } },
  });
}

function chainOf(h: Harness, orgId: string): string {
  return JSON.stringify([...h.log.exportLines(orgId)]);
}

const R = '/api/audit/replay';
const B = '/api/audit/replay/batch';
const PG = '/api/audit/playground/test';

const BLOCK_SHELL = {
  mode: 'enforce',
  rules: [{ id: 'no-shell', when: { type: 'TOOL_CALL', tool: 'shell.exec' }, then: 'block' }],
};

t.test('replay over HTTP', async (t) => {
  const h = await startHarness();
  t.teardown(() => h.close());
  const a = await makeOrg(h, 'alpha');
  const b = await makeOrg(h, 'beta');
  const dev = a.tokens.developer;

  await record(h, a.orgId, 'allow', 'shell.exec', { agent: 'bot-1', session: 's1' });
  await record(h, a.orgId, 'allow', 'shell.exec', { agent: 'bot-2', session: 's2' });
  await record(h, a.orgId, 'allow', 'fs.read', { agent: 'bot-1', session: 's1' });
  await record(h, a.orgId, 'block', 'fs.read', { agent: 'bot-2' });
  await record(h, a.orgId, 'allow', 'pay', { agent: 'bot-1', args: { amount: 900 } });
  await record(h, b.orgId, 'allow', 'shell.exec', { agent: 'beta-bot' });
  // Enough events in a third org for the scan to hand the event loop back several times.
  const c = await makeOrg(h, 'gamma');
  const LONG = 4500;
  for (let i = 0; i < LONG; i += 500) {
    await Promise.all(
      Array.from({ length: 500 }, (_, j) =>
        record(h, c.orgId, 'allow', (i + j) % 3 === 0 ? 'shell.exec' : 'fs.read'),
      ),
    );
  }
  // Every event sealed now: from here on a chain changes only when something is appended to it.
  await h.log.flushSeals();
  const chainA = chainOf(h, a.orgId);
  const chainB = chainOf(h, b.orgId);
  const chainC = chainOf(h, c.orgId);

  t.test('roles: developer and higher', async (t) => {
    for (const role of ROLES) {
      const allowed = role !== 'requester' && role !== 'auditor';
      for (const [path, body] of [
        [R, { rules: BLOCK_SHELL }],
        [B, { candidates: [{ rules: BLOCK_SHELL }] }],
        [PG, { rules: BLOCK_SHELL, action: { type: 'TOOL_CALL', payload: { tool: 'x' } } }],
      ] as const) {
        const res = await h.call(path, { token: a.tokens[role], body });
        if (allowed) t.equal(res.status, 200, `${role} ${path}: ${JSON.stringify(res.body)}`);
        else assertError(t, res, 'forbidden', `${role} ${path}`);
      }
    }
    assertError(
      t,
      await h.call(R, { token: a.agentKey, body: { rules: BLOCK_SHELL } }),
      'forbidden',
      'agent',
    );
    assertError(t, await h.call(R, { body: { rules: BLOCK_SHELL } }), 'unauthenticated');
  });

  t.test('replays the org history against rules', async (t) => {
    const res = await h.call(R, { token: dev, body: { rules: BLOCK_SHELL } });
    t.equal(res.status, 200, JSON.stringify(res.body));
    t.equal(res.body.evaluated, 5, 'only org alpha, only decisions');
    t.ok(res.body.skipped > 0, 'admin events of the org are skipped');
    t.equal(res.body.changed, 3);
    t.equal(res.body.summary.allow_to_block, 2);
    t.equal(res.body.summary.block_to_allow, 1);
    t.equal(res.body.summary.unchanged, 2);
    t.same(
      res.body.changes.map((c: any) => [c.agent_id, c.tool, c.old_outcome, c.new_outcome, c.rule_id]),
      [
        ['bot-1', 'shell.exec', 'allow', 'block', 'no-shell'],
        ['bot-2', 'shell.exec', 'allow', 'block', 'no-shell'],
        ['bot-2', 'fs.read', 'block', 'allow', null],
      ],
    );
    t.match(res.body.changes[0].event_id, /^ae_/);
    t.equal(h.scans.at(-1)?.orgId, a.orgId);
    t.equal(h.scans.at(-1)?.limit, 100_001, 'reads at most 100,000 events (+1 to see truncation)');

    // YAML text, a rule on args (read back from the commitments).
    const yaml = [
      'rules:',
      '  - id: big',
      '    when: {tool: pay, field: args.amount, op: gte, value: 500}',
      '    then: require_approval',
      '',
    ].join('\n');
    const y = await h.call(R, { token: dev, body: { rules: yaml } });
    t.equal(y.status, 200, JSON.stringify(y.body));
    t.equal(y.body.summary.allow_to_needs_approval, 1);
    t.equal(y.body.summary.block_to_allow, 1);
    t.same(
      y.body.changes.map((c: any) => [c.tool, c.new_outcome, c.rule_id]),
      [
        ['fs.read', 'allow', null],
        ['pay', 'needs_approval', 'big'],
      ],
    );

    // Limit caps the list, not the counts.
    const capped = await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, limit: 1 } });
    t.equal(capped.body.changes.length, 1);
    t.equal(capped.body.changed, 3);

    // A super_admin names another org.
    const other = await h.call(`${R}?org_id=${b.orgId}`, { token: h.pat, body: { rules: BLOCK_SHELL } });
    t.equal(other.status, 200);
    t.equal(other.body.evaluated, 1);
    t.equal(other.body.summary.allow_to_block, 1);
    assertError(
      t,
      await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, org_id: b.orgId } }),
      'forbidden',
      'another org',
    );
  });

  t.test('filters', async (t) => {
    const byAgent = await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, agent_id: 'bot-2' } });
    t.equal(byAgent.body.evaluated, 2);
    t.same(h.scans.at(-1)?.filters, { agent_id: 'bot-2' });
    const bySession = await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, session_id: 's1' } });
    t.equal(bySession.body.evaluated, 2);
    t.equal(bySession.body.summary.allow_to_block, 1);
    const byType = await h.call(R, {
      token: dev,
      body: { rules: BLOCK_SHELL, event_type: 'govern.decision' },
    });
    t.equal(byType.body.evaluated, 5);
    t.equal(byType.body.skipped, 0);
    const future = await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, since: '2999-01-01' } });
    t.equal(future.body.evaluated, 0);
    t.same(h.scans.at(-1)?.filters, { since: '2999-01-01T00:00:00.000Z' }, 'bounds normalised to ISO');
    const past = await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, until: '2000-01-01T00:00:00Z' } });
    t.equal(past.body.evaluated, 0);
    assertError(
      t,
      await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, since: 'yesterday' } }),
      'invalid_request',
    );
  });

  t.test('invalid bodies and rules', async (t) => {
    const bad = await h.call(R, {
      token: dev,
      body: { rules: { mode: 'strict', rules: [{ id: 'x', then: 'explode' }] } },
    });
    assertError(t, bad, 'invalid_policy');
    t.equal(bad.body.error.param, 'rules');
    t.same(
      bad.body.error.problems.map((p: { path: string }) => p.path),
      ['mode', 'rules[0].then'],
      'every problem, with its path',
    );
    const badText = await h.call(R, { token: dev, body: { rules: 'rules: [\n  - {id: a' } });
    assertError(t, badText, 'invalid_policy');
    t.ok(badText.body.error.problems.length >= 1);
    const notSet = await h.call(R, { token: dev, body: { rules: '- just\n- a list' } });
    assertError(t, notSet, 'invalid_policy', 'a YAML list is not a rule set');

    assertError(t, await h.call(R, { token: dev, body: {} }), 'invalid_request', 'no candidate');
    assertError(
      t,
      await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, policy_id: 'pol_x', version_no: 1 } }),
      'invalid_request',
      'both',
    );
    assertError(t, await h.call(R, { token: dev, body: { policy_id: 'pol_x' } }), 'invalid_request', 'no n');
    assertError(
      t,
      await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, extra: 1 } }),
      'invalid_request',
    );
    assertError(
      t,
      await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, limit: 1001 } }),
      'invalid_request',
    );
    assertError(
      t,
      await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, limit: 0 } }),
      'invalid_request',
    );
    assertError(
      t,
      await h.call(R, { token: dev, body: { policy_id: 'pol_nope', version_no: 1 } }),
      'not_found',
    );
  });

  t.test('policy_id + version_no: drafts and published versions', async (t) => {
    const pol = h.policies.create(a.orgId, { name: 'candidate' }, 'test');
    h.policies.createDraft(a.orgId, pol.id, BLOCK_SHELL, null, 'test');
    const draft = await h.call(R, { token: dev, body: { policy_id: pol.id, version_no: 1 } });
    t.equal(draft.status, 200, JSON.stringify(draft.body));
    t.equal(draft.body.summary.allow_to_block, 2);

    // The draft changes: the next replay sees the new rules (no stale compile).
    h.policies.updateDraft(a.orgId, pol.id, 1, { default: 'block', rules: [] }, 'test');
    const edited = await h.call(R, { token: dev, body: { policy_id: pol.id, version_no: 1 } });
    t.equal(edited.body.summary.allow_to_block, 4);

    h.policies.publish(a.orgId, pol.id, 1, 'test');
    const published = await h.call(R, { token: dev, body: { policy_id: pol.id, version_no: 1 } });
    t.equal(published.body.summary.allow_to_block, 4);

    assertError(
      t,
      await h.call(R, { token: dev, body: { policy_id: pol.id, version_no: 2 } }),
      'not_found',
      'unknown version',
    );
    // Another org's policy is not found.
    assertError(
      t,
      await h.call(R, { token: b.tokens.developer, body: { policy_id: pol.id, version_no: 1 } }),
      'not_found',
      'other org',
    );
  });

  t.test('batch: one result per candidate and an impact table', async (t) => {
    const pol = h.policies.create(a.orgId, { name: 'batch-ref' }, 'test');
    h.policies.createDraft(
      a.orgId,
      pol.id,
      { rules: [{ id: 'ok', when: { tool: 'fs.read' }, then: 'allow' }] },
      null,
      't',
    );
    const res = await h.call(B, {
      token: dev,
      body: {
        agent_id: 'bot-1',
        limit: 5,
        candidates: [
          { name: 'strict', rules: BLOCK_SHELL },
          { rules: 'default: block\nrules: []\n' },
          { policy_id: pol.id, version_no: 1 },
        ],
      },
    });
    t.equal(res.status, 200, JSON.stringify(res.body));
    t.same(
      res.body.results.map((r: any) => r.name),
      ['strict', 'candidate 2', `${pol.id}@1`],
    );
    t.same(res.body.impact, [
      {
        name: 'strict',
        evaluated: 3,
        changed: 1,
        allow_to_block: 1,
        allow_to_needs_approval: 0,
        block_to_allow: 0,
        block_to_needs_approval: 0,
        needs_approval_to_allow: 0,
        needs_approval_to_block: 0,
        unchanged: 2,
      },
      {
        name: 'candidate 2',
        evaluated: 3,
        changed: 3,
        allow_to_block: 3,
        allow_to_needs_approval: 0,
        block_to_allow: 0,
        block_to_needs_approval: 0,
        needs_approval_to_allow: 0,
        needs_approval_to_block: 0,
        unchanged: 0,
      },
      {
        name: `${pol.id}@1`,
        evaluated: 3,
        changed: 0,
        allow_to_block: 0,
        allow_to_needs_approval: 0,
        block_to_allow: 0,
        block_to_needs_approval: 0,
        needs_approval_to_allow: 0,
        needs_approval_to_block: 0,
        unchanged: 3,
      },
    ]);
    const single = await h.call(R, { token: dev, body: { rules: BLOCK_SHELL, agent_id: 'bot-1', limit: 5 } });
    t.same(res.body.results[0], { name: 'strict', ...single.body }, 'same as a single replay');

    const bad = await h.call(B, {
      token: dev,
      body: { candidates: [{ rules: BLOCK_SHELL }, { rules: { rules: 'nope' } }] },
    });
    assertError(t, bad, 'invalid_policy');
    t.equal(bad.body.error.param, 'candidates[1].rules');
    const unknownField = await h.call(B, {
      token: dev,
      body: { candidates: [{ rules: BLOCK_SHELL, x: 1 }] },
    });
    assertError(t, unknownField, 'invalid_request');
    t.equal(unknownField.body.error.param, 'candidates[0].x');
    const many = Array.from({ length: MAX_CANDIDATES + 1 }, () => ({ rules: BLOCK_SHELL }));
    assertError(t, await h.call(B, { token: dev, body: { candidates: many } }), 'invalid_request', '11');
    assertError(t, await h.call(B, { token: dev, body: { candidates: [] } }), 'invalid_request', 'none');
    assertError(t, await h.call(B, { token: dev, body: { candidates: ['x'] } }), 'invalid_request');
  });

  t.test('playground answers like govern and records nothing', async (t) => {
    const rules = {
      mode: 'enforce',
      detectors: { pii: { action: 'block' } },
      rules: [
        { id: 'approve-pay', when: { tool: 'pay' }, then: 'require_approval', tier: 'signed' },
        { id: 'no-shell', when: { tool: 'shell.exec' }, then: 'block', reason: 'no shell' },
      ],
    };
    const policy = compiled(rules);
    const governor = new Governor(
      { policy: () => ({ policy, policy_id: null, version_no: null }) } as unknown as Snapshot,
      { granted: () => undefined, consume: () => undefined },
    );
    const cases = [
      { type: 'TOOL_CALL', payload: { tool: 'pay', args: { amount: 3 } } },
      { type: 'TOOL_CALL', payload: { tool: 'shell.exec', args: { cmd: 'ls' } } },
      { type: 'TOOL_CALL', payload: { tool: 'mail', args: { to: 'jane.doe@example.com' } } },
      { type: 'SKILL_LOAD', agent_id: 'bot-9', payload: { name: 'ok' } },
    ];
    for (const action of cases) {
      const res = await h.call(PG, { token: dev, body: { rules, action } });
      t.equal(res.status, 200, JSON.stringify(res.body));
      const payload = action.payload as Record<string, unknown>;
      const live = governor.decide(
        { orgId: a.orgId, agentId: action.agent_id ?? 'playground', agentUuid: 'u' },
        {
          type: action.type as 'TOOL_CALL',
          tool: (payload.tool as string | undefined) ?? null,
          args: payload.args,
          payload,
          texts: stringsIn(payload, 'payload').map((text, i) => ({ message: i, part: -1, text })),
          flagsHeader: undefined,
        },
      );
      const d = live.decision;
      t.equal(res.body.outcome, d.outcome, `${payload.tool ?? action.type}`);
      t.equal(res.body.reason, d.reason);
      t.equal(res.body.rule_id, d.rule_id);
      t.equal(res.body.details.mode, d.mode);
      t.same(res.body.details.detections, live.scan.summary);
      t.notOk('mandate' in res.body, 'no mandate');
      t.notOk('approval' in res.body, 'no approval');
    }
    const pay = await h.call(PG, { token: dev, body: { rules, action: cases[0] } });
    t.same(pay.body.obligations, [
      { type: 'require_approval', tier: 'signed', reason: 'approval required by rule approve-pay' },
    ]);
    t.equal(pay.body.details.blocking_step, 'policy_rule');
    // A redaction the policy wants is the same obligation /v1/govern gives (the agent's to make).
    const redacting = { detectors: { pii: { action: 'redact' } }, rules: [] };
    const redactGovernor = new Governor(
      {
        policy: () => ({ policy: compiled(redacting), policy_id: null, version_no: null }),
      } as unknown as Snapshot,
      { granted: () => undefined, consume: () => undefined },
    );
    const mailPayload = cases[2]!.payload as Record<string, unknown>;
    const redacted = redactGovernor.decide(
      { orgId: a.orgId, agentId: 'playground', agentUuid: 'u' },
      {
        type: 'TOOL_CALL',
        tool: 'mail',
        args: mailPayload.args,
        payload: mailPayload,
        texts: stringsIn(mailPayload, 'payload').map((text, i) => ({ message: i, part: -1, text })),
        flagsHeader: undefined,
      },
    ).decision;
    t.equal(redacted.outcome, 'allow');
    t.same(redacted.redact, ['pii']);
    const obliged = await h.call(PG, { token: dev, body: { rules: redacting, action: cases[2] } });
    t.equal(obliged.body.outcome, 'allow');
    t.same(
      obliged.body.obligations,
      [{ type: 'redact', categories: ['pii'], reason: redacted.reason }],
      'the redact obligation, as /v1/govern answers it',
    );
    const mail = await h.call(PG, { token: dev, body: { rules, action: cases[2] } });
    t.equal(mail.body.outcome, 'block');
    t.equal(mail.body.rule_id, 'detector:pii');
    t.equal(mail.body.details.blocking_step, 'detection');
    t.same(mail.body.details.detections.pii, ['email']);

    // X-Service-Flags tighten like on /v1/govern.
    const warned = await h.call(PG, {
      token: dev,
      headers: { 'x-service-flags': 'mode=lockdown' },
      body: {
        rules: { rules: [] },
        action: { type: 'TOOL_CALL', payload: { tool: 'x', args: { e: 'a@b.io' } } },
      },
    });
    t.equal(warned.body.outcome, 'block');
    t.equal(warned.body.details.mode, 'lockdown');
    assertError(
      t,
      await h.call(PG, {
        token: dev,
        headers: { 'x-service-flags': 'nonsense' },
        body: { rules, action: cases[0] },
      }),
      'invalid_flags',
    );

    // By reference, and in observe mode.
    const pol = h.policies.create(a.orgId, { name: 'pg' }, 'test');
    h.policies.createDraft(a.orgId, pol.id, { ...rules, mode: 'observe' }, null, 'test');
    const ref = await h.call(PG, {
      token: dev,
      body: { policy_id: pol.id, version_no: 1, action: cases[1] },
    });
    t.equal(ref.body.outcome, 'allow');
    t.equal(ref.body.details.would_outcome, 'block');
    t.equal(ref.body.details.policy_id, pol.id);
    t.equal(ref.body.details.policy_version, 1);

    assertError(t, await h.call(PG, { token: dev, body: { rules } }), 'invalid_request', 'no action');
    assertError(
      t,
      await h.call(PG, { token: dev, body: { rules, action: { type: 'TOOL_CALL', payload: {} } } }),
      'invalid_request',
      'TOOL_CALL without a tool',
    );
    assertError(
      t,
      await h.call(PG, { token: dev, body: { rules, action: { type: 'NOPE' } } }),
      'invalid_request',
    );
    // Names /v1/govern refuses are refused here too: an answer for them would be about an action
    // the live service never decides.
    for (const payload of [{ tool: 'pay\nnow', args: {} }, { tool: 'pay', server: ' crm' }, { tool: 7 }]) {
      const res = await h.call(PG, { token: dev, body: { rules, action: { type: 'TOOL_CALL', payload } } });
      assertError(t, res, 'invalid_request', JSON.stringify(payload));
      t.match(res.body.error.param, /^action\.payload\.(tool|server)$/);
    }
    assertError(
      t,
      await h.call(PG, { token: dev, body: { rules: { bad: 1 }, action: cases[0] } }),
      'invalid_policy',
    );
  });

  t.test('a long replay counts every event', async (t) => {
    const res = await h.call(R, { token: c.tokens.developer, body: { rules: BLOCK_SHELL, limit: 10 } });
    t.equal(res.status, 200);
    t.equal(res.body.evaluated, LONG);
    t.equal(res.body.summary.allow_to_block, LONG / 3);
    t.equal(res.body.changes.length, 10);
    t.equal(res.body.truncated, false);
  });

  t.test('nothing was recorded', async (t) => {
    t.equal(h.appends, 0, 'no append through the audit log');
    t.equal(chainOf(h, a.orgId), chainA, 'org alpha chain unchanged');
    t.equal(chainOf(h, b.orgId), chainB, 'org beta chain unchanged');
    t.equal(chainOf(h, c.orgId), chainC, 'org gamma chain unchanged');
  });
});

t.test('results are plain data', async (t) => {
  const r: ReplayResult = replay([], compiled({ rules: [] }));
  t.same(JSON.parse(JSON.stringify(r)), r);
});

t.test(
  'playground: a polynomial regex runs in linear time; what cannot is a 400 naming the rule',
  async (t) => {
    const h = await startHarness();
    t.teardown(() => h.close());
    const a = await makeOrg(h, 'redos');
    const dev = a.tokens.developer;
    const sqlRule = (value: string) => ({
      rules: [
        {
          id: 'sql',
          when: { type: 'SYSTEM_OF_RECORD_WRITE', field: 'payload.sql', op: 'matches', value, flags: 'i' },
          then: 'require_approval',
        },
      ],
    });
    // 25.6 s of a frozen event loop for 7,200 characters before the linear-time engine.
    const sql = 'delete from where '.repeat(2000);
    const res = await h.call(PG, {
      token: dev,
      body: {
        rules: sqlRule('(delete|update).*from.*where.*1\\s*=\\s*1'),
        action: { type: 'SYSTEM_OF_RECORD_WRITE', payload: { sql } },
      },
    });
    t.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
    t.equal(res.body.outcome, 'allow');
    const bad = await h.call(PG, {
      token: dev,
      body: {
        rules: sqlRule('(delete)\\1'),
        action: { type: 'SYSTEM_OF_RECORD_WRITE', payload: { sql: 'x' } },
      },
    });
    assertError(t, bad, 'invalid_policy');
    t.same(
      bad.body.error.problems.map((p: { path: string }) => p.path),
      ['rules[0].when.value'],
    );
    t.match(bad.body.error.problems[0].message, /backreferences/);
  },
);
