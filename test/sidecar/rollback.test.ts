import { cpSync, rmSync } from 'node:fs';
import OpenAI from 'openai';
import t from 'tap';
import { startService } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar, type TestSidecar } from '../helpers/sidecar.js';
import { tempDir } from '../helpers/tmp.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A sidecar whose store goes back in time (restored from a copy, a disk that lost writes) holds
 * less of its log than the control plane took in: what it writes next cannot join the org chain.
 * It must say so (log, readiness, metric), not count those entries as shipped.
 */
t.test('a sidecar log rolled back behind the control plane is reported, not taken as shipped', async (t) => {
  const control = await startService();
  const { token } = await createSidecarToken(control, control.pat);
  let sc: TestSidecar = await startTestSidecar({ controlUrl: control.url, token });
  const copy = tempDir('govgate-sidecar-copy-');
  t.teardown(async () => {
    await sc.close();
    await control.close();
    rmSync(copy, { recursive: true, force: true });
  });
  const call = async (text: string): Promise<void> => {
    const client = new OpenAI({ apiKey: control.agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
    await client.chat.completions.create({ model: 'mock-echo', messages: [{ role: 'user', content: text }] });
  };
  await call('before the copy');
  await waitFor(() => sc.sidecar.shipper.unshipped === 0 && sc.sidecar.shipper.acked >= 1, 'shipped');
  await sc.close(true);
  cpSync(sc.dir, copy, { recursive: true });

  sc = await startTestSidecar({ controlUrl: control.url, token, dir: sc.dir });
  for (let i = 0; i < 4; i++) await call(`after the copy ${i}`);
  await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'shipped');
  const taken = sc.sidecar.shipper.acked;
  await sc.close(true);

  // The copy comes back: its log ends four entries before what the control plane holds.
  rmSync(sc.dir, { recursive: true, force: true });
  cpSync(copy, sc.dir, { recursive: true });
  sc = await startTestSidecar({ controlUrl: control.url, token, dir: sc.dir });
  await call('after the restore');
  await waitFor(() => sc.sidecar.shipper.diverged !== undefined, 'the rollback is seen', 10_000);
  const diverged = sc.sidecar.shipper.diverged;
  t.equal(diverged?.control, taken, "the control plane's head");
  t.ok((diverged?.local ?? taken) < taken, `the local head is behind it (${diverged?.local})`);
  t.ok(sc.sidecar.shipper.unshipped >= 1, 'the entry written since is not counted as shipped');
  const ready = await sc.call('/api/health/ready');
  t.equal(ready.status, 503);
  t.equal(ready.body.checks.audit_log, false, 'readiness says the log cannot be shipped');
  const metrics = String((await sc.call('/api/metrics')).body);
  t.match(metrics, /govgate_sidecar_log_diverged 1/);
  t.equal(
    (await control.call('/api/audit/integrity?refresh=true', { token: control.pat })).body.status,
    'intact',
    'the org chain is untouched',
  );
});
