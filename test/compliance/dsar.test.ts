import t from 'tap';
import { createOrg, startService } from '../helpers/service.js';

// A data subject access request, over HTTP: every event of the org's trail that names the
// subject (as the end user, in a detected value, in tool arguments, as the person who acted),
// and the user records, nothing of another org, in pages, and the request itself recorded.

t.test('a DSAR finds the subject wherever the trail names it, and only there', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const chat = (user: string | undefined, content: string) =>
    svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content }], ...(user ? { user } : {}) },
    });
  t.equal((await chat('Alice@Example.com', 'hello')).status, 200);
  t.equal((await chat(undefined, 'please write to bob@example.com about the invoice')).status, 200);
  t.equal((await chat(undefined, 'nothing personal here')).status, 200);
  const govern = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'crm.lookup', args: { email: 'carol@example.com' } } },
  });
  t.equal(govern.status, 200);
  const user = await svc.call('/api/users', {
    token: svc.pat,
    body: { email: 'dave@example.com', role: 'auditor' },
  });
  const daveToken = (
    await svc.call('/api/tokens', { token: svc.pat, body: { user_id: user.body.user_id, name: 'dave' } })
  ).body.token;
  // Another org, where the same end user calls too.
  const other = await createOrg(svc, 'elsewhere');
  const mock = await svc.call('/api/settings/providers', {
    method: 'PUT',
    token: other.adminPat,
    body: { providers: [{ name: 'mock' }] },
  });
  t.equal(mock.status, 200);
  const theirs = await svc.call('/v1/chat/completions', {
    token: other.agentKey,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hi' }], user: 'Alice@Example.com' },
  });
  t.equal(theirs.status, 200);

  const dsar = (data_subject: unknown, extra: Record<string, unknown> = {}, token = svc.pat) =>
    svc.call('/api/compliance/gdpr/dsar', { token, body: { data_subject, ...extra } });
  // A DSAR is itself on the trail, naming its subject: later ones find the earlier ones too.
  type Found = { body: { events: { id: string; event_type: string }[] } };
  const own = (r: Found) => r.body.events.filter((e) => e.event_type !== 'compliance.dsar_exported');
  const types = (r: Found): string[] => own(r).map((e) => e.event_type);
  const ids = (r: Found): string[] => own(r).map((e) => e.id);

  const alice = await dsar({ type: 'end_user', value: 'Alice@Example.com' });
  t.equal(alice.status, 200);
  t.equal(alice.body.org_id, 'default');
  t.same(types(alice), ['llm_call'], "the call she was the end user of; not the other org's");
  t.equal(alice.body.events[0].personal.end_user.value, 'Alice@Example.com', 'with the personal values');
  t.equal(alice.body.next_cursor, null);
  t.same(alice.body.records.users, []);
  t.same(types(await dsar({ type: 'end_user', value: 'alice@example.com' })), [], 'an end-user id is exact');
  const byEmail = await dsar({ type: 'email', value: 'alice@example.com' });
  t.same(types(byEmail), ['llm_call'], 'an email matches in any case');
  t.ok(
    byEmail.body.events.some((e: { event_type: string }) => e.event_type === 'compliance.dsar_exported'),
    'beside the DSAR made before, which named her',
  );

  const bob = await dsar({ type: 'email', value: 'bob@example.com' });
  t.same(types(bob), ['llm_call'], 'the call whose prompt held his address (pii_detected holds types only)');
  const carol = await dsar({ type: 'email', value: 'carol@example.com' });
  t.same(types(carol), ['govern.decision'], 'tool arguments are searched');

  const dave = await dsar({ type: 'email', value: 'DAVE@example.com' });
  t.same(
    dave.body.records.users.map((u: { user_id: string }) => u.user_id),
    [user.body.user_id],
  );
  t.ok(types(dave).includes('admin.user_created'), 'the event that made his user');
  t.ok(types(dave).includes('admin.token_created'), 'and his token');
  const byId = await dsar({ type: 'user_id', value: user.body.user_id });
  t.same(ids(byId), ids(dave), 'by id as by email');

  // Paged: two events a call; the pages together are the whole answer.
  const pages: string[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < 100; i++) {
    const page = await dsar(
      { type: 'email', value: 'bob@example.com' },
      cursor ? { cursor, scan_limit: 2 } : { scan_limit: 2 },
    );
    t.equal(page.status, 200);
    t.ok(page.body.scanned.to_seq - page.body.scanned.from_seq < 2);
    pages.push(...ids(page));
    cursor = page.body.next_cursor ?? undefined;
    if (cursor === undefined) break;
  }
  t.same(pages, ids(bob), 'no event lost or repeated across pages');

  // Recorded, the subject in a personal field; roles; strict bodies; another org.
  const recorded = await svc.call('/api/audit?event_type=compliance.dsar_exported&limit=1', {
    token: svc.pat,
  });
  t.match(recorded.body.data[0].details, { subject_type: 'email', actor_kind: 'user' });
  t.equal(recorded.body.data[0].personal.data_subject.value, 'bob@example.com');
  t.notOk(JSON.stringify(recorded.body.data[0].details).includes('bob@'), 'not outside personal');
  t.equal(
    (await dsar({ type: 'email', value: 'x@example.com' }, {}, daveToken)).status,
    200,
    'an auditor may',
  );
  t.equal((await dsar({ type: 'email', value: 'x@example.com' }, {}, svc.agentKey)).status, 403);
  for (const bad of [
    { type: 'phone', value: '1' },
    { type: 'email' },
    { type: 'email', value: ' ' },
    { type: 'email', value: 'a@b.c', extra: 1 },
  ]) {
    const r = await dsar(bad);
    t.equal(r.status, 400, JSON.stringify(bad));
  }
  t.equal((await dsar({ type: 'email', value: 'a@b.c' }, { cursor: '0' })).status, 400);
  const elsewhere = await dsar({ type: 'end_user', value: 'Alice@Example.com' }, { org_id: other.orgId });
  t.same(types(elsewhere), ['llm_call'], "a super_admin names the other org's trail");
  t.equal(elsewhere.body.events[0].org_id, other.orgId);
  const crossed = await dsar(
    { type: 'end_user', value: 'Alice@Example.com' },
    { org_id: 'default' },
    other.adminPat,
  );
  t.equal(crossed.status, 403, "an org admin cannot read another org's");
});
