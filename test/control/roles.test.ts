import { join } from 'node:path';
import type { Test } from 'tap';
import t from 'tap';
import { ERROR_CATALOG, type ErrorCode } from '../../src/core/errors.js';
import { openStore } from '../../src/store/db.js';
import { ENGINES, type Engine, startService, type TestService } from '../helpers/service.js';

type Res = Awaited<ReturnType<TestService['call']>>;

/** Lowest first; written out here so the test does not take its expectations from the code under test. */
const ORDER = ['requester', 'auditor', 'developer', 'org_admin', 'admin', 'super_admin'] as const;
type RoleName = (typeof ORDER)[number];
const atLeast = (role: RoleName, min: RoleName): boolean => ORDER.indexOf(role) >= ORDER.indexOf(min);

const SECRET_RE = /gk_(?:pat|agent)_[A-Za-z0-9]{40}/;
const ERROR_KEYS = new Set(['type', 'code', 'message', 'request_id', 'param']);

function assertError(t: Test, res: Res, code: ErrorCode, param?: string): void {
  const entry = ERROR_CATALOG[code];
  t.equal(res.status, entry.status, `status ${entry.status} (${code})`);
  t.same(Object.keys(res.body ?? {}).sort(), ['error', 'type'], 'error body has exactly type and error');
  t.equal(res.body?.type, 'error');
  const e = res.body?.error ?? {};
  t.ok(
    Object.keys(e).every((k) => ERROR_KEYS.has(k)),
    `no extra error fields: ${Object.keys(e).join(',')}`,
  );
  t.equal(e.code, code);
  t.equal(e.type, entry.type);
  t.equal(typeof e.message, 'string');
  t.equal(e.request_id, res.headers.get('x-request-id'), 'request_id equals X-Request-Id');
  if (param !== undefined) t.equal(e.param, param);
}

/** Calls with the credential in X-API-Key instead of Authorization. */
function withApiKey(svc: TestService, path: string, key: string, body?: unknown): Promise<Res> {
  return svc.call(path, { headers: { 'x-api-key': key }, ...(body === undefined ? {} : { body }) });
}

function chat(svc: TestService, token: string, headers: Record<string, string> = {}): Promise<Res> {
  return svc.call('/v1/chat/completions', {
    token,
    headers,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
  });
}

/** Rewrites stored credentials so they expired a minute ago (the service must be stopped). */
async function expireCredentials(dataDir: string, credentialIds: readonly string[]): Promise<void> {
  const store = openStore(join(dataDir, 'data'));
  try {
    for (const id of credentialIds) {
      const hash = store.credentials.get(`id:${id}`) as string | undefined;
      if (hash === undefined) throw new Error(`credential ${id} not in the store`);
      const record = store.credentials.get(hash) as Record<string, unknown>;
      store.credentials.putSync(hash, { ...record, expires_at: new Date(Date.now() - 60_000).toISOString() });
    }
  } finally {
    await store.close();
  }
}

