import { rmSync } from 'node:fs';
import type { Test } from 'tap';
import t from 'tap';
import { DEFAULT_POLICY } from '../../src/core/policy/index.js';
import { openStore, type Store } from '../../src/store/db.js';
import { PolicyRepo } from '../../src/store/policies.js';
import { tempDir } from '../helpers/tmp.js';

/** The rule key `then`, through a constant so the linter's thenable check stays quiet. */
const THEN = 'then';

const ORG = 'org_a';
const OTHER = 'org_b';
const AGENT_1 = 'agent-uuid-1';
const AGENT_2 = 'agent-uuid-2';

function ruleSet(mode: string): unknown {
  return { mode, rules: [{ id: `r-${mode}`, when: { tool: 'shell.exec' }, [THEN]: 'block' }] };
}

function open(t: Test): { store: Store; repo: PolicyRepo } {
  const dir = tempDir('govgate-pol-store-');
  const store = openStore(dir, { syncIntervalMs: 0 });
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  let tick = 0;
  // A frozen, stepping clock: deterministic timestamps.
  const repo = new PolicyRepo(store, () => new Date(Date.UTC(2025, 0, 1, 0, 0, tick++)));
  return { store, repo };
}

/** A policy with one published version of the given mode. */
function published(repo: PolicyRepo, orgId: string, name: string, mode: string): string {
  const p = repo.create(orgId, { name }, 'usr_1');
  const v = repo.createDraft(orgId, p.id, ruleSet(mode), null, 'usr_1');
  repo.publish(orgId, p.id, v.version_no, 'usr_1');
  return p.id;
}

t.test('no assignment: the default policy with nulls', async (t) => {
  const { repo } = open(t);
  const e = repo.effective(ORG, AGENT_1);
  t.equal(e.policy, DEFAULT_POLICY);
  t.equal(e.policy_id, null);
  t.equal(e.version_no, null);
  // A policy that exists and is published but is not assigned changes nothing.
  published(repo, ORG, 'unassigned', 'observe');
  t.equal(repo.effective(ORG, AGENT_1).policy, DEFAULT_POLICY);
});

t.test('assigned but never published: the default policy', async (t) => {
  const { repo } = open(t);
  const p = repo.create(ORG, { name: 'drafty' }, 'usr_1');
  repo.createDraft(ORG, p.id, ruleSet('observe'), null, 'usr_1');
  repo.assign(ORG, p.id, 'org', ORG, 'usr_1');
  t.same(repo.effective(ORG, AGENT_1), { policy: DEFAULT_POLICY, policy_id: null, version_no: null });
});

t.test('a published version takes effect on the next call to effective', async (t) => {
  const { repo } = open(t);
  const p = repo.create(ORG, { name: 'live' }, 'usr_1');
  repo.assign(ORG, p.id, 'org', ORG, 'usr_1');
  const v1 = repo.createDraft(ORG, p.id, ruleSet('observe'), null, 'usr_1');
  t.equal(repo.effective(ORG, AGENT_1).policy, DEFAULT_POLICY, 'a draft is not in effect');
  repo.publish(ORG, p.id, v1.version_no, 'usr_1');
  let e = repo.effective(ORG, AGENT_1);
  t.equal(e.policy.mode, 'observe');
  t.equal(e.policy_id, p.id);
  t.equal(e.version_no, 1);

  const v2 = repo.createDraft(ORG, p.id, ruleSet('warn'), null, 'usr_1');
  t.equal(repo.effective(ORG, AGENT_1).version_no, 1, 'the new draft is not in effect yet');
  repo.publish(ORG, p.id, v2.version_no, 'usr_1');
  e = repo.effective(ORG, AGENT_1);
  t.equal(e.policy.mode, 'warn');
  t.equal(e.version_no, 2);

  repo.pullBack(ORG, p.id, 2, 'usr_1');
  e = repo.effective(ORG, AGENT_1);
  t.equal(e.policy.mode, 'observe', 'pull-back restores the previous version at once');
  t.equal(e.version_no, 1);

  repo.pullBack(ORG, p.id, 1, 'usr_1');
  t.same(repo.effective(ORG, AGENT_1), { policy: DEFAULT_POLICY, policy_id: null, version_no: null });
});

t.test('the agent assignment wins over the org one; latest per scope wins', async (t) => {
  const { repo } = open(t);
  const orgWide = published(repo, ORG, 'org-wide', 'observe');
  const forAgent = published(repo, ORG, 'agent-one', 'lockdown');
  const later = published(repo, ORG, 'later', 'warn');
  repo.assign(ORG, orgWide, 'org', ORG, 'usr_1');
  repo.assign(ORG, forAgent, 'agent', AGENT_1, 'usr_1');
  t.equal(repo.effective(ORG, AGENT_1).policy_id, forAgent);
  t.equal(repo.effective(ORG, AGENT_1).policy.mode, 'lockdown');
  t.equal(repo.effective(ORG, AGENT_2).policy_id, orgWide);

  const { replaced } = repo.assign(ORG, later, 'org', ORG, 'usr_1');
  t.equal(replaced, orgWide, 'the older org assignment is replaced');
  t.equal(repo.effective(ORG, AGENT_2).policy_id, later);
  t.equal(repo.effective(ORG, AGENT_1).policy_id, forAgent, 'the agent one still wins');
  t.same(repo.assignments(ORG, orgWide), []);
  t.same(
    repo.assignments(ORG, later).map((a) => [a.scope_type, a.scope_id]),
    [['org', ORG]],
  );

  // The agent's policy loses its active version: the agent falls back to the org's.
  repo.pullBack(ORG, forAgent, 1, 'usr_1');
  t.equal(repo.effective(ORG, AGENT_1).policy_id, later);

  // Assignments are per org: another org is untouched.
  t.equal(repo.effective(OTHER, AGENT_1).policy, DEFAULT_POLICY);
});

