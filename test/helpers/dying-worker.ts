// A worker for JobWorker tests: a job `{exit: N}` ends the thread with code N before answering,
// `{throw: 'msg'}` fails the job, `{seen: true}` answers with the jobs this thread was handed
// (itself included), anything else is echoed back.
import { serveJobs } from '../../src/util/job-worker.js';

let seen = 0;
serveJobs((job) => {
  seen++;
  const j = job as { exit?: number; throw?: string; seen?: boolean };
  if (typeof j.exit === 'number') process.exit(j.exit);
  if (typeof j.throw === 'string') throw new Error(j.throw);
  if (j.seen === true) return seen;
  return job;
});
