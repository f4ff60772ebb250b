import OpenAI from 'openai';
import t from 'tap';
import { startService } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar, type TestSidecar } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A sidecar given a new token (a rotation) on the same data dir goes on with the log it holds:
 * the control plane takes its entries in once, whichever token ships them (the whole log was
 * appended to the org chain a second time under the new sidecar).
 */
t.test('a new token on the same data dir continues the log: no entry taken in twice', async (t) => {
  const control = await startService();
  const first = await createSidecarToken(control, control.pat);
  let sc: TestSidecar = await startTestSidecar({ controlUrl: control.url, token: first.token });
  t.teardown(async () => {
    await sc.close();
    await control.close();
  });
  const call = async (text: string): Promise<void> => {
    const client = new OpenAI({ apiKey: control.agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
    await client.chat.completions.create({ model: 'mock-echo', messages: [{ role: 'user', content: text }] });
  };
  for (let i = 0; i < 3; i++) await call(`before ${i}`);
  await waitFor(() => sc.sidecar.shipper.unshipped === 0 && sc.sidecar.shipper.acked >= 3, 'shipped');
  const epoch = sc.sidecar.epoch;
  await sc.close(true);

  const second = await createSidecarToken(control, control.pat);
  sc = await startTestSidecar({ controlUrl: control.url, token: second.token, dir: sc.dir });
  t.equal(sc.sidecar.epoch, epoch, 'the same log');
  for (let i = 0; i < 2; i++) await call(`after ${i}`);
  await waitFor(() => sc.sidecar.shipper.unshipped === 0 && sc.sidecar.shipper.acked >= 5, 'shipped again');

  const events = (await control.call('/api/audit?event_type=llm_call&limit=100', { token: control.pat })).body
    .data as { origin: { epoch: string; index: number; sidecar_id: string } | null }[];
  const indexes = events
    .filter((e) => e.origin?.epoch === epoch)
    .map((e) => e.origin?.index)
    .sort((a, b) => (a ?? 0) - (b ?? 0));
  t.same(indexes, [1, 2, 3, 4, 5], 'each entry of the log once');
  const integrity = await control.call('/api/audit/integrity?refresh=true', { token: control.pat });
  t.equal(integrity.body.status, 'intact');
});

t.test("another org's sidecar cannot take over a log", async (t) => {
  const control = await startService();
  const mine = await createSidecarToken(control, control.pat);
  const sc = await startTestSidecar({ controlUrl: control.url, token: mine.token });
  t.teardown(async () => {
    await sc.close();
    await control.close();
  });
  await waitFor(() => sc.sidecar.shipper.acked >= 0 && sc.sidecar.snapshot.loaded, 'registered');
  const client = new OpenAI({ apiKey: control.agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
  await client.chat.completions.create({ model: 'mock-echo', messages: [{ role: 'user', content: 'x' }] });
  await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'shipped');
  const org = await control.call('/api/orgs', { token: control.pat, body: { name: 'other-org' } });
  const theirs = await control.call('/api/sidecars', {
    token: control.pat,
    body: { name: 'theirs', org_id: org.body.org_id },
  });
  t.equal(theirs.status, 201, JSON.stringify(theirs.body));
  const keys = sc.sidecar.log.publicDocument();
  const res = await fetch(`${control.url}/api/sync/log`, {
    method: 'POST',
    headers: { authorization: `Bearer ${theirs.body.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ epoch: sc.sidecar.epoch, keys }),
  });
  t.equal(res.status, 409, 'the log is another org sidecar’s');
});
