import { createHash } from 'node:crypto';
import t from 'tap';
import { canonicalize } from '../../src/core/chain/jcs.js';
import { startService } from '../helpers/service.js';

const rulesHash = (rules: unknown): string => createHash('sha256').update(canonicalize(rules)).digest('hex');
const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

/**
 * The chain shows where data could go and what rules decided: provider and tool changes name
 * their destinations (never their secrets), policy events the SHA-256 of the rules they carry
 * (review-evidence F6: pointing a provider at another host and back left two identical events).
 */
t.test('configuration events record destinations and rule hashes, never secrets', async (t) => {
  const svc = await startService({ env: { SERVICE_EGRESS_ALLOW: '127.0.0.1:9,127.0.0.1:10' } });
  t.teardown(() => svc.close());
  const events = async (type: string) => {
    const res = await svc.call(`/api/audit?event_type=${type}&limit=100`, { token: svc.pat });
    t.equal(res.status, 200);
    return (res.body.data as { details: Record<string, any> }[]).reverse();
  };

  // The changes are made with a second token of the same user: the events name the token.
  const changer = await svc.call('/api/tokens', { token: svc.pat, body: { name: 'second' } });
  t.equal(changer.status, 201);
  for (const base of ['http://127.0.0.1:9/v1', 'http://127.0.0.1:10/v1']) {
    const put = await svc.call('/api/settings/providers', {
      token: changer.body.token,
      method: 'PUT',
      body: {
        providers: [
          { name: 'openai', api_key: 'sk-test-secret-0123456789', base_url: base, models: ['gpt-*'] },
        ],
      },
    });
    t.equal(put.status, 200, JSON.stringify(put.body));
  }
  const providers = await events('admin.providers_updated');
  t.equal(providers.length, 2);
  t.same(
    providers.map((e) => e.details.providers),
    [
      [
        {
          name: 'openai',
          origin: 'http://127.0.0.1:9',
          url_sha256: sha256('http://127.0.0.1:9/v1'),
          models: ['gpt-*'],
        },
      ],
      [
        {
          name: 'openai',
          origin: 'http://127.0.0.1:10',
          url_sha256: sha256('http://127.0.0.1:10/v1'),
          models: ['gpt-*'],
        },
      ],
    ],
    'each change names where the provider points',
  );
  t.notOk(JSON.stringify(providers).includes('sk-test-secret'), 'never its key');
  t.same(
    providers.map((e) => e.details.credential_id),
    [changer.body.token_id, changer.body.token_id],
    'each change names the token that made it',
  );

  const tools = await svc.call('/api/settings/tools', {
    token: svc.pat,
    method: 'PUT',
    body: {
      tools: [
        {
          name: 'crm.lookup',
          // A webhook-style URL: its path is the secret.
          url: 'http://127.0.0.1:9/services/T0001/B0002/tool-path-secret-0123456789',
          method: 'POST',
          headers: { Authorization: 'Bearer tool-secret-0123456789' },
        },
      ],
    },
  });
  t.equal(tools.status, 200, JSON.stringify(tools.body));
  const [tool] = await events('admin.tools_updated');
  t.same(tool?.details.tools, [
    {
      name: 'crm.lookup',
      origin: 'http://127.0.0.1:9',
      url_sha256: sha256('http://127.0.0.1:9/services/T0001/B0002/tool-path-secret-0123456789'),
      method: 'POST',
      headers: ['authorization'], // lower case, as the settings show it
    },
  ]);
  t.notOk(JSON.stringify(tool).includes('tool-secret'), 'header names, never their values');
  t.notOk(
    JSON.stringify(tool).includes('tool-path-secret'),
    'the origin, never a path that may hold a token',
  );

  const created = await svc.call('/api/v2/policies', { token: svc.pat, body: { name: 'evidence' } });
  const id = created.body.id as string;
  const first = { mode: 'enforce', rules: [] };
  const second = { mode: 'enforce', default: 'block', rules: [] };
  const draft = await svc.call(`/api/v2/policies/${id}/versions`, { token: svc.pat, body: { rules: first } });
  t.equal(draft.status, 201);
  const updated = await svc.call(`/api/v2/policies/${id}/versions/1/rules`, {
    token: svc.pat,
    method: 'PUT',
    body: { rules: second },
  });
  t.equal(updated.status, 200);
  const published = await svc.call(`/api/v2/policies/${id}/versions/1/publish`, {
    token: svc.pat,
    method: 'POST',
  });
  t.equal(published.status, 200);
  const stored = await svc.call(`/api/v2/policies/${id}/versions`, { token: svc.pat });
  const storedRules = stored.body.data[0].rules;
  t.equal((await events('admin.policy_version_drafted'))[0]?.details.rules_sha256, rulesHash(first));
  t.equal((await events('admin.policy_draft_updated'))[0]?.details.rules_sha256, rulesHash(second));
  t.equal(
    (await events('admin.policy_published'))[0]?.details.rules_sha256,
    rulesHash(storedRules),
    'the published event names the rules the API shows for that version',
  );
  t.not(rulesHash(first), rulesHash(second));
});
