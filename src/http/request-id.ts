import { randomBase62 } from '../util/ids.js';

const REQUEST_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const REQUEST_ID_PREFIX = `req_${randomBase62(6)}`;
let requestCounter = 0;

/** A caller's X-Request-Id is kept when it is sane; otherwise one is made (unique per process). */
export function requestIdFor(given: string | undefined): string {
  if (given !== undefined && REQUEST_ID_RE.test(given)) return given;
  return `${REQUEST_ID_PREFIX}${(++requestCounter).toString(36)}`;
}
