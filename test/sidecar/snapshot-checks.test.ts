import t from 'tap';
import { controlWithSidecar } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A snapshot is put in force only when it is one this sidecar reads and of its own org: a format
 * it does not know, or another org's (a control plane mix-up), is refused and the one in force kept.
 */
t.test('a snapshot of another format or another org is refused; the one in force stays', async (t) => {
  const { control, sc, token } = await controlWithSidecar(t);
  await waitFor(() => sc.sidecar.snapshot.loaded, 'a snapshot in force');
  const res = await fetch(`${control.url}/api/sync/snapshot`, {
    headers: { authorization: `Bearer ${token}` },
  });
  const doc = (await res.json()) as Record<string, unknown>;
  const org = sc.sidecar.snapshot.orgId;
  t.equal(org, 'default');
  const snapshot = sc.sidecar.snapshot;
  t.throws(() => snapshot.apply({ ...doc, v: 2 } as never, '"v2"'), /format/);
  t.throws(() => snapshot.apply({ ...doc, org_id: 'org_someone_else' } as never, '"other"'), /org/);
  t.equal(snapshot.orgId, org, 'its own org still in force');
  t.not(snapshot.etag, '"other"');
  const ok = await sc.call('/v1/chat/completions', {
    token: control.agentKey,
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'still served' }] },
  });
  t.equal(ok.status, 200);
});
