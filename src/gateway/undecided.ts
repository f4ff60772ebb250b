import type { AuditInput, AuditSink } from '../audit/types.js';
import { isServiceError, type ServiceError } from '../core/errors.js';
import { ScanQueueFull } from '../govern/scan-pool.js';
import type { ServerResponse } from '../http/types.js';
import { JobDropped } from '../util/job-worker.js';

/** Why a call's answer ended early, as its event records it (earlyEnd). */
export interface EarlyEnd {
  readonly reason: string;
  readonly status: number;
  readonly code: string | null;
  readonly client: boolean;
}
export const CLIENT_LEFT: EarlyEnd = { reason: 'client disconnected', status: 499, code: null, client: true };
const SERVICE_CUT: EarlyEnd = {
  reason: 'the service shut down before the answer was delivered (its drain time was up)',
  status: 503,
  code: 'unavailable',
  client: false,
};

/**
 * Why a call's answer ended early, as its event records it: its client left (499; the metrics
 * count it so too), or the service closed the connection at the end of its drain (503); undefined
 * while the connection is open.
 */
export function earlyEnd(res: ServerResponse): EarlyEnd | undefined {
  return res.aborted ? (res.cut ? SERVICE_CUT : CLIENT_LEFT) : undefined;
}

/**
 * A governed call that was never decided (Governor.decideOrDefer rejected): the scan queue
 * refused it (ScanPool: 429 past its org's share, 503 past the whole queue), or a sidecar could
 * not ask its control plane about an approval the call may have, or the policy kept changing
 * while it was scanned (503 unavailable; all rethrown, to be answered with their Retry-After);
 * or it was dropped from the scan queue because its client went away (JobDropped: nobody to
 * answer, so it returns). `event` is the call's event, which is appended with `outcome: error`,
 * `rule_id: null`, and in `details` `decision: null`, the status, `error_code` and
 * `client_disconnected`, as a call that fails after its decision is. Anything else (flags that
 * do not parse, a fault) is rethrown as it came, unaudited as it is for an ordinary call.
 */
export async function auditUndecided(
  audit: AuditSink,
  res: ServerResponse,
  err: unknown,
  event: AuditInput & { details: Record<string, unknown> },
): Promise<void> {
  const dropped = err instanceof JobDropped;
  if (!dropped && !(err instanceof ScanQueueFull) && !(isServiceError(err) && err.code === 'unavailable'))
    throw err;
  // The client's abort dropped the scan: its event is the one a disconnect after the decision
  // gets (499, or 503 when the service cut the connection at the end of its drain).
  const early = dropped ? (earlyEnd(res) ?? CLIENT_LEFT) : undefined;
  const e = err as ServiceError;
  await audit.append(
    Object.assign(event, {
      rule_id: null,
      outcome: 'error',
      reason: early ? early.reason : e.message,
      details: Object.assign(event.details, {
        decision: null,
        status: early ? early.status : e.status,
        error_code: early ? early.code : e.code,
        client_disconnected: early?.client ?? false,
      }),
    }),
  );
  if (!dropped) throw err;
}
