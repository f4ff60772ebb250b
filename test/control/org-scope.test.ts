import t from 'tap';
import { createOrg, startService } from '../helpers/service.js';

// `?org_id=` (or `org_id` in a body) names the org a request acts on: a super_admin's to choose,
// anyone else's refused; an org that does not exist is 404 everywhere; a route that does not act
// on an org refuses the parameter rather than ignoring it.
t.test('org_id: checked alike on every route', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const other = await createOrg(svc, 'scope-b', { mock: true });
  const call = (path: string, token: string, body?: unknown) =>
    svc.call(path, { token, ...(body === undefined ? {} : { body }) });
  const ghost = 'org_NoSuchOrgXyz123';

  const revoke = await call('/api/mandates/revoke', svc.pat, { jti: `mdt_${'A'.repeat(22)}`, org_id: ghost });
  t.equal(revoke.status, 404, 'revoking a mandate in a missing org');
  t.equal(revoke.body.error.param, 'org_id');
  for (const path of ['/api/approvals', '/v1/me/approvals', '/api/approvals/apr_x'])
    t.equal((await call(`${path}?org_id=${ghost}`, svc.pat)).status, 404, `${path}: a missing org`);

  const me = await call(`/api/me?org_id=${other.orgId}`, svc.pat);
  t.equal(me.status, 400, '/api/me takes no org_id');
  t.equal(me.body.error.param, 'org_id');
  t.equal((await call(`/api/me/webauthn/credentials?org_id=${other.orgId}`, svc.pat)).status, 400);
  t.equal((await call(`/v1/me/approvals?org_id=${other.orgId}`, other.adminPat)).status, 200, 'its own org');
  t.equal((await call(`/v1/me/approvals?org_id=default`, other.adminPat)).status, 403, 'not another');

  // The query and the body naming different orgs: refused, not one of them taken.
  const both = await svc.call(`/api/v2/policies?org_id=default`, {
    token: svc.pat,
    body: { name: 'which-org', org_id: other.orgId },
  });
  t.equal(both.status, 400, JSON.stringify(both.body));
  t.equal(both.body.error.param, 'org_id');
});
