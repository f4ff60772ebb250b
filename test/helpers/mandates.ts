import type { MandateRequest } from '../../src/govern/mandates.js';

/** The issuer the mandate tests sign as. */
export const ISSUER = 'https://govgate.test';
/** The mandate tests' clock start. */
export const T0 = Date.UTC(2025, 0, 15, 12, 0, 0);
/** A mandate request for one payments call. */
export const REQUEST: MandateRequest = {
  sub: 'billing-agent',
  org: 'default',
  behavior_id: 'bhv_1',
  pipeline_id: 'pl_1',
  cap: { type: 'TOOL_CALL', tool: 'payments.transfer', args_sha256: 'ab'.repeat(32) },
};
