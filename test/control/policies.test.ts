import type { Test } from 'tap';
import t from 'tap';
import type { ChainLog } from '../../src/audit/chain-log.js';
import type { AuditEvent } from '../../src/audit/types.js';
import { registerPolicies } from '../../src/control/policies.js';
import { ERROR_CATALOG, type ErrorCode } from '../../src/core/errors.js';
import { DEFAULT_POLICY } from '../../src/core/policy/index.js';
import { PolicyRepo } from '../../src/store/policies.js';
import {
  type CoreHarness,
  orgWithRoles,
  type HarnessResponse as Res,
  ROLES,
  type RoleName,
  type RoleOrg,
  startCoreHarness,
} from '../helpers/core-harness.js';

/** The rule key `then`, through a constant so the linter's thenable check stays quiet. */
const THEN = 'then';

interface Harness {
  readonly call: CoreHarness<ChainLog>['call'];
  readonly pat: string;
  readonly audit: ChainLog;
  readonly policies: PolicyRepo;
  close(): Promise<void>;
}

/** The provisioning and policy routes over a real listener, on a fresh store. */
async function startHarness(): Promise<Harness> {
  let policies: PolicyRepo | undefined;
  const h = await startCoreHarness({
    prefix: 'policies',
    register: ({ snapshot, identity, store, router }, audit) => {
      policies = new PolicyRepo(store);
      registerPolicies(router, { snapshot, identity, policies, audit });
    },
  });
  return { call: h.call, pat: h.pat, audit: h.audit, policies: policies as PolicyRepo, close: h.close };
}

/** Lowest first; written out so the test does not take its expectations from the code under test. */
const atLeast = (role: RoleName, min: RoleName): boolean => ROLES.indexOf(role) >= ROLES.indexOf(min);

interface Org {
  readonly orgId: string;
  readonly tokens: Readonly<Record<RoleName, string>>;
  readonly agentKey: string;
  readonly agentUuid: string;
  readonly agent2Uuid: string;
}

async function makeOrg(h: Harness, name: string): Promise<Org> {
  const o = await orgWithRoles(h, name, [`${name}-one`, `${name}-two`]);
  const [a1, a2] = o.agents as [RoleOrg['agents'][number], RoleOrg['agents'][number]];
  return {
    orgId: o.orgId,
    tokens: o.tokens,
    agentKey: a1.apiKey,
    agentUuid: a1.agentUuid,
    agent2Uuid: a2.agentUuid,
  };
}

function assertError(t: Test, res: Res, code: ErrorCode, msg = ''): void {
  const entry = ERROR_CATALOG[code];
  t.equal(res.status, entry.status, `${msg} status ${entry.status} (${code}): ${JSON.stringify(res.body)}`);
  t.equal(res.body?.type, 'error');
  t.equal(res.body?.error?.code, code);
  t.equal(res.body?.error?.type, entry.type);
  t.equal(res.body?.error?.request_id, res.headers.get('x-request-id'));
}

/** The org's admin.policy_* events, oldest first, as the chain export lists them. */
function adminEvents(log: ChainLog, orgId: string): AuditEvent[] {
  const out: AuditEvent[] = [];
  for (const line of log.exportLines(orgId)) {
    if ('event_type' in line && line.event_type.startsWith('admin.policy_')) out.push(line);
  }
  return out;
}

const P = '/api/v2/policies';

const YAML_V1 = `
mode: enforce
rules:
  - {id: no-shell, when: {type: TOOL_CALL, tool: shell.exec}, then: block, reason: shell is disabled}
`;

const RULES_V1 = {
  mode: 'enforce',
  rules: [
    {
      id: 'no-shell',
      when: { type: 'TOOL_CALL', tool: 'shell.exec' },
      [THEN]: 'block',
      reason: 'shell is disabled',
    },
  ],
};

function rulesOfMode(mode: string): unknown {
  return { mode, rules: [{ id: `only-${mode}`, when: { tool: 'x.y' }, [THEN]: 'block' }] };
}

