// The files of config/: the reference configuration states exactly the defaults and names every
// setting, and each example policy decides as its comments say, through the real API.
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { parse as parseYaml } from 'yaml';
import { loadConfig, SETTINGS, type Setting } from '../../src/config/index.js';
import { startService, type TestService } from '../helpers/service.js';

const CONFIG_DIR = fileURLToPath(new URL('../../../config/', import.meta.url));
const DEFAULT_YAML = join(CONFIG_DIR, 'default.yaml');
const POLICY_DIR = join(CONFIG_DIR, 'policies');

/** default.yaml with every commented-out `# key:` line turned into a key without a value. */
function uncommented(): string {
  return readFileSync(DEFAULT_YAML, 'utf8').replace(/^(\s*)# ([a-z0-9_]+):$/gm, '$1$2:');
}

function has(doc: Record<string, unknown>, dotted: string): boolean {
  let cur: unknown = doc;
  for (const part of dotted.split('.')) {
    if (cur === null || typeof cur !== 'object' || !Object.hasOwn(cur, part)) return false;
    cur = (cur as Record<string, unknown>)[part];
  }
  return true;
}

t.test('config/default.yaml states the defaults', async (t) => {
  t.same(loadConfig({ SERVICE_CONFIG: DEFAULT_YAML }), loadConfig({}), 'loading it changes nothing');
  const doc = parseYaml(uncommented()) as Record<string, unknown>;
  const missing = SETTINGS.filter((s) => !has(doc, s.yaml)).map((s) => s.yaml);
  t.same(missing, [], 'every setting is in it, set or commented out');
  const uncommentedFile = join(tmpdir(), `govgate-default-${process.pid}.yaml`);
  writeFileSync(uncommentedFile, uncommented());
  t.teardown(() => rmSync(uncommentedFile, { force: true }));
  t.same(
    loadConfig({ SERVICE_CONFIG: uncommentedFile }),
    loadConfig({}),
    'its commented keys, uncommented, are unset and known',
  );
  const plain = parseYaml(readFileSync(DEFAULT_YAML, 'utf8')) as Record<string, unknown>;
  const secretsSet = (SETTINGS as readonly Setting[])
    .filter((s) => s.secret && has(plain, s.yaml))
    .map((s) => s.yaml);
  t.same(secretsSet, [], 'no secret is set in it (they belong in the environment)');
});

interface Case {
  readonly action: Record<string, unknown>;
  readonly outcome: 'allow' | 'block' | 'needs_approval';
  readonly rule?: string;
  /** What enforce would have done, for observe and warn. */
  readonly would?: string;
}

const CASES: Readonly<Record<string, readonly Case[]>> = {
  'baseline.yaml': [
    {
      action: { type: 'TOOL_CALL', payload: { tool: 'shell.exec', args: { cmd: 'ls' } } },
      outcome: 'block',
      rule: 'no-shell',
    },
    {
      action: { type: 'TOOL_CALL', payload: { tool: 'search.web', args: { q: 'weather' } } },
      outcome: 'allow',
    },
    {
      action: { type: 'CODE_EXEC', payload: { language: 'python', code: 'print(1)' } },
      outcome: 'needs_approval',
      rule: 'code-exec-asks-first',
    },
    {
      action: { type: 'CREDENTIAL_ACCESS', payload: { scope: 'Prod-DB' } },
      outcome: 'block',
      rule: 'no-production-credentials',
    },
    { action: { type: 'CREDENTIAL_ACCESS', payload: { scope: 'staging-db' } }, outcome: 'allow' },
    {
      action: { type: 'SYSTEM_OF_RECORD_WRITE', payload: { target: 'PROD_crm', op: 'update' } },
      outcome: 'needs_approval',
      rule: 'prod-writes-ask-first',
    },
    { action: { type: 'SYSTEM_OF_RECORD_WRITE', payload: { target: 'sandbox_crm' } }, outcome: 'allow' },
    {
      action: { type: 'PROMPT_SUBMIT', payload: { prompt: 'deploy with AKIAIOSFODNN7EXAMPLE please' } },
      outcome: 'block',
    },
  ],
  'payments-agent.yaml': [
    { action: transfer(50, 'EUR'), outcome: 'allow' },
    { action: transfer(5000, 'USD'), outcome: 'needs_approval', rule: 'transfers-ask-first' },
    { action: transfer(50000, 'EUR'), outcome: 'needs_approval', rule: 'large-transfers-signed' },
    { action: transfer(50, 'GBP'), outcome: 'block', rule: 'only-eur-usd' },
    { action: transfer(50, undefined), outcome: 'block', rule: 'only-eur-usd' },
    {
      action: {
        type: 'TOOL_CALL',
        payload: { tool: 'payments.refund', args: { amount: 5, currency: 'EUR' } },
      },
      outcome: 'block',
      rule: 'no-refunds-to-new-payees',
    },
    {
      action: {
        type: 'TOOL_CALL',
        payload: { tool: 'payments.refund', args: { amount: 5, currency: 'EUR', payee_known: true } },
      },
      outcome: 'allow',
    },
  ],
  'read-only-agent.yaml': [
    { action: { type: 'TOOL_CALL', payload: { tool: 'search.web', args: { q: 'x' } } }, outcome: 'allow' },
    { action: { type: 'TOOL_CALL', payload: { tool: 'tickets.get', args: { id: 7 } } }, outcome: 'allow' },
    { action: { type: 'TOOL_LIST', payload: { server: 'crm' } }, outcome: 'allow' },
    { action: { type: 'TOOL_CALL', payload: { tool: 'tickets.update', args: { id: 7 } } }, outcome: 'block' },
    { action: { type: 'SYSTEM_OF_RECORD_WRITE', payload: { target: 'crm' } }, outcome: 'block' },
    { action: { type: 'CODE_EXEC', payload: { code: 'rm -rf /' } }, outcome: 'block' },
  ],
  'observe-rollout.yaml': [
    {
      action: { type: 'TOOL_CALL', payload: { tool: 'shell.exec', args: {} } },
      outcome: 'allow',
      rule: 'no-shell',
      would: 'block',
    },
    {
      action: { type: 'SYSTEM_OF_RECORD_WRITE', payload: { target: 'crm', operation: 'delete' } },
      outcome: 'allow',
      rule: 'deletes-ask-first',
      would: 'needs_approval',
    },
    { action: { type: 'TOOL_CALL', payload: { tool: 'search.web', args: {} } }, outcome: 'allow' },
  ],
};

function transfer(amount: number, currency: string | undefined): Record<string, unknown> {
  return {
    type: 'TOOL_CALL',
    payload: { tool: 'payments.transfer', args: { amount, currency, to: 'acct-1' } },
  };
}

/** Drafts `file`'s text as a new policy's version 1, publishes it and assigns it to org default. */
async function putInForce(t: Test, svc: TestService, file: string): Promise<void> {
  const created = await svc.call('/api/v2/policies', { token: svc.pat, body: { name: file } });
  t.equal(created.status, 201, `${file}: created`);
  const rules = readFileSync(join(POLICY_DIR, file), 'utf8');
  const draft = await svc.call(`/api/v2/policies/${created.body.id}/versions`, {
    token: svc.pat,
    body: { rules },
  });
  t.equal(draft.status, 201, `${file}: drafted as YAML text`, { body: draft.body });
  const path = `/api/v2/policies/${created.body.id}`;
  const published = await svc.call(`${path}/versions/1/publish`, { token: svc.pat, method: 'POST' });
  t.equal(published.status, 200, `${file}: published`);
  const assigned = await svc.call(`${path}/assignments`, {
    token: svc.pat,
    body: { scope_type: 'org', scope_id: 'default' },
  });
  t.ok(assigned.status < 300, `${file}: assigned`);
}

t.test('every example policy decides as it says', async (t) => {
  const files = readdirSync(POLICY_DIR).filter((f) => f.endsWith('.yaml'));
  t.same(files.sort(), Object.keys(CASES).sort(), 'each example has its cases here');
  const svc = await startService();
  t.teardown(() => svc.close());
  for (const file of files) {
    await putInForce(t, svc, file);
    for (const c of CASES[file] ?? []) {
      const res = await svc.call('/v1/govern', { token: svc.agentKey, body: c.action });
      const label = `${file}: ${JSON.stringify(c.action)}`;
      t.equal(res.status, 200, label);
      t.equal(res.body.outcome, c.outcome, `${label} → ${c.outcome}`, { body: res.body });
      if (c.rule !== undefined) t.equal(res.body.rule_id, c.rule, `${label}: rule ${c.rule}`);
      if (c.would !== undefined)
        t.equal(res.body.details?.would_outcome, c.would, `${label}: would ${c.would}`);
      if (c.outcome === 'allow') t.type(res.body.mandate, 'string', `${label}: mandate issued`);
    }
  }
});
