import { ServiceError } from '../core/errors.js';

/**
 * Headers a request may carry at most once. Two `Content-Length` or `Transfer-Encoding` headers
 * frame a request ambiguously: uWS frames it by the first `Content-Length` while JavaScript read
 * the last, so the rest of the body ran as a second request, smuggled past a front proxy that
 * framed it by the last (egress review #7; RFC 9112 §6.3 says to refuse such a message). Of the
 * others, one of two credentials, hosts or acting agents would be used without a word: uWS kept
 * the last, node:http the first (or both, joined with a comma). Both engines refuse them all
 * with 400 and close the connection. Any other header sent twice is read as one comma-separated
 * list by both (RFC 9110 §5.3), so a second X-Service-Flags line adds to the first.
 */
export const ONCE_HEADERS: ReadonlySet<string> = new Set([
  'content-length',
  'transfer-encoding',
  'host',
  'authorization',
  'x-api-key',
  'x-agent-id',
  // How the body is read: node:http kept the first of two, uWS the last.
  'content-type',
  'content-encoding',
]);

/** The refusal of a request that carries `name` (lower case) more than once. */
export function repeatedHeader(name: string): ServiceError {
  return new ServiceError(
    'invalid_request',
    `the request is not valid HTTP/1.1: the ${name} header appears more than once`,
    { param: name },
  );
}

/**
 * The first of ONCE_HEADERS that `raw` (names and values in turn, as node:http's `rawHeaders`)
 * holds more than once, or undefined. Called only when some header was repeated.
 */
export function repeatedOnceHeader(raw: readonly string[]): string | undefined {
  const seen = new Set<string>();
  for (let i = 0; i < raw.length; i += 2) {
    const name = (raw[i] as string).toLowerCase();
    if (!ONCE_HEADERS.has(name)) continue;
    if (seen.has(name)) return name;
    seen.add(name);
  }
  return undefined;
}
