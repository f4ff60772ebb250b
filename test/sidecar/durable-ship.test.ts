import OpenAI from 'openai';
import t from 'tap';
import { controlWithSidecar, fsyncGate } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A machine crash takes back what its store committed since the last fsync. An entry the sidecar
 * shipped and then lost that way forked its log (every later entry refused), so the sidecar ships
 * only what is on its disk (and the control plane acknowledges only what is on its own). Here the
 * sidecar store's fsyncs are held until the test lets them go.
 */
t.test('a sidecar ships entries only once they are fsynced', async (t) => {
  const { control, sc } = await controlWithSidecar(t);
  const fsyncs = fsyncGate(t, sc.sidecar.store.root);

  const client = new OpenAI({ apiKey: control.agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
  const pipelineOf = async (text: string): Promise<string> => {
    const res = await client.chat.completions.create({
      model: 'mock-echo',
      messages: [{ role: 'user', content: text }],
    });
    return (res as unknown as { service: { audit_url: string } }).service.audit_url
      .split('/')
      .at(-1) as string;
  };
  const shipped = async (p: string): Promise<boolean> =>
    ((await control.call(`/api/audit/pipeline/${p}`, { token: control.pat })).body.data?.length ?? 0) > 0;

  const until = async (what: string, check: () => Promise<boolean>): Promise<void> => {
    for (const deadline = Date.now() + 20_000; !(await check()); ) {
      if (Date.now() > deadline) throw new Error(`timed out waiting: ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const first = await pipelineOf('before');
  await until('an entry shipped while fsyncs run', () => shipped(first));

  fsyncs.hold();
  const pipeline = await pipelineOf('while the disk is slow');
  t.ok(sc.sidecar.shipper.unshipped >= 1, 'answered, committed locally');
  await new Promise((r) => setTimeout(r, 1_500)); // six seal periods, and time to ship
  t.notOk(await shipped(pipeline), 'not shipped before its fsync');
  t.ok(fsyncs.waiting > 0, 'an fsync waits');

  fsyncs.release();
  await until('shipped once on disk', () => shipped(pipeline));
  await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'acknowledged');
});