t.test('compiled once per published version; resolution memoized until generation moves', async (t) => {
  const { repo } = open(t);
  const id = published(repo, ORG, 'cached', 'observe');
  repo.assign(ORG, id, 'org', ORG, 'usr_1');
  const first = repo.effective(ORG, AGENT_1);
  t.equal(repo.effective(ORG, AGENT_1), first, 'same result object while nothing changed');
  const gen = repo.generation;
  const other = published(repo, ORG, 'unrelated', 'warn');
  repo.assign(ORG, other, 'agent', 'someone-else', 'usr_1');
  t.ok(repo.generation > gen, 'publish and assign bump the generation');
  const again = repo.effective(ORG, AGENT_1);
  t.not(again, first, 'resolved again after the generation moved');
  t.equal(again.policy, first.policy, 'but the compiled policy came from the cache');
  t.equal(repo.compiled(ORG, id, 1), first.policy);
  t.equal(repo.compiled(ORG, id, 99), undefined);
});

t.test('after a restart the stored version is compiled again and still applies', async (t) => {
  const dir = tempDir('govgate-pol-store-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  let store = openStore(dir, { syncIntervalMs: 0 });
  let repo = new PolicyRepo(store);
  const id = published(repo, ORG, 'durable', 'warn');
  repo.assign(ORG, id, 'agent', AGENT_1, 'usr_1');
  await store.close();
  store = openStore(dir, { syncIntervalMs: 0 });
  repo = new PolicyRepo(store);
  const e = repo.effective(ORG, AGENT_1);
  t.equal(e.policy.mode, 'warn');
  t.equal(e.policy_id, id);
  t.equal(e.version_no, 1);
  await store.close();
});

t.test('version lifecycle and its conflicts', async (t) => {
  const { repo } = open(t);
  const p = repo.create(ORG, { name: 'Cycle', description: 'd' }, 'usr_1');
  t.throws(() => repo.create(ORG, { name: 'cycle' }, 'usr_2'), { code: 'conflict' });
  t.doesNotThrow(() => repo.create(OTHER, { name: 'Cycle' }, 'usr_2'), 'names are per org');
  t.throws(() => repo.createDraft(ORG, 'pol_missing', {}, null, 'usr_1'), { code: 'not_found' });
  t.throws(() => repo.createDraft(OTHER, p.id, {}, null, 'usr_1'), { code: 'not_found' });

  repo.createDraft(ORG, p.id, ruleSet('observe'), 'first', 'usr_1');
  t.throws(() => repo.createDraft(ORG, p.id, ruleSet('warn'), null, 'usr_1'), { code: 'conflict' });
  const edited = repo.updateDraft(ORG, p.id, 1, ruleSet('warn'), 'usr_2');
  t.same(edited.rules, ruleSet('warn'));
  t.equal(edited.updated_by, 'usr_2');
  t.throws(() => repo.pullBack(ORG, p.id, 1, 'usr_1'), { code: 'conflict' }, 'a draft cannot be pulled back');
  repo.publish(ORG, p.id, 1, 'usr_3');
  t.throws(() => repo.updateDraft(ORG, p.id, 1, ruleSet('enforce'), 'usr_1'), { code: 'conflict' });
  t.throws(() => repo.publish(ORG, p.id, 1, 'usr_1'), { code: 'conflict' });
  t.throws(() => repo.publish(ORG, p.id, 7, 'usr_1'), { code: 'not_found' });

  repo.createDraft(ORG, p.id, ruleSet('enforce'), null, 'usr_1');
  const { superseded } = repo.publish(ORG, p.id, 2, 'usr_1');
  t.equal(superseded, 1);
  t.throws(() => repo.pullBack(ORG, p.id, 1, 'usr_1'), { code: 'conflict' }, 'superseded is not pullable');
  repo.createDraft(ORG, p.id, ruleSet('lockdown'), null, 'usr_1');
  repo.publish(ORG, p.id, 3, 'usr_1');
  t.same(
    repo.versions(ORG, p.id).map((v) => v.status),
    ['superseded', 'superseded', 'published'],
  );
  // Pull back 3 → 2 is published again; pull back 2 → 1 (skipping nothing); 1 → none.
  t.equal(repo.pullBack(ORG, p.id, 3, 'usr_1').active_version, 2);
  t.same(
    repo.versions(ORG, p.id).map((v) => v.status),
    ['superseded', 'published', 'pulled_back'],
  );
  // A new version after a pull-back, then pulled back too: the pulled-back 3 is skipped.
  repo.createDraft(ORG, p.id, ruleSet('observe'), null, 'usr_1');
  repo.publish(ORG, p.id, 4, 'usr_1');
  t.equal(repo.pullBack(ORG, p.id, 4, 'usr_1').active_version, 2);
  t.equal(repo.pullBack(ORG, p.id, 2, 'usr_1').active_version, 1);
  t.equal(repo.pullBack(ORG, p.id, 1, 'usr_1').active_version, null);
  const final = repo.get(ORG, p.id);
  t.equal(final?.active_version, null);
  t.equal(final?.draft_version, null);
  t.same(
    repo.versions(ORG, p.id).map((v) => v.status),
    ['pulled_back', 'pulled_back', 'pulled_back', 'pulled_back'],
  );
});
