import { join } from 'node:path';
import t from 'tap';
import { openStore } from '../../src/store/db.js';
import type { PolicyVersionRecord } from '../../src/store/policies.js';
import { createLogger } from '../../src/util/log.js';
import { callHttp } from '../helpers/http.js';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { publishOrgPolicy, startService, useMockUpstream } from '../helpers/service.js';

// A version published before regexes were checked may hold a regex the linear-time engine refuses;
// it keeps loading and the condition fails closed (docs/policy.md). The operator is told: the policy
// read API lists a warning per condition, one warn line per version when it is compiled, and a gauge.
// The legacy version is made the way an older release left it: the service is stopped, the stored
// rule set rewritten in the LMDB store, and the service started again on the same data dir.

/** The rule key `then`, through a constant so the linter's thenable check stays quiet. */
const THEN = 'then';
const METRICS_TOKEN = 'metrics-scrape-token-4711';

const VALID = {
  rules: [
    {
      id: 'sql-drop',
      when: { type: 'TOOL_CALL', field: 'args.sql', op: 'matches', value: 'drop' },
      [THEN]: 'block',
    },
  ],
};

/** What an older release accepted: a backreference, a lookahead under `not`, the `u` flag. */
const LEGACY = {
  rules: [
    {
      id: 'sql-drop',
      when: { type: 'TOOL_CALL', field: 'args.sql', op: 'matches', value: '(drop)\\s+\\1' },
      [THEN]: 'block',
    },
    {
      id: 'hosts',
      when: { type: 'TOOL_CALL', not: { field: 'args.host', op: 'matches', value: 'intra(?=net)' } },
      [THEN]: 'require_approval',
    },
    {
      id: 'fine',
      when: { type: 'TOOL_CALL', field: 'args.x', op: 'matches', value: '^ok$' },
      [THEN]: 'block',
    },
    {
      id: 'trusted',
      when: { type: 'TOOL_CALL', field: 'args.y', op: 'matches', value: 'x', flags: 'u' },
      [THEN]: 'allow',
    },
    {
      id: 'off',
      enabled: false,
      when: { type: 'TOOL_CALL', field: 'args.z', op: 'matches', value: '(z)\\1' },
      [THEN]: 'block',
    },
  ],
};

