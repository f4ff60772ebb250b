import t from 'tap';
import { ErasureDesk } from '../../src/compliance/erasure.js';
import { ERASED } from '../../src/core/chain/index.js';
import { IdentityRepo } from '../../src/identity/repo.js';
import { tempLog } from '../audit/helpers.js';
import { acmeWithErin } from './people.js';

// An erasure by user_id finds the person by their address too, and reaches what they decided
// and wrote (docs/api.md "Erasure"). Its first step erases their user record, before the erasure
// events are committed: an execution cut short after it (a crash, a restart, a store error)
// leaves the request pending, and executing it again must still find the person by their address
// and their id, though the user record that linked the two is gone.

const ERIN = 'erin@example.com';

t.test(
  'an erasure executed again after one cut short past its record step still reaches the person',
  async (t) => {
    const h = tempLog();
    t.teardown(() => h.close());
    const people = acmeWithErin(h);
    let identity = people.identity;
    const { org, erin, p } = people;
    // The trail knows her by her address (a tool argument), and by her id as one who wrote a reason.
    const lookup = await h.log.append({
      org_id: org,
      event_type: 'govern.decision',
      outcome: 'allow',
      details: {},
      personal: { args: { email: ERIN } },
    });
    const decided = await h.log.append({
      org_id: org,
      event_type: 'approval.decided',
      outcome: 'approved',
      details: { actor: erin.user_id, actor_kind: 'user', approval_id: 'apr_1' },
      personal: { reason: 'checked it myself' },
    });
    const other = await h.log.append({
      org_id: org,
      event_type: 'govern.decision',
      outcome: 'allow',
      details: {},
      personal: { args: { email: 'someone@example.com' } },
    });

    const asked: { authenticators: string[]; approvals: string[][] } = { authenticators: [], approvals: [] };
    const desk = (crash: boolean) =>
      new ErasureDesk({
        store: h.store,
        identity,
        log: h.log,
        audit: h.log,
        removeAuthenticators: async (id) => {
          asked.authenticators.push(id);
          return 0;
        },
        approvals: {
          eraseSubject: async (_org, ids) => {
            asked.approvals.push([...ids]);
            return 0;
          },
        },
        idempotency: {
          eraseWhere: async () => {
            if (crash) throw new Error('the process died here');
            return 0;
          },
        },
      });
    const request = await desk(false).submit(org, p, { type: 'user_id', value: erin.user_id }, null);
    await t.rejects(desk(true).execute(org, request.request_id, p), /the process died here/);
    t.equal(identity.getUser(erin.user_id), undefined, 'the first execution erased her user record');
    const pending = desk(false).get(org, request.request_id);
    t.equal(pending?.status, 'pending');
    t.notOk(JSON.stringify(pending).includes('erin'), 'who it found is not shown');

    // A restart, then the request executed again.
    await h.reopen();
    identity = new IdentityRepo(h.store);
    asked.authenticators.length = 0;
    asked.approvals.length = 0;
    const done = await desk(false).execute(org, request.request_id, p);
    t.equal(done.status, 'executed');
    t.notOk('found' in done, 'who it found is not shown');
    t.same(asked.authenticators, [erin.user_id], 'her authenticators are looked for by her id');
    t.same(asked.approvals, [[erin.user_id]], 'the approvals she decided are looked for by her id');
    const personal = (id: string) => h.log.get(org, id)?.personal as Record<string, { value: unknown }>;
    t.equal(personal(lookup.id).args?.value, ERASED, 'the arguments holding her address');
    t.equal(personal(decided.id).reason?.value, ERASED, 'the reason she wrote');
    t.same(personal(other.id).args?.value, { email: 'someone@example.com' }, "another's stays");
    const stored = h.store.erasures.get([org, request.request_id]);
    t.notOk('found' in stored, 'not kept once its erasure events are committed');
  },
);
