/**
 * Worker-thread entry of ScanPool: the content detectors over large texts, off the event loop.
 * Protocol (serveJobs): a job is `{texts, opts}`; the answer is one DetectionResult per text
 * (null for an empty one, which scanTexts skips).
 */
import { isMainThread } from 'node:worker_threads';
import { type DetectOptions, detect } from '../core/detect/index.js';
import { serveJobs } from '../util/job-worker.js';
import { lowerThreadPriority } from '../util/thread-priority.js';

if (isMainThread) throw new Error('scan-worker runs as a worker thread');

// Someone waits for this scan, but it is one large call: on a contended core the event loop, and
// with it every ordinary call, wins over it.
lowerThreadPriority(5);

serveJobs((job) => {
  const { texts, opts } = job as { texts: readonly string[]; opts: DetectOptions };
  return texts.map((text) => (text.length === 0 ? null : detect(text, opts)));
});
