import { setTimeout as sleep } from 'node:timers/promises';

/** Polls `cond` every few ms until it holds (asynchronous work: seals, deliveries); throws after `timeoutMs`. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

/**
 * Waits until the newest event of org `org` is under a seal (seals are cut within 250 ms, later on
 * a loaded machine: a fixed sleep made retention tests prune less than they meant to).
 */
export async function waitSealed(
  svc: {
    call(path: string, init?: { token?: string }): Promise<{ status: number; body: any }>;
    readonly pat: string;
  },
  org = 'default',
  timeoutMs = 10_000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await svc.call(`/api/audit?limit=1&org_id=${encodeURIComponent(org)}`, { token: svc.pat });
    if (r.status === 200 && r.body.data[0]?.seal) return;
    if (Date.now() > end) throw new Error(`timed out waiting for org ${org}'s newest event to be sealed`);
    await sleep(10);
  }
}