t.test('policies over HTTP', async (t) => {
  const h = await startHarness();
  t.teardown(() => h.close());
  const a = await makeOrg(h, 'alpha');
  const b = await makeOrg(h, 'beta');
  const dev = a.tokens.developer;
  const admin = a.tokens.org_admin;

  t.test('the whole lifecycle', async (t) => {
    const created = await h.call(P, { token: dev, body: { name: 'Base', description: 'the baseline' } });
    t.equal(created.status, 201, JSON.stringify(created.body));
    t.same(Object.keys(created.body).sort(), ['created_at', 'description', 'id', 'name', 'org_id']);
    t.equal(created.body.name, 'Base');
    t.equal(created.body.description, 'the baseline');
    t.equal(created.body.org_id, a.orgId);
    t.match(created.body.id, /^pol_[A-Za-z0-9]{16}$/);
    const id = created.body.id as string;

    assertError(t, await h.call(P, { token: dev, body: { name: 'Base' } }), 'conflict', 'duplicate name');
    assertError(t, await h.call(P, { token: dev, body: { name: 'base' } }), 'conflict', 'case-insensitive');

    const list = await h.call(P, { token: a.tokens.auditor });
    t.equal(list.status, 200);
    t.equal(list.body.next_cursor, null);
    const item = (list.body.data as { id: string }[]).find((p) => p.id === id);
    t.same(item, { ...created.body, active_version: null, draft_version: null, warnings: [] });

    // Draft v1 from YAML text; it is stored as the parsed rule set.
    const v1 = await h.call(`${P}/${id}/versions`, {
      token: dev,
      body: { rules: YAML_V1, change_note: 'first cut' },
    });
    t.equal(v1.status, 201, JSON.stringify(v1.body));
    t.equal(v1.body.version_no, 1);
    t.equal(v1.body.status, 'draft');
    t.equal(v1.body.change_note, 'first cut');
    t.same(v1.body.rules, RULES_V1);
    t.equal(v1.body.created_by, (await h.call('/api/me', { token: dev })).body.id);
    t.notOk('published_at' in v1.body, 'no published_at on a draft');
    t.equal((await h.call(`${P}/${id}`, { token: dev })).body.draft_version, 1);

    // A second draft while one is open.
    assertError(
      t,
      await h.call(`${P}/${id}/versions`, { token: dev, body: { rules: RULES_V1 } }),
      'conflict',
    );

    // Edit the draft (object form).
    const edited = await h.call(`${P}/${id}/versions/1/rules`, {
      method: 'PUT',
      token: dev,
      body: { rules: rulesOfMode('observe') },
    });
    t.equal(edited.status, 200, JSON.stringify(edited.body));
    t.same(edited.body.rules, rulesOfMode('observe'));
    t.equal(edited.body.status, 'draft');

    const pub1 = await h.call(`${P}/${id}/versions/1/publish`, { method: 'POST', token: admin });
    t.equal(pub1.status, 200, JSON.stringify(pub1.body));
    t.equal(pub1.body.status, 'published');
    t.equal(pub1.body.superseded_version, null);
    t.equal(typeof pub1.body.published_at, 'string');
    let policy = (await h.call(`${P}/${id}`, { token: dev })).body;
    t.equal(policy.active_version, 1);
    t.equal(policy.draft_version, null);

    // A published version is frozen.
    assertError(
      t,
      await h.call(`${P}/${id}/versions/1/rules`, { method: 'PUT', token: dev, body: { rules: RULES_V1 } }),
      'conflict',
      'edit published',
    );
    assertError(
      t,
      await h.call(`${P}/${id}/versions/1/publish`, { method: 'POST', token: admin }),
      'conflict',
    );

    // v2, published: v1 becomes superseded.
    const v2 = await h.call(`${P}/${id}/versions`, { token: dev, body: { rules: rulesOfMode('warn') } });
    t.equal(v2.body.version_no, 2);
    const pub2 = await h.call(`${P}/${id}/versions/2/publish`, { method: 'POST', token: admin });
    t.equal(pub2.body.superseded_version, 1);
    let versions = (await h.call(`${P}/${id}/versions`, { token: a.tokens.auditor })).body.data as {
      version_no: number;
      status: string;
    }[];
    t.same(
      versions.map((v) => [v.version_no, v.status]),
      [
        [1, 'superseded'],
        [2, 'published'],
      ],
    );

    // v3, published, then pulled back: v2 is active again.
    await h.call(`${P}/${id}/versions`, { token: dev, body: { rules: rulesOfMode('lockdown') } });
    await h.call(`${P}/${id}/versions/3/publish`, { method: 'POST', token: admin });
    assertError(
      t,
      await h.call(`${P}/${id}/versions/2/pull-back`, { method: 'POST', token: admin }),
      'conflict',
    );
    const pulled = await h.call(`${P}/${id}/versions/3/pull-back`, { method: 'POST', token: admin });
    t.equal(pulled.status, 200, JSON.stringify(pulled.body));
    t.equal(pulled.body.status, 'pulled_back');
    t.equal(pulled.body.active_version, 2);
    t.equal(typeof pulled.body.pulled_back_at, 'string');
    policy = (await h.call(`${P}/${id}`, { token: dev })).body;
    t.equal(policy.active_version, 2);
    versions = (await h.call(`${P}/${id}/versions`, { token: dev })).body.data;
    t.same(
      versions.map((v) => v.status),
      ['superseded', 'published', 'pulled_back'],
    );
    const full = versions[1] as Record<string, unknown>;
    for (const key of ['version_no', 'status', 'rules', 'change_note', 'created_at', 'created_by']) {
      t.ok(key in full, `a version carries ${key}`);
    }
    t.equal(typeof full.published_at, 'string');
    t.equal(typeof full.published_by, 'string');

    // Pull back 2 → 1, then 1 → no active version.
    t.equal(
      (await h.call(`${P}/${id}/versions/2/pull-back`, { method: 'POST', token: admin })).body.active_version,
      1,
    );
    t.equal(
      (await h.call(`${P}/${id}/versions/1/pull-back`, { method: 'POST', token: admin })).body.active_version,
      null,
    );
    policy = (await h.call(`${P}/${id}`, { token: dev })).body;
    t.equal(policy.active_version, null);

    // Unknown versions and policies.
    assertError(
      t,
      await h.call(`${P}/${id}/versions/9/publish`, { method: 'POST', token: admin }),
      'not_found',
    );
    assertError(
      t,
      await h.call(`${P}/${id}/versions/abc/publish`, { method: 'POST', token: admin }),
      'not_found',
    );
    assertError(t, await h.call(`${P}/pol_nope`, { token: dev }), 'not_found');
    // Strict bodies.
    assertError(
      t,
      await h.call(`${P}/${id}/versions`, { token: dev, body: { rules: RULES_V1, extra: 1 } }),
      'invalid_request',
    );
    assertError(t, await h.call(`${P}/${id}/versions`, { token: dev, body: {} }), 'invalid_request');
    assertError(t, await h.call(P, { token: dev, body: { description: 'no name' } }), 'invalid_request');
  });

  t.test('an invalid rule set is refused with every problem, nothing stored', async (t) => {
    const id = (await h.call(P, { token: dev, body: { name: 'broken' } })).body.id as string;
    const bad = {
      mode: 'bogus',
      extra: 1,
      rules: [
        { id: 'a', [THEN]: 'block' },
        { id: 'a', [THEN]: 'nope' },
        { id: 'b', [THEN]: 'block', when: { type: 'FAX_CALL' } },
      ],
    };
    const res = await h.call(`${P}/${id}/versions`, { token: dev, body: { rules: bad } });
    assertError(t, res, 'invalid_policy');
    t.equal(res.body.error.param, 'rules');
    const problems = res.body.error.problems as { path: string; message: string }[];
    t.same(problems.map((p) => p.path).sort(), [
      'extra',
      'mode',
      'rules[1].id',
      'rules[1].then',
      'rules[2].when.type',
    ]);
    t.ok(problems.every((p) => typeof p.message === 'string' && p.message.length > 0));
    t.same((await h.call(`${P}/${id}/versions`, { token: dev })).body.data, [], 'no version stored');
    t.equal((await h.call(`${P}/${id}`, { token: dev })).body.draft_version, null);

    // YAML text with a syntax error: the problem names line and column.
    const yamlBad = await h.call(`${P}/${id}/versions`, {
      token: dev,
      body: { rules: 'rules:\n  - id: a\n   then: block\n' },
    });
    assertError(t, yamlBad, 'invalid_policy');
    t.match(yamlBad.body.error.problems[0].message, /line \d+, column \d+/);
    // Not an object at all.
    assertError(
      t,
      await h.call(`${P}/${id}/versions`, { token: dev, body: { rules: [1, 2] } }),
      'invalid_policy',
    );

    // A valid draft, then an invalid edit: the draft keeps its rules.
    const ok = await h.call(`${P}/${id}/versions`, { token: dev, body: { rules: RULES_V1 } });
    t.equal(ok.status, 201);
    const badEdit = await h.call(`${P}/${id}/versions/1/rules`, {
      method: 'PUT',
      token: dev,
      body: { rules: { rules: [{ id: 'x', [THEN]: 'block', tier: 'signed' }, { [THEN]: 'allow' }] } },
    });
    assertError(t, badEdit, 'invalid_policy');
    t.ok(badEdit.body.error.problems.length >= 2, 'both rules reported');
    const stored = (await h.call(`${P}/${id}/versions`, { token: dev })).body.data as { rules: unknown }[];
    t.same(stored[0]?.rules, RULES_V1);
  });

  t.test('roles per endpoint', async (t) => {
    const orgAdmin = a.tokens.org_admin;
    let n = 0;
    const fresh = async (): Promise<string> =>
      (await h.call(P, { token: orgAdmin, body: { name: `roles-${n++}` } })).body.id as string;
    const withDraft = async (): Promise<string> => {
      const id = await fresh();
      await h.call(`${P}/${id}/versions`, { token: orgAdmin, body: { rules: RULES_V1 } });
      return id;
    };
    const withPublished = async (): Promise<string> => {
      const id = await withDraft();
      await h.call(`${P}/${id}/versions/1/publish`, { method: 'POST', token: orgAdmin });
      return id;
    };
    const shared = await withPublished();
    type Req = { path: string; method: string; body?: unknown };
    const endpoints: { name: string; min: RoleName; ok: number; make: () => Promise<Req> }[] = [
      {
        name: 'create policy',
        min: 'developer',
        ok: 201,
        make: async () => ({ path: P, method: 'POST', body: { name: `c-${n++}` } }),
      },
      { name: 'list policies', min: 'auditor', ok: 200, make: async () => ({ path: P, method: 'GET' }) },
      {
        name: 'get policy',
        min: 'auditor',
        ok: 200,
        make: async () => ({ path: `${P}/${shared}`, method: 'GET' }),
      },
      {
        name: 'list versions',
        min: 'auditor',
        ok: 200,
        make: async () => ({ path: `${P}/${shared}/versions`, method: 'GET' }),
      },
      {
        name: 'create version',
        min: 'developer',
        ok: 201,
        make: async () => ({
          path: `${P}/${await fresh()}/versions`,
          method: 'POST',
          body: { rules: RULES_V1 },
        }),
      },
      {
        name: 'edit draft',
        min: 'developer',
        ok: 200,
        make: async () => ({
          path: `${P}/${await withDraft()}/versions/1/rules`,
          method: 'PUT',
          body: { rules: rulesOfMode('warn') },
        }),
      },
      {
        name: 'publish',
        min: 'org_admin',
        ok: 200,
        make: async () => ({ path: `${P}/${await withDraft()}/versions/1/publish`, method: 'POST' }),
      },
      {
        name: 'pull back',
        min: 'org_admin',
        ok: 200,
        make: async () => ({ path: `${P}/${await withPublished()}/versions/1/pull-back`, method: 'POST' }),
      },
      {
        name: 'assign',
        min: 'org_admin',
        ok: 201,
        make: async () => ({
          path: `${P}/${await fresh()}/assignments`,
          method: 'POST',
          body: { scope_type: 'agent', scope_id: a.agent2Uuid },
        }),
      },
      {
        name: 'list assignments',
        min: 'auditor',
        ok: 200,
        make: async () => ({ path: `${P}/${shared}/assignments`, method: 'GET' }),
      },
    ];
    for (const ep of endpoints) {
      for (const role of ROLES) {
        const req = await ep.make();
        const res = await h.call(req.path, { method: req.method, token: a.tokens[role], body: req.body });
        if (atLeast(role, ep.min))
          t.equal(res.status, ep.ok, `${ep.name} as ${role}: ${JSON.stringify(res.body)}`);
        else assertError(t, res, 'forbidden', `${ep.name} as ${role}`);
      }
      const req = await ep.make();
      assertError(
        t,
        await h.call(req.path, { method: req.method, token: a.agentKey, body: req.body }),
        'forbidden',
        `${ep.name} with an agent key`,
      );
      assertError(
        t,
        await h.call(req.path, { method: req.method, body: req.body }),
        'unauthenticated',
        `${ep.name} anonymous`,
      );
    }
    // A refused publish changed nothing.
    const id = await withDraft();
    assertError(
      t,
      await h.call(`${P}/${id}/versions/1/publish`, { method: 'POST', token: a.tokens.developer }),
      'forbidden',
    );
    t.equal((await h.call(`${P}/${id}`, { token: orgAdmin })).body.draft_version, 1);
    t.equal((await h.call(`${P}/${id}`, { token: orgAdmin })).body.active_version, null);
  });

  t.test('org isolation', async (t) => {
    const aId = (await h.call(P, { token: a.tokens.admin, body: { name: 'shared-name' } })).body.id as string;
    await h.call(`${P}/${aId}/versions`, { token: a.tokens.admin, body: { rules: RULES_V1 } });
    const bCreate = await h.call(P, { token: b.tokens.admin, body: { name: 'shared-name' } });
    t.equal(bCreate.status, 201, 'names are unique per org only');
    const bId = bCreate.body.id as string;

    const bList = (await h.call(P, { token: b.tokens.admin })).body.data as { id: string; org_id: string }[];
    t.same(
      bList.map((p) => p.id),
      [bId],
    );
    const bt = b.tokens.admin;
    assertError(t, await h.call(`${P}/${aId}`, { token: bt }), 'not_found');
    assertError(t, await h.call(`${P}/${aId}/versions`, { token: bt }), 'not_found');
    assertError(t, await h.call(`${P}/${aId}/assignments`, { token: bt }), 'not_found');
    assertError(
      t,
      await h.call(`${P}/${aId}/versions`, { token: bt, body: { rules: RULES_V1 } }),
      'not_found',
    );
    assertError(
      t,
      await h.call(`${P}/${aId}/versions/1/rules`, { method: 'PUT', token: bt, body: { rules: RULES_V1 } }),
      'not_found',
    );
    assertError(
      t,
      await h.call(`${P}/${aId}/versions/1/publish`, { method: 'POST', token: bt }),
      'not_found',
    );
    assertError(
      t,
      await h.call(`${P}/${aId}/versions/1/pull-back`, { method: 'POST', token: bt }),
      'not_found',
    );
    assertError(
      t,
      await h.call(`${P}/${aId}/assignments`, { token: bt, body: { scope_type: 'org', scope_id: b.orgId } }),
      'not_found',
    );
    // Naming another org is for super_admins only.
    assertError(t, await h.call(`${P}/${aId}?org_id=${a.orgId}`, { token: bt }), 'forbidden');
    assertError(t, await h.call(P, { token: bt, body: { name: 'sneak', org_id: a.orgId } }), 'forbidden');
    t.equal((await h.call(`${P}/${aId}`, { token: a.tokens.admin })).body.draft_version, 1, 'A untouched');

    // Assigning to another org's agent, or to another org, is 404.
    assertError(
      t,
      await h.call(`${P}/${aId}/assignments`, {
        token: a.tokens.admin,
        body: { scope_type: 'agent', scope_id: b.agentUuid },
      }),
      'not_found',
    );
    assertError(
      t,
      await h.call(`${P}/${aId}/assignments`, {
        token: a.tokens.admin,
        body: { scope_type: 'org', scope_id: b.orgId },
      }),
      'not_found',
    );

    // The super_admin (org default) reaches A's policy only by naming A.
    assertError(t, await h.call(`${P}/${aId}`, { token: h.pat }), 'not_found');
    const viaSuper = await h.call(`${P}/${aId}?org_id=${a.orgId}`, { token: h.pat });
    t.equal(viaSuper.status, 200);
    t.equal(viaSuper.body.org_id, a.orgId);
    const superCreate = await h.call(P, { token: h.pat, body: { name: 'from-super', org_id: b.orgId } });
    t.equal(superCreate.status, 201);
    t.equal(superCreate.body.org_id, b.orgId);
    const superPub = await h.call(`${P}/${aId}/versions/1/publish?org_id=${a.orgId}`, {
      method: 'POST',
      token: h.pat,
    });
    t.equal(superPub.status, 200, JSON.stringify(superPub.body));
    assertError(t, await h.call(`${P}?org_id=org_nope`, { token: h.pat }), 'not_found');
  });

  t.test('assignments decide the effective policy', async (t) => {
    const orgAdmin = a.tokens.org_admin;
    const make = async (name: string, mode: string): Promise<string> => {
      const id = (await h.call(P, { token: orgAdmin, body: { name } })).body.id as string;
      await h.call(`${P}/${id}/versions`, { token: orgAdmin, body: { rules: rulesOfMode(mode) } });
      const pub = await h.call(`${P}/${id}/versions/1/publish`, { method: 'POST', token: orgAdmin });
      t.equal(pub.status, 200);
      return id;
    };
    // Nothing assigned in B: the default policy.
    t.same(h.policies.effective(b.orgId, b.agentUuid), {
      policy: DEFAULT_POLICY,
      policy_id: null,
      version_no: null,
    });

    const orgWide = await make('org-wide', 'observe');
    const assigned = await h.call(`${P}/${orgWide}/assignments`, {
      token: orgAdmin,
      body: { scope_type: 'org', scope_id: a.orgId },
    });
    t.equal(assigned.status, 201, JSON.stringify(assigned.body));
    t.match(assigned.body, { policy_id: orgWide, scope_type: 'org', scope_id: a.orgId, org_id: a.orgId });
    t.match(assigned.body.id, /^pas_/);
    t.equal(h.policies.effective(a.orgId, a.agentUuid).policy_id, orgWide);
    t.equal(h.policies.effective(a.orgId, a.agent2Uuid).policy.mode, 'observe');

    const agentOnly = await make('agent-only', 'lockdown');
    // An agent is named by its agent_id (as everywhere an operator writes one) or its UUID; the
    // assignment records the UUID either way.
    const byName = await h.call(`${P}/${agentOnly}/assignments`, {
      token: orgAdmin,
      body: { scope_type: 'agent', scope_id: 'alpha-one' },
    });
    t.equal(byName.status, 201, JSON.stringify(byName.body));
    t.equal(byName.body.scope_id, a.agentUuid);
    assertError(
      t,
      await h.call(`${P}/${agentOnly}/assignments`, {
        token: orgAdmin,
        body: { scope_type: 'agent', scope_id: 'beta-one' },
      }),
      'not_found',
      "another org's agent_id is missing here",
    );
    await h.call(`${P}/${agentOnly}/assignments`, {
      token: orgAdmin,
      body: { scope_type: 'agent', scope_id: a.agentUuid },
    });
    t.equal((await h.call(`${P}/${agentOnly}/assignments`, { token: orgAdmin })).body.data.length, 1);
    let e1 = h.policies.effective(a.orgId, a.agentUuid);
    t.equal(e1.policy_id, agentOnly, 'the agent assignment wins');
    t.equal(e1.policy.mode, 'lockdown');
    t.equal(e1.version_no, 1);
    t.equal(h.policies.effective(a.orgId, a.agent2Uuid).policy_id, orgWide, 'other agents keep the org one');
    t.equal(h.policies.effective(b.orgId, b.agentUuid).policy, DEFAULT_POLICY, 'B is untouched');

    // Publishing a new org-wide version takes effect on the next resolution.
    await h.call(`${P}/${orgWide}/versions`, { token: orgAdmin, body: { rules: rulesOfMode('warn') } });
    await h.call(`${P}/${orgWide}/versions/2/publish`, { method: 'POST', token: orgAdmin });
    const e2 = h.policies.effective(a.orgId, a.agent2Uuid);
    t.equal(e2.version_no, 2);
    t.equal(e2.policy.mode, 'warn');

    // Pulling back the agent's only version: the agent falls back to the org policy.
    await h.call(`${P}/${agentOnly}/versions/1/pull-back`, { method: 'POST', token: orgAdmin });
    e1 = h.policies.effective(a.orgId, a.agentUuid);
    t.equal(e1.policy_id, orgWide);
    t.equal(e1.version_no, 2);

    // The latest org assignment replaces the older one.
    const newer = await make('newer', 'enforce');
    await h.call(`${P}/${newer}/assignments`, {
      token: orgAdmin,
      body: { scope_type: 'org', scope_id: a.orgId },
    });
    t.equal(h.policies.effective(a.orgId, a.agent2Uuid).policy_id, newer);
    t.same((await h.call(`${P}/${orgWide}/assignments`, { token: a.tokens.auditor })).body.data, []);
    const listed = (await h.call(`${P}/${newer}/assignments`, { token: a.tokens.auditor })).body.data;
    t.same(
      (listed as { scope_type: string; scope_id: string }[]).map((x) => [x.scope_type, x.scope_id]),
      [['org', a.orgId]],
    );

    // Bad scopes.
    assertError(
      t,
      await h.call(`${P}/${newer}/assignments`, {
        token: orgAdmin,
        body: { scope_type: 'team', scope_id: 'x' },
      }),
      'invalid_request',
    );
    assertError(
      t,
      await h.call(`${P}/${newer}/assignments`, {
        token: orgAdmin,
        body: { scope_type: 'agent', scope_id: 'not-an-agent' },
      }),
      'not_found',
    );
  });

  t.test('every change is an admin.policy_* event in the org chain', async (t) => {
    const admin2 = a.tokens.admin;
    const me = (await h.call('/api/me', { token: admin2 })).body.id as string;
    const before = adminEvents(h.audit, a.orgId).length;
    const id = (await h.call(P, { token: admin2, body: { name: 'audited' } })).body.id as string;
    await h.call(`${P}/${id}/versions`, { token: admin2, body: { rules: RULES_V1 } });
    await h.call(`${P}/${id}/versions/1/rules`, {
      method: 'PUT',
      token: admin2,
      body: { rules: rulesOfMode('warn') },
    });
    await h.call(`${P}/${id}/versions/1/publish`, { method: 'POST', token: admin2 });
    await h.call(`${P}/${id}/assignments`, {
      token: admin2,
      body: { scope_type: 'agent', scope_id: a.agent2Uuid },
    });
    await h.call(`${P}/${id}/versions/1/pull-back`, { method: 'POST', token: admin2 });
    // Refused changes write nothing.
    await h.call(`${P}/${id}/versions`, { token: admin2, body: { rules: { rules: 'nope' } } });
    await h.call(`${P}/${id}/versions/1/publish`, { method: 'POST', token: a.tokens.developer });

    const events = adminEvents(h.audit, a.orgId).slice(before);
    t.same(
      events.map((e) => e.event_type),
      [
        'admin.policy_created',
        'admin.policy_version_drafted',
        'admin.policy_draft_updated',
        'admin.policy_published',
        'admin.policy_assigned',
        'admin.policy_pulled_back',
      ],
    );
    for (const e of events) {
      t.equal(e.org_id, a.orgId);
      t.equal(e.details.policy_id, id, `${e.event_type} names the policy`);
      t.equal(e.details.actor, me, `${e.event_type} names the actor`);
      t.ok('version_no' in e.details, `${e.event_type} carries version_no`);
    }
    t.same(
      events.map((e) => e.details.version_no),
      [null, 1, 1, 1, 1, 1],
    );
    t.equal(events[4]?.details.scope_id, a.agent2Uuid);
    t.equal(events[5]?.details.active_version, null);
    t.same(
      adminEvents(h.audit, b.orgId).filter((e) => e.details.policy_id === id),
      [],
      'nothing in B',
    );
  });
});
