import { ServiceError } from '../core/errors.js';
import { randomBase62 } from '../util/ids.js';

/**
 * The header govgate puts on every request it sends to a provider, and refuses on every request
 * it receives. A provider whose `base_url` leads back to a govgate (this one, another process of
 * this deployment behind a load balancer, or another deployment) would otherwise make each call
 * a new call: the review (egress #3) saw one chat call recurse until every upstream connection
 * was held, and keep going after its client left, at ~1,300 audit events/s.
 */
export const HOP_HEADER = 'x-govgate-hop';

/**
 * This process's id in the header: random at each start. Any value is refused, not only this
 * one (a loop through two deployments comes back with the other's id); it only tells a log
 * reader whether the refused request was this process's own.
 */
export const HOP_ID = randomBase62(16);

/**
 * The refusal of a request that carries the hop header (`value`). Built only then: a request
 * without the header costs one property read.
 */
export function loopDetected(value: string): ServiceError {
  const whose = value === HOP_ID ? 'by this govgate process' : 'by a govgate';
  return new ServiceError(
    'loop_detected',
    `this request was sent ${whose} to a provider (it carries ${HOP_HEADER}), and govgate serves ` +
      "none such: the provider's base_url leads back to govgate, which would loop",
    { param: HOP_HEADER },
  );
}
