import t from 'tap';
import { ErasureDesk } from '../../src/compliance/erasure.js';
import { tempLog } from '../audit/helpers.js';
import { acmeWithErin } from './people.js';

// Which Idempotency-Key replays an erasure deletes (docs/api.md "Erasure"): those of the calls
// whose events hold the subject in the agent's own exchange (its input or output, every field of
// an end user's exchange), not those of calls a person only decided or wrote a reason about: the
// replayed answer does not hold that, and deleting it would run the agent's call again on retry.

const ERIN = 'erin@example.com';

t.test('an erasure deletes the replays of the calls whose exchange holds the subject only', async (t) => {
  const h = tempLog();
  t.teardown(() => h.close());
  const { identity, org, admin, erin, p } = acmeWithErin(h);
  const append = (pipeline_id: string, details: Record<string, unknown>, personal: Record<string, unknown>) =>
    h.log.append({ org_id: org, event_type: 'test.event', outcome: 'allow', pipeline_id, details, personal });
  // The agent's exchanges holding her: a detected value of a prompt, a tool argument, an output.
  await append('pl_prompt', {}, { detected_values: [{ type: 'email', value: ERIN }] });
  await append('pl_args', {}, { args: { email: ERIN.toUpperCase() } });
  await append('pl_output', {}, { output_text: `sent to ${ERIN}` });
  // Calls she only decided (her reason), or an admin's reason naming her: not in any answer.
  await append('pl_decided', { actor: erin.user_id, actor_kind: 'user' }, { reason: 'looks fine' });
  await append('pl_named', { actor: admin.user_id, actor_kind: 'user' }, { reason: `ask ${ERIN}` });
  // Another person's exchange.
  await append('pl_other', {}, { args: { email: 'someone@example.com' } });

  const asked: string[][] = [];
  const desk = new ErasureDesk({
    store: h.store,
    identity,
    log: h.log,
    audit: h.log,
    removeAuthenticators: async () => 0,
    idempotency: {
      eraseWhere: async (_org, pipelines) => {
        asked.push([...pipelines].sort());
        return 0;
      },
    },
  });
  const request = await desk.submit(org, p, { type: 'user_id', value: erin.user_id }, null);
  const done = await desk.execute(org, request.request_id, p);
  t.equal(done.status, 'executed');
  // Five events above, and the erasure request's own (its subject).
  t.equal(done.receipt?.erased.events, 6, 'the fields holding her are erased, reasons included');
  t.same(
    asked,
    [['pl_args', 'pl_output', 'pl_prompt']],
    'only the calls whose exchange holds her lose their replays',
  );

  // An end user's exchange is theirs whole: its replay goes.
  await append('pl_cust', {}, { end_user: 'cust-9', reason: 'anything' });
  const byEndUser = await desk.submit(org, p, { type: 'end_user', value: 'cust-9' }, null);
  await desk.execute(org, byEndUser.request_id, p);
  t.same(asked[1], ['pl_cust']);
});
