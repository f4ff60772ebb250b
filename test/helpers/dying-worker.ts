// A worker for JobWorker tests: a job `{exit: N}` ends the thread with code N before answering,
// `{throw: 'msg'}` fails the job, anything else is echoed back.
import { serveJobs } from '../../src/util/job-worker.js';

serveJobs((job) => {
  const j = job as { exit?: number; throw?: string };
  if (typeof j.exit === 'number') process.exit(j.exit);
  if (typeof j.throw === 'string') throw new Error(j.throw);
  return job;
});
