import { setTimeout as sleep } from 'node:timers/promises';
import { type Agent, request } from 'undici';

/** How one POST went, after its retries. */
export interface Delivery {
  /** The last HTTP status answered (null when none was). */
  readonly status: number | null;
  readonly attempts: number;
  /** Null when delivered (a 2xx). */
  readonly error: string | null;
}

/**
 * POSTs `body` to `url` until a 2xx, at most `tries` times: a 5xx, a 429 or a network error is
 * tried again after `backoffMs`, doubling; another answer is final (the request itself is wrong).
 * The waits are unref'd, so a retry pending does not hold the process open at shutdown;
 * `stopped()` ends the loop between tries. What alerts, exports and spans share.
 */
export async function postWithRetries(
  agent: Agent,
  url: string,
  opts: {
    readonly headers: Record<string, string>;
    readonly body: string;
    readonly tries: number;
    readonly backoffMs: number;
    readonly timeoutMs: number;
    readonly stopped?: () => boolean;
  },
): Promise<Delivery> {
  let status: number | null = null;
  let error: string | null = 'not sent';
  let attempts = 0;
  while (attempts < opts.tries && !(opts.stopped?.() ?? false)) {
    attempts++;
    try {
      const res = await request(url, {
        method: 'POST',
        dispatcher: agent,
        headers: opts.headers,
        body: opts.body,
        headersTimeout: opts.timeoutMs,
        bodyTimeout: opts.timeoutMs,
      });
      status = res.statusCode;
      await res.body.dump();
      if (status >= 200 && status < 300) return { status, attempts, error: null };
      error = `the destination answered HTTP ${status}`;
      if (status < 500 && status !== 429) break;
    } catch (err) {
      status = null;
      error = (err as Error).message;
    }
    if (attempts < opts.tries) await sleep(opts.backoffMs * 2 ** (attempts - 1), undefined, { ref: false });
  }
  return { status, attempts, error };
}
