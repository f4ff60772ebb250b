import t from 'tap';
import { type JobCancel, JobDropped, JobWorker } from '../../src/util/job-worker.js';

// A job waiting for its turn holds its whole input (a scan job: every text of a request of up to
// 5 MiB): one whose caller went away must not wait on, nor be run for nobody.

const DYING_WORKER = new URL('../helpers/dying-worker.js', import.meta.url);

/** A caller that goes away when the test says, as a server response does. */
function caller(): JobCancel & { leave(): void } {
  const listeners: (() => void)[] = [];
  let aborted = false;
  return {
    get aborted() {
      return aborted;
    },
    onAbort(listener) {
      if (aborted) listener();
      else listeners.push(listener);
    },
    leave() {
      aborted = true;
      for (const l of listeners.splice(0)) l();
    },
  };
}

t.test('a job whose caller leaves before its turn is dropped; one the worker took runs', async (t) => {
  const worker = new JobWorker(DYING_WORKER, 'test', { maxPosted: 1 });
  t.teardown(() => worker.close());
  const a = caller();
  const b = caller();
  const first = worker.run({ echo: 1 }, { cancel: a });
  const second = worker.run({ echo: 2 }, { cancel: b });
  const third = worker.run({ echo: 3 });
  t.equal(worker.pending, 3);
  a.leave(); // the worker has it: it runs to its end
  b.leave(); // still waiting here: dropped
  t.equal(worker.pending, 2, 'the dropped job left the queue at once');
  await t.rejects(second, JobDropped);
  await t.rejects(second, /the test job was dropped before it started: its caller went away/);
  t.same(await first, { echo: 1 });
  t.same(await third, { echo: 3 });
  t.equal(await worker.run({ seen: true }), 3, 'the worker never saw the dropped job');
  await t.rejects(worker.run({ echo: 4 }, { cancel: b }), JobDropped, 'a caller already gone: at once');
  t.equal(worker.pending, 0);
});

t.test('without maxPosted every job is posted at once, and cannot be dropped', async (t) => {
  const worker = new JobWorker(DYING_WORKER, 'test');
  t.teardown(() => worker.close());
  const a = caller();
  const first = worker.run({ echo: 1 });
  const second = worker.run({ echo: 2 }, { cancel: a });
  a.leave();
  t.same(await first, { echo: 1 });
  t.same(await second, { echo: 2 }, 'posted to the worker already: it ran');
});

t.test('a death fails what the worker held; the jobs waiting go to a new worker', async (t) => {
  const worker = new JobWorker(DYING_WORKER, 'test', { maxPosted: 1 });
  t.teardown(() => worker.close());
  const dying = worker.run({ exit: 3 });
  const after = worker.run({ echo: 1 });
  await t.rejects(dying, /the test worker exited \(code 3\)/);
  t.same(await after, { echo: 1 }, 'never handed to the dead worker: the new one ran it');
  t.equal(await worker.run({ seen: true }), 2, 'the new worker saw it and this one');

  const closing = new JobWorker(DYING_WORKER, 'test', { maxPosted: 1 });
  const held = t.rejects(closing.run({ echo: 1 }), /the test worker is closed/);
  const waiting = t.rejects(closing.run({ echo: 2 }), /the test worker is closed/, 'and those waiting');
  await closing.close();
  await held;
  await waiting;
  t.equal(closing.pending, 0);
});
