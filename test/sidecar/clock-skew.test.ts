import t from 'tap';
import { controlWithSidecar } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A sidecar whose clock is minutes off the control plane's signs mandates the control plane
 * refuses (not yet valid) or, behind, takes keys past their expiry. It says so: readiness `clock`
 * false and a gauge, from the Date of the control plane's answers. Here the sidecar's clock is
 * moved (Date.now) while the control plane's Date header comes from the native HTTP engine.
 */
t.test("a sidecar clock minutes off the control plane's is reported", async (t) => {
  const { sc } = await controlWithSidecar(t);
  await waitFor(() => sc.sidecar.snapshot.loaded, 'a snapshot');
  const ready = async () => (await sc.call('/api/health/ready')).body;
  t.equal((await ready()).status, 'ok');
  const realNow = Date.now;
  Date.now = () => realNow() + 120_000;
  t.teardown(() => {
    Date.now = realNow;
  });
  let body: any;
  for (let i = 0; i < 50; i++) {
    body = await ready();
    if (body.status !== 'ok') break;
    await new Promise((r) => setTimeout(r, 50));
  }
  t.equal(body.status, 'unavailable');
  t.equal(body.checks?.clock, false, 'the clock check fails');
  const metrics = String((await sc.call('/api/metrics')).body);
  t.match(metrics, /govgate_sidecar_clock_skew_seconds -1[12]\d/);
  Date.now = realNow;
  for (let i = 0; i < 50; i++) {
    body = await ready();
    if (body.status === 'ok') break;
    await new Promise((r) => setTimeout(r, 50));
  }
  t.equal(body.status, 'ok', 'ready again once the clocks agree');
});