/** The value of one sample line (`name{labels} value`) in a Prometheus text exposition. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const want = `${name}{${Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',')}} `;
  const line = text.split('\n').find((l) => l.startsWith(want));
  return line === undefined ? undefined : Number(line.slice(want.length));
}

t.test('a published version with a refused regex is reported, a valid one is not', async (t) => {
  const upstream = await startMockUpstream();
  t.teardown(() => upstream.close());
  const env = { SERVICE_EGRESS_ALLOW: upstream.hostPort, SERVICE_METRICS_TOKEN: METRICS_TOKEN };

  // An older release: the policy is published and assigned to the org.
  const first = await startService({ env });
  await useMockUpstream(first, first.pat, upstream.url);
  const legacyId = await publishOrgPolicy(first, 'legacy', VALID);
  const clean = await first.call('/api/v2/policies', { token: first.pat, body: { name: 'clean' } });
  const cleanDraft = await first.call(`/api/v2/policies/${clean.body.id}/versions`, {
    token: first.pat,
    body: { rules: VALID },
  });
  await first.call(`/api/v2/policies/${clean.body.id}/versions/${cleanDraft.body.version_no}/publish`, {
    token: first.pat,
    method: 'POST',
  });
  const orgId = (await first.call('/api/me', { token: first.pat })).body.org_id as string;
  await first.close(true);

  // What that release stored: the published rule set holds patterns the engine now refuses.
  const store = openStore(join(first.dataDir, 'data')); // testServiceEnv's SERVICE_DATA_DIR
  const key = [orgId, legacyId, 1];
  const stored = store.policyVersions.get(key) as PolicyVersionRecord;
  t.equal(stored.status, 'published');
  store.policyVersions.putSync(key, { ...stored, rules: LEGACY });
  await store.close();

  // The upgraded service, with its warn log captured.
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger('warn', (line) => lines.push(JSON.parse(line)));
  const svc = await startService({
    dataDir: first.dataDir,
    logger,
    env: { ...env, SERVICE_BOOTSTRAP_TOKEN: first.pat },
  });
  t.teardown(() => svc.close());
  const token = first.pat;
  const failClosedLines = () =>
    lines.filter((l) => l.msg === 'policy version has conditions that fail closed');
  const chat = () =>
    svc.call('/v1/chat/completions', {
      token: first.agentKey,
      body: { model: 'gpt-test', messages: [{ role: 'user', content: 'hello' }] },
    });

  // The request path compiles the org's policy: it still works (its rules are for tool calls).
  t.equal((await chat()).status, 200);
  t.equal(failClosedLines().length, 1, 'one warn line when the version is compiled');

  const expected = [
    { rule_id: 'sql-drop', path: 'rules[0].when.value', code: 'regex_fails_closed' },
    { rule_id: 'hosts', path: 'rules[1].when.not.value', code: 'regex_fails_closed' },
    { rule_id: 'trusted', path: 'rules[3].when.value', code: 'regex_fails_closed' },
  ];
  const shape = (ws: { rule_id: string; path: string; code: string }[]) =>
    ws.map(({ rule_id, path, code }) => ({ rule_id, path, code }));

  t.test('the policy and its versions carry the warnings', async (t) => {
    const policy = await svc.call(`/api/v2/policies/${legacyId}`, { token });
    t.equal(policy.status, 200);
    t.same(shape(policy.body.warnings), expected, 'one per refused regex, the disabled rule left out');
    const [drop, hosts, trusted] = policy.body.warnings as { message: string }[];
    t.match(drop?.message, /backreferences/);
    t.match(drop?.message, /the block rule sql-drop applies to every action its other conditions select/);
    t.match(hosts?.message, /taken as false\): the require_approval rule hosts applies to every action/);
    t.match(trusted?.message, /flag u/);
    t.match(trusted?.message, /the allow rule trusted never matches through it/);
    const list = await svc.call('/api/v2/policies', { token });
    const item = (list.body.data as { id: string; warnings: unknown[] }[]).find((p) => p.id === legacyId);
    t.same(shape(item?.warnings as never), expected, 'the list too');
    const versions = await svc.call(`/api/v2/policies/${legacyId}/versions`, { token });
    t.same(shape(versions.body.data[0].warnings), expected, 'and the version');
  });

  t.test('a valid policy has none', async (t) => {
    const policy = await svc.call(`/api/v2/policies/${clean.body.id}`, { token });
    t.equal(policy.body.active_version, 1);
    t.same(policy.body.warnings, []);
    const versions = await svc.call(`/api/v2/policies/${clean.body.id}/versions`, { token });
    t.same(versions.body.data[0].warnings, []);
  });

  t.test('the warn line names the version and each condition, once whatever reads it', async (t) => {
    await chat();
    await svc.call(`/api/v2/policies/${legacyId}`, { token });
    const found = failClosedLines();
    t.equal(found.length, 1, 'not per request or per read');
    t.match(found[0], {
      level: 'warn',
      org_id: orgId,
      policy_id: legacyId,
      version_no: 1,
      conditions: [
        { rule_id: 'sql-drop', path: 'rules[0].when.value' },
        { rule_id: 'hosts', path: 'rules[1].when.not.value' },
        { rule_id: 'trusted', path: 'rules[3].when.value' },
      ],
    });
  });

  const scrape = async (): Promise<string> => {
    const res = await callHttp(`${svc.url}/api/metrics`, { token: METRICS_TOKEN });
    t.equal(res.status, 200);
    return res.text;
  };

  t.test('the gauge counts them by the effect of their rule, with no org label', async (t) => {
    const text = await scrape();
    const name = 'govgate_policy_fail_closed_conditions';
    t.equal(sample(text, name, { effect: 'block' }), 1);
    t.equal(sample(text, name, { effect: 'require_approval' }), 1);
    t.equal(sample(text, name, { effect: 'allow' }), 1);
    t.equal(sample(text, name, { effect: 'redact' }), 0);
    t.notOk(text.includes(orgId), 'no org id in the metrics');
  });

  t.test('a corrected version clears the policy and the gauge; the old one keeps its warnings', async (t) => {
    const draft = await svc.call(`/api/v2/policies/${legacyId}/versions`, { token, body: { rules: VALID } });
    t.equal(draft.status, 201);
    t.same(draft.body.warnings, []);
    const pub = await svc.call(`/api/v2/policies/${legacyId}/versions/${draft.body.version_no}/publish`, {
      token,
      method: 'POST',
    });
    t.equal(pub.status, 200);
    t.same(pub.body.warnings, []);
    t.same((await svc.call(`/api/v2/policies/${legacyId}`, { token })).body.warnings, []);
    const versions = await svc.call(`/api/v2/policies/${legacyId}/versions`, { token });
    const byNo = new Map((versions.body.data as { version_no: number }[]).map((v) => [v.version_no, v]));
    t.same(shape((byNo.get(1) as never as { warnings: never }).warnings), expected, 'superseded v1');
    // Publishing dropped v1 from the compiled cache; listing compiled it again.
    t.equal(failClosedLines().length, 1, 'still one warn line for v1');
    const text = await scrape();
    for (const effect of ['block', 'require_approval', 'allow', 'redact'])
      t.equal(sample(text, 'govgate_policy_fail_closed_conditions', { effect }), 0, effect);
  });
});
