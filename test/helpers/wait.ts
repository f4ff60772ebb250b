import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `cond` every few ms until it holds (asynchronous work: seals, deliveries); throws after `timeoutMs`. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}
