import OpenAI from 'openai';
import t from 'tap';
import { controlWithSidecar, fsyncGate } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A sidecar whose token is revoked stops deciding at once (its snapshot is cleared), but what it
 * recorded before is still shipped for a while: the calls it answered just before, or in the
 * second before it learned of the revocation, reach the org chain (they stayed in its log for
 * good). Here its fsyncs are held so those entries are still unshipped at the revocation.
 */
t.test('a revoked sidecar still ships what it recorded, for a grace period', async (t) => {
  const { control, sc, sidecarId } = await controlWithSidecar(t);
  await waitFor(() => sc.sidecar.snapshot.loaded, 'a snapshot');
  const fsyncs = fsyncGate(t, sc.sidecar.store.root);
  fsyncs.hold();
  const client = new OpenAI({ apiKey: control.agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
  const pipelines: string[] = [];
  for (let i = 0; i < 2; i++) {
    const res = await client.chat.completions.create({
      model: 'mock-echo',
      messages: [{ role: 'user', content: `just before ${i}` }],
    });
    pipelines.push(
      (res as unknown as { service: { audit_url: string } }).service.audit_url.split('/').at(-1) as string,
    );
  }
  t.ok(sc.sidecar.shipper.unshipped >= 2, 'recorded, not shipped yet');
  const revoked = await control.call(`/api/sidecars/${sidecarId}`, { token: control.pat, method: 'DELETE' });
  t.equal(revoked.status, 200);
  fsyncs.release();
  sc.sidecar.shipper.retryNow();
  await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'shipped after the revocation', 15_000);
  for (const p of pipelines) {
    const found = await control.call(`/api/audit/pipeline/${p}`, { token: control.pat });
    t.equal(found.body.data?.length, 1, `${p} reached the org chain`);
  }
  // It decides nothing more.
  await waitFor(() => !sc.sidecar.snapshot.loaded, 'the snapshot cleared', 10_000);
});