function runMatrix(engine: Engine): void {
  t.test(`auth and role matrix (${engine})`, async (t) => {
    const svc = await startService({ engine });
    t.teardown(() => svc.close());

    const me = await svc.call('/api/me', { token: svc.agentKey });
    const defaultAgentUuid = me.body.id as string;
    const first = await chat(svc, svc.agentKey);
    const pipelineId = new URL(first.body.service.audit_url as string).pathname.split('/').pop() as string;

    // One user and one PAT per role, all in org `default`, issued by the bootstrap super_admin.
    const users = new Map<RoleName, { userId: string; pat: string; tokenId: string }>();
    for (const role of ORDER) {
      const u = await svc.call('/api/users', { token: svc.pat, body: { email: `${role}@roles.test`, role } });
      if (u.status !== 201) throw new Error(`user ${role}: ${JSON.stringify(u.body)}`);
      const tok = await svc.call('/api/tokens', {
        token: svc.pat,
        body: { name: role, user_id: u.body.user_id },
      });
      if (tok.status !== 201) throw new Error(`token ${role}: ${JSON.stringify(tok.body)}`);
      users.set(role, { userId: u.body.user_id, pat: tok.body.token, tokenId: tok.body.token_id });
    }
    const user = (role: RoleName): { userId: string; pat: string; tokenId: string } => {
      const u = users.get(role);
      if (!u) throw new Error(role);
      return u;
    };

    t.test('no credential is 401 unauthenticated with WWW-Authenticate', async (t) => {
      for (const [path, body] of [
        ['/api/me', undefined],
        ['/api/agents', undefined],
        ['/api/orgs', { name: 'nobody' }],
        ['/v1/chat/completions', { model: 'mock-echo', messages: [{ role: 'user', content: 'x' }] }],
      ] as const) {
        const res = await svc.call(path, body === undefined ? {} : { body });
        assertError(t, res, 'unauthenticated');
        t.match(res.headers.get('www-authenticate'), /^Bearer/, `${path}: WWW-Authenticate`);
      }
      const basic = await svc.call('/api/me', { headers: { authorization: 'Basic dXNlcjpwYXNz' } });
      assertError(t, basic, 'unauthenticated');
    });

    t.test('garbage credentials are 401', async (t) => {
      const garbage = [
        'not-a-key',
        `gk_pat_${'A'.repeat(40)}`,
        `gk_agent_${'b'.repeat(40)}`,
        `${svc.pat}x`,
        svc.pat.slice(0, -1),
      ];
      for (const g of garbage) {
        const res = await svc.call('/api/me', { token: g });
        assertError(t, res, 'unauthenticated');
        t.match(res.headers.get('www-authenticate'), /^Bearer/);
        const viaKey = await withApiKey(svc, '/api/me', g);
        assertError(t, viaKey, 'unauthenticated');
        const data = await chat(svc, g);
        assertError(t, data, 'unauthenticated');
      }
    });

    t.test('Authorization: Bearer and X-API-Key are both accepted', async (t) => {
      const a = await svc.call('/api/me', { token: svc.pat });
      t.equal(a.status, 200);
      t.equal(a.body.kind, 'user');
      t.equal(a.body.role, 'super_admin');
      const b = await withApiKey(svc, '/api/me', svc.pat);
      t.equal(b.status, 200);
      t.equal(b.body.id, a.body.id);
      const lower = await svc.call('/api/me', { headers: { authorization: `bearer ${svc.pat}` } });
      t.equal(lower.status, 200, 'the scheme is case-insensitive');
      const c = await chat(svc, svc.agentKey);
      t.equal(c.status, 200);
      const d = await svc.call('/v1/chat/completions', {
        headers: { 'x-api-key': svc.agentKey },
        body: { model: 'mock-echo', messages: [{ role: 'user', content: 'via x-api-key' }] },
      });
      t.equal(d.status, 200);
      t.equal(d.body.choices[0].message.content.includes('via x-api-key'), true);
      // Two different credentials: refused, not one of them used without a word.
      const both = await svc.call('/api/me', { token: svc.pat, headers: { 'x-api-key': svc.agentKey } });
      t.equal(both.status, 400, JSON.stringify(both.body));
      t.equal(both.body.error.code, 'invalid_request');
      t.equal(both.body.error.param, 'x-api-key');
      t.notMatch(JSON.stringify(both.body), svc.agentKey, 'neither is echoed');
      const badBearer = await svc.call('/api/me', {
        token: 'gk_pat_nope',
        headers: { 'x-api-key': svc.agentKey },
      });
      t.equal(badBearer.status, 400, 'whichever of the two is valid');
      const same = await svc.call('/api/me', { token: svc.agentKey, headers: { 'x-api-key': svc.agentKey } });
      t.equal(same.status, 200, 'the same credential in both is one credential');
    });

    t.test('/api/me works for an agent key and reports kind agent', async (t) => {
      t.equal(me.status, 200);
      t.equal(me.body.kind, 'agent');
      t.equal(me.body.org_id, 'default');
      t.equal(me.body.role, null);
      t.equal(me.body.agent_id, 'default-agent');
      t.match(me.body.id, /^[0-9a-f-]{36}$/);
    });

    t.test('agent keys are refused on every /api provisioning route with 403', async (t) => {
      const routes: [string, string, unknown][] = [
        ['POST', '/api/orgs', { name: 'agent-org' }],
        ['GET', '/api/orgs', undefined],
        ['POST', '/api/users', { email: 'agent-made@x.test', role: 'requester' }],
        ['POST', '/api/tokens', { name: 'agent-token' }],
        ['DELETE', `/api/tokens/${user('requester').tokenId}`, undefined],
        ['POST', '/api/agents/onboard', { agent_id: 'agent-made' }],
        ['GET', '/api/agents', undefined],
        ['GET', `/api/agents/${defaultAgentUuid}`, undefined],
        ['POST', `/api/agents/${defaultAgentUuid}/keys`, {}],
        ['DELETE', `/api/agents/${defaultAgentUuid}/keys/key_whatever`, undefined],
        ['GET', '/api/settings/providers', undefined],
        ['PUT', '/api/settings/providers', { providers: [{ name: 'mock' }] }],
        ['GET', `/api/audit/pipeline/${pipelineId}`, undefined],
      ];
      for (const [method, path, body] of routes) {
        const res = await svc.call(path, {
          method,
          token: svc.agentKey,
          ...(body === undefined ? {} : { body }),
        });
        t.equal(res.status, 403, `${method} ${path}`);
        assertError(t, res, 'forbidden');
      }
      const viaKey = await withApiKey(svc, '/api/agents', svc.agentKey);
      assertError(t, viaKey, 'forbidden');
      const still = await svc.call('/api/me', { token: user('requester').pat });
      t.equal(still.status, 200, 'the token the agent tried to revoke still works');
    });

    t.test('each role reports itself on /api/me', async (t) => {
      for (const role of ORDER) {
        const res = await svc.call('/api/me', { token: user(role).pat });
        t.equal(res.status, 200);
        t.equal(res.body.kind, 'user');
        t.equal(res.body.role, role);
        t.equal(res.body.id, user(role).userId);
        t.equal(res.body.org_id, 'default');
        t.equal(res.body.email, `${role}@roles.test`);
      }
    });

    t.test('allowed and forbidden pairs per role', async (t) => {
      interface Case {
        readonly name: string;
        readonly min: RoleName;
        readonly ok: number;
        readonly run: (role: RoleName, pat: string) => Promise<Res>;
      }
      const cases: Case[] = [
        {
          name: 'POST /api/orgs',
          min: 'super_admin',
          ok: 201,
          run: (r, p) => svc.call('/api/orgs', { token: p, body: { name: `by-${r}` } }),
        },
        {
          name: 'GET /api/orgs',
          min: 'super_admin',
          ok: 200,
          run: (_r, p) => svc.call('/api/orgs', { token: p }),
        },
        {
          name: 'POST /api/users',
          min: 'org_admin',
          ok: 201,
          run: (r, p) =>
            svc.call('/api/users', {
              token: p,
              body: { email: `made-by-${r}@roles.test`, role: 'requester' },
            }),
        },
        {
          name: 'POST /api/agents/onboard',
          min: 'developer',
          ok: 201,
          run: (r, p) =>
            svc.call('/api/agents/onboard', {
              token: p,
              body: { agent_id: `agent-by-${r.replace('_', '-')}` },
            }),
        },
        {
          name: 'POST /api/agents/:uuid/keys',
          min: 'developer',
          ok: 201,
          run: (_r, p) => svc.call(`/api/agents/${defaultAgentUuid}/keys`, { token: p, body: { name: 'k' } }),
        },
        {
          name: 'GET /api/agents',
          min: 'auditor',
          ok: 200,
          run: (_r, p) => svc.call('/api/agents', { token: p }),
        },
        {
          name: 'GET /api/agents/:uuid',
          min: 'auditor',
          ok: 200,
          run: (_r, p) => svc.call(`/api/agents/${defaultAgentUuid}`, { token: p }),
        },
        {
          name: 'PUT /api/settings/providers',
          min: 'org_admin',
          ok: 200,
          run: (_r, p) =>
            svc.call('/api/settings/providers', {
              method: 'PUT',
              token: p,
              body: { providers: [{ name: 'mock' }] },
            }),
        },
        {
          name: 'GET /api/settings/providers',
          min: 'org_admin',
          ok: 200,
          run: (_r, p) => svc.call('/api/settings/providers', { token: p }),
        },
        {
          name: 'GET /api/audit/pipeline/:id',
          min: 'auditor',
          ok: 200,
          run: (_r, p) => svc.call(`/api/audit/pipeline/${pipelineId}`, { token: p }),
        },
        {
          name: 'POST /api/tokens (own)',
          min: 'requester',
          ok: 201,
          run: (r, p) => svc.call('/api/tokens', { token: p, body: { name: `own-${r}` } }),
        },
      ];
      for (const c of cases) {
        for (const role of ORDER) {
          const res = await c.run(role, user(role).pat);
          if (atLeast(role, c.min)) {
            t.equal(res.status, c.ok, `${c.name} as ${role}: allowed`);
          } else {
            t.equal(res.status, 403, `${c.name} as ${role}: forbidden`);
            t.equal(res.body?.error?.code, 'forbidden', `${c.name} as ${role}: code forbidden`);
          }
        }
      }
      const listed = await svc.call('/api/agents', { token: user('auditor').pat });
      const names = (listed.body.data as { agent_id: string }[]).map((a) => a.agent_id).sort();
      t.same(names, [
        'agent-by-admin',
        'agent-by-developer',
        'agent-by-org-admin',
        'agent-by-super-admin',
        'default-agent',
      ]);
    });

    t.test('POST /api/users never grants a role above the caller', async (t) => {
      for (const caller of ['org_admin', 'admin', 'super_admin'] as const) {
        for (const target of ORDER) {
          const res = await svc.call('/api/users', {
            token: user(caller).pat,
            body: { email: `g-${caller}-${target}@roles.test`, role: target },
          });
          if (atLeast(caller, target)) {
            t.equal(res.status, 201, `${caller} grants ${target}`);
            t.equal(res.body.role, target);
            t.equal(res.body.org_id, 'default');
          } else {
            assertError(t, res, 'forbidden', 'role');
          }
        }
      }
    });

    t.test('only admins may act for an agent with their PAT', async (t) => {
      for (const role of ORDER) {
        const res = await chat(svc, user(role).pat, { 'x-agent-id': 'default-agent' });
        if (atLeast(role, 'admin')) {
          t.equal(res.status, 200, `${role} acts for default-agent`);
        } else {
          assertError(t, res, 'forbidden');
        }
      }
      const unnamed = await chat(svc, user('admin').pat);
      assertError(t, unnamed, 'invalid_request', 'X-Agent-Id');
    });

    t.test('a PAT with a narrower role acts with that role', async (t) => {
      const narrow = await svc.call('/api/tokens', {
        token: svc.pat,
        body: { name: 'narrow', user_id: user('admin').userId, role: 'auditor' },
      });
      t.equal(narrow.status, 201);
      t.equal(narrow.body.role, 'auditor');
      const pat = narrow.body.token as string;
      const meRes = await svc.call('/api/me', { token: pat });
      t.equal(meRes.body.role, 'auditor');
      t.equal(meRes.body.id, user('admin').userId);
      t.equal((await svc.call('/api/agents', { token: pat })).status, 200, 'auditor may list agents');
      t.equal((await svc.call(`/api/audit/pipeline/${pipelineId}`, { token: pat })).status, 200);
      assertError(
        t,
        await svc.call('/api/agents/onboard', { token: pat, body: { agent_id: 'narrow-agent' } }),
        'forbidden',
      );
      assertError(t, await svc.call('/api/settings/providers', { token: pat }), 'forbidden');
      assertError(
        t,
        await svc.call('/api/users', { token: pat, body: { email: 'narrow@roles.test', role: 'requester' } }),
        'forbidden',
      );
      assertError(t, await chat(svc, pat, { 'x-agent-id': 'default-agent' }), 'forbidden');

      const selfNarrow = await svc.call('/api/tokens', {
        token: user('org_admin').pat,
        body: { name: 'self', role: 'developer' },
      });
      t.equal(selfNarrow.status, 201);
      t.equal(selfNarrow.body.role, 'developer');
      const dev = selfNarrow.body.token as string;
      t.equal(
        (await svc.call('/api/agents/onboard', { token: dev, body: { agent_id: 'narrow-dev' } })).status,
        201,
      );
      assertError(t, await svc.call('/api/settings/providers', { token: dev }), 'forbidden');
    });

    t.test('a narrowed token mints nothing above itself: not its role, not its lifetime', async (t) => {
      const narrowed = await svc.call('/api/tokens', {
        token: user('admin').pat,
        body: { name: 'ci', role: 'requester', expires_days: 1 },
      });
      t.equal(narrowed.status, 201);
      const ci = narrowed.body.token as string;
      const minted = await svc.call('/api/tokens', { token: ci, body: { name: 'minted' } });
      t.equal(minted.status, 201, JSON.stringify(minted.body));
      t.equal(minted.body.role, 'requester', "the issuing token's role, not the user's");
      t.equal(minted.body.expires_at, narrowed.body.expires_at, "and at most the issuing token's lifetime");
      t.equal((await svc.call('/api/me', { token: minted.body.token })).body.role, 'requester');
      const longer = await svc.call('/api/tokens', { token: ci, body: { name: 'longer', expires_days: 30 } });
      t.equal(longer.body.expires_at, narrowed.body.expires_at);
      assertError(
        t,
        await svc.call('/api/tokens', { token: ci, body: { name: 'up', role: 'admin' } }),
        'forbidden',
        'role',
      );
    });

    t.test('a token cannot carry a role above its user (400)', async (t) => {
      const above = await svc.call('/api/tokens', {
        token: svc.pat,
        body: { name: 'too-high', user_id: user('developer').userId, role: 'admin' },
      });
      assertError(t, above, 'invalid_request', 'role');
      const own = await svc.call('/api/tokens', {
        token: user('auditor').pat,
        body: { name: 'mine', role: 'developer' },
      });
      assertError(t, own, 'invalid_request', 'role');
      const same = await svc.call('/api/tokens', {
        token: user('auditor').pat,
        body: { name: 'mine', role: 'auditor' },
      });
      t.equal(same.status, 201);
      const bogus = await svc.call('/api/tokens', { token: svc.pat, body: { name: 'x', role: 'emperor' } });
      assertError(t, bogus, 'invalid_request', 'role');
      const other = await svc.call('/api/tokens', {
        token: user('developer').pat,
        body: { name: 'for-someone-else', user_id: user('requester').userId },
      });
      assertError(t, other, 'forbidden', 'user_id');
    });

    t.test('issuing a token for another user never yields a role above the caller', async (t) => {
      for (const caller of ['org_admin', 'admin'] as const) {
        for (const target of ORDER) {
          if (atLeast(caller, target)) continue;
          const res = await svc.call('/api/tokens', {
            token: user(caller).pat,
            body: { name: `by-${caller}-for-${target}`, user_id: user(target).userId },
          });
          if (res.status !== 201) {
            assertError(t, res, 'forbidden');
            continue;
          }
          // If a token is issued at all, it must be capped at the caller's own role.
          const meRes = await svc.call('/api/me', { token: res.body.token as string });
          t.ok(
            atLeast(caller, meRes.body.role as RoleName),
            `${caller} minted a token for a ${target}: it acts as ${meRes.body.role}, above ${caller}`,
          );
        }
      }
    });

    t.test('nobody can hold or revoke a token of a user ranked above them', async (t) => {
      // A token names its user: one minted for a higher-ranked user, even narrowed to the
      // caller's role, would act (and be recorded) as that user and could revoke their tokens.
      for (const caller of ['org_admin', 'admin'] as const) {
        for (const target of ORDER) {
          if (atLeast(caller, target)) continue;
          const res = await svc.call('/api/tokens', {
            token: user(caller).pat,
            body: { name: `as-${target}`, user_id: user(target).userId, role: caller },
          });
          assertError(t, res, 'forbidden', 'user_id');
        }
      }
      const below = await svc.call('/api/tokens', {
        token: user('org_admin').pat,
        body: { name: 'for-dev', user_id: user('developer').userId },
      });
      t.equal(below.status, 201, 'a user ranked below the caller still gets one');

      // A narrowed token cannot disable its own user's broader tokens; it can revoke itself.
      const narrow = await svc.call('/api/tokens', {
        token: user('admin').pat,
        body: { name: 'narrow-self', role: 'requester' },
      });
      t.equal(narrow.status, 201);
      const narrowPat = narrow.body.token as string;
      assertError(
        t,
        await svc.call(`/api/tokens/${user('admin').tokenId}`, { method: 'DELETE', token: narrowPat }),
        'not_found',
      );
      t.equal((await svc.call('/api/me', { token: user('admin').pat })).status, 200, 'the admin PAT works');
      const self = await svc.call(`/api/tokens/${narrow.body.token_id}`, {
        method: 'DELETE',
        token: narrowPat,
      });
      t.equal(self.status, 200);
      assertError(t, await svc.call('/api/me', { token: narrowPat }), 'unauthenticated');
    });

    t.test('revoked PAT is 401', async (t) => {
      const issued = await svc.call('/api/tokens', {
        token: svc.pat,
        body: { name: 'to-revoke', user_id: user('developer').userId },
      });
      const pat = issued.body.token as string;
      t.equal((await svc.call('/api/me', { token: pat })).status, 200);
      t.equal((await svc.call('/api/agents', { token: pat })).status, 200);
      const del = await svc.call(`/api/tokens/${issued.body.token_id}`, { method: 'DELETE', token: svc.pat });
      t.equal(del.status, 200);
      t.same(del.body, { token_id: issued.body.token_id, revoked: true });
      for (const path of ['/api/me', '/api/agents']) {
        const res = await svc.call(path, { token: pat });
        assertError(t, res, 'unauthenticated');
        t.match(res.headers.get('www-authenticate'), /^Bearer/);
        assertError(t, await withApiKey(svc, path, pat), 'unauthenticated');
      }
      t.equal(
        (await svc.call('/api/me', { token: user('developer').pat })).status,
        200,
        "the user's other PAT still works",
      );

      // A user may revoke their own token; a requester cannot touch someone else's.
      const mine = await svc.call('/api/tokens', { token: user('requester').pat, body: { name: 'mine' } });
      const foreign = await svc.call(`/api/tokens/${user('auditor').tokenId}`, {
        method: 'DELETE',
        token: user('requester').pat,
      });
      assertError(t, foreign, 'not_found');
      t.equal((await svc.call('/api/me', { token: user('auditor').pat })).status, 200);
      const own = await svc.call(`/api/tokens/${mine.body.token_id}`, {
        method: 'DELETE',
        token: user('requester').pat,
      });
      t.equal(own.status, 200);
      assertError(t, await svc.call('/api/me', { token: mine.body.token as string }), 'unauthenticated');
    });

    t.test('revoked agent key is 401; the agent keeps its other keys', async (t) => {
      const created = await svc.call(`/api/agents/${defaultAgentUuid}/keys`, {
        token: svc.pat,
        body: { name: 'to-revoke' },
      });
      t.equal(created.status, 201);
      const key = created.body.api_key as string;
      t.equal((await chat(svc, key)).status, 200);
      t.equal((await svc.call('/api/me', { token: key })).body.kind, 'agent');
      const del = await svc.call(`/api/agents/${defaultAgentUuid}/keys/${created.body.key_id}`, {
        method: 'DELETE',
        token: svc.pat,
      });
      t.equal(del.status, 200);
      t.same(del.body, { key_id: created.body.key_id, revoked: true });
      const after = await chat(svc, key);
      assertError(t, after, 'unauthenticated');
      t.match(after.headers.get('www-authenticate'), /^Bearer/);
      assertError(t, await svc.call('/api/me', { token: key }), 'unauthenticated');
      t.equal((await chat(svc, svc.agentKey)).status, 200, 'the first-start key still works');
      const again = await svc.call(`/api/agents/${defaultAgentUuid}/keys/${created.body.key_id}`, {
        method: 'DELETE',
        token: svc.pat,
      });
      t.equal(again.status, 200, 'revoking twice is harmless');
      const unknown = await svc.call(`/api/agents/${defaultAgentUuid}/keys/key_doesnotexist`, {
        method: 'DELETE',
        token: svc.pat,
      });
      assertError(t, unknown, 'not_found');
      const patAsKey = await svc.call(`/api/agents/${defaultAgentUuid}/keys/${user('requester').tokenId}`, {
        method: 'DELETE',
        token: svc.pat,
      });
      assertError(t, patAsKey, 'not_found');
      t.equal(
        (await svc.call('/api/me', { token: user('requester').pat })).status,
        200,
        'a PAT is not revoked as a key',
      );
    });

    t.test('a short provider key is masked whole: its last four would be most of it', async (t) => {
      const put = await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: svc.pat,
        body: { providers: [{ name: 'anthropic', api_key: 'sk-ab12345' }, { name: 'mock' }] },
      });
      t.equal(put.status, 200, JSON.stringify(put.body));
      t.equal(put.body.providers[0].api_key, '****');
      t.notOk(JSON.stringify(put.body).includes('2345'), 'no part of the key is shown');
      const echoed = await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: svc.pat,
        body: { providers: [{ name: 'anthropic', api_key: '****' }, { name: 'mock' }] },
      });
      t.equal(echoed.status, 200, 'the whole mask echoes the stored key');
      t.equal(echoed.body.providers[0].api_key, '****');
    });

    t.test('secrets are shown once: creation answers carry them, GET answers never do', async (t) => {
      const tok = await svc.call('/api/tokens', { token: svc.pat, body: { name: 'shown-once' } });
      t.match(tok.body.token, /^gk_pat_[A-Za-z0-9]{40}$/);
      t.equal(tok.body.last4, (tok.body.token as string).slice(-4));
      t.match(tok.body.token_id, /^tok_/);
      const onboard = await svc.call('/api/agents/onboard', {
        token: svc.pat,
        body: { agent_id: 'shown-once' },
      });
      t.equal(onboard.status, 201);
      const agentKey = onboard.body.api_key.api_key as string;
      t.match(agentKey, /^gk_agent_[A-Za-z0-9]{40}$/);
      t.equal(onboard.body.api_key.last4, agentKey.slice(-4));
      t.match(onboard.body.api_key.key_id, /^key_/);
      const extra = await svc.call(`/api/agents/${onboard.body.agent_uuid}/keys`, {
        token: svc.pat,
        body: {},
      });
      t.equal(extra.status, 201);
      t.match(extra.body.api_key, /^gk_agent_[A-Za-z0-9]{40}$/);
      t.equal(extra.body.last4, (extra.body.api_key as string).slice(-4));

      const providerSecret = 'sk-roles-provider-secret-7788';
      const put = await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: svc.pat,
        body: { providers: [{ name: 'openai', api_key: providerSecret }, { name: 'mock' }] },
      });
      t.equal(put.status, 200);
      t.notOk(JSON.stringify(put.body).includes(providerSecret), 'PUT answer has no provider key');
      t.same(put.body.providers, [
        { name: 'openai', base_url: 'https://api.openai.com/v1', models: [], api_key: '****7788' },
        { name: 'mock', base_url: null, models: [], api_key: null },
      ]);
      const got = await svc.call('/api/settings/providers', { token: svc.pat });
      t.same(got.body, put.body);
      const echoed = await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: svc.pat,
        body: { providers: [{ name: 'openai', api_key: '****7788' }, { name: 'mock' }] },
      });
      t.equal(echoed.status, 200, 'the masked key may be sent back unchanged');
      t.equal(echoed.body.providers[0].api_key, '****7788');
      // A mask that is not this key's (another provider's, or a key changed meanwhile) is refused:
      // stored as given, it would replace the key with a string that still looks like a mask.
      const wrongMask = await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: svc.pat,
        body: { providers: [{ name: 'openai', api_key: '****9999' }, { name: 'mock' }] },
      });
      assertError(t, wrongMask, 'invalid_request', 'providers[0].api_key');
      t.match(wrongMask.body.error.message, /mask/);
      t.equal(
        (await svc.call('/api/settings/providers', { token: svc.pat })).body.providers[0].api_key,
        '****7788',
        'the stored key is kept',
      );
      // A key the caller can only see masked must not follow a new destination: they would
      // receive it in clear with the next call.
      for (const api_key of ['****7788', undefined]) {
        const moved = await svc.call('/api/settings/providers', {
          method: 'PUT',
          token: svc.pat,
          body: {
            providers: [
              { name: 'openai', base_url: 'https://collector.example/v1', api_key },
              { name: 'mock' },
            ],
          },
        });
        assertError(t, moved, 'invalid_request', 'providers[0].api_key');
      }
      const after = await svc.call('/api/settings/providers', { token: svc.pat });
      t.equal(after.body.providers[0].base_url, 'https://api.openai.com/v1', 'the destination is unchanged');

      const secrets = [
        svc.pat,
        svc.agentKey,
        tok.body.token,
        agentKey,
        extra.body.api_key,
        providerSecret,
        user('admin').pat,
      ];
      const gets = [
        '/api/me',
        '/api/orgs',
        '/api/agents',
        '/api/agents?limit=1000',
        `/api/agents/${onboard.body.agent_uuid}`,
        `/api/agents/${defaultAgentUuid}`,
        '/api/settings/providers',
        `/api/audit/pipeline/${pipelineId}`,
      ];
      for (const path of gets) {
        const res = await svc.call(path, { token: svc.pat });
        t.equal(res.status, 200, path);
        const text = JSON.stringify(res.body);
        t.notMatch(text, SECRET_RE, `${path}: no credential secret`);
        t.notOk(
          secrets.some((s) => text.includes(s)),
          `${path}: none of the issued secrets`,
        );
      }
      const agentMe = await svc.call('/api/me', { token: agentKey });
      t.notMatch(JSON.stringify(agentMe.body), SECRET_RE);
      const reset = await svc.call('/api/settings/providers', {
        method: 'PUT',
        token: svc.pat,
        body: { providers: [{ name: 'mock' }] },
      });
      t.equal(reset.status, 200);
    });
  });

  t.test(`expired credentials are 401 (${engine})`, async (t) => {
    const svc = await startService({ engine });
    let closed = false;
    t.teardown(async () => {
      if (!closed) await svc.close();
    });
    const pat = await svc.call('/api/tokens', { token: svc.pat, body: { name: 'short', expires_days: 1 } });
    t.equal(pat.status, 201);
    t.ok(Date.parse(pat.body.expires_at) > Date.now(), 'expires_at is in the future');
    const agent = await svc.call('/api/agents/onboard', {
      token: svc.pat,
      body: { agent_id: 'short-lived' },
    });
    const key = await svc.call(`/api/agents/${agent.body.agent_uuid}/keys`, {
      token: svc.pat,
      body: { expires_days: 1 },
    });
    t.equal(key.status, 201);
    t.equal((await svc.call('/api/me', { token: pat.body.token })).status, 200);
    t.equal((await chat(svc, key.body.api_key)).status, 200);

    const bootstrapPat = svc.pat;
    const agentKey = svc.agentKey;
    await svc.close(true);
    closed = true;
    await expireCredentials(svc.dataDir, [pat.body.token_id, key.body.key_id]);
    const again = await startService({ engine, dataDir: svc.dataDir });
    t.teardown(() => again.close());

    t.equal(
      (await again.call('/api/me', { token: bootstrapPat })).status,
      200,
      'unexpired PAT survives the restart',
    );
    t.equal((await chat(again, agentKey)).status, 200, 'unexpired agent key survives the restart');
    const expiredPat = await again.call('/api/me', { token: pat.body.token });
    assertError(t, expiredPat, 'unauthenticated');
    t.match(expiredPat.headers.get('www-authenticate'), /^Bearer/);
    assertError(t, await withApiKey(again, '/api/me', pat.body.token), 'unauthenticated');
    assertError(t, await chat(again, key.body.api_key), 'unauthenticated');
    assertError(t, await again.call('/api/me', { token: key.body.api_key }), 'unauthenticated');
  });
}

for (const engine of ENGINES) runMatrix(engine);
