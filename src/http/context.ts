import { isUtf8 } from 'node:buffer';
import { errorBody, isServiceError, ServiceError } from '../core/errors.js';
import type { Principal } from '../identity/types.js';
import type { OutgoingHeaders, ServerRequest, ServerResponse } from './types.js';

const JSON_TYPE = 'application/json';

/** Body types read as JSON: none given, JSON, and the types curl and simple clients send by default. */
function isJsonish(contentType: string | undefined): boolean {
  if (contentType === undefined || contentType === '') return true;
  const base = (contentType.split(';', 1)[0] as string).trim().toLowerCase();
  return (
    base === JSON_TYPE ||
    base.endsWith('+json') ||
    base === 'text/plain' ||
    base === 'application/x-www-form-urlencoded'
  );
}

export type FinishListener = (ctx: Ctx, status: number) => void;

/** One request in flight: the plain request, the response writer and what was learned so far. */
export class Ctx {
  principal: Principal | undefined;
  status = 0;
  /** Why govgate answered locally (snake_case), for logs and metrics. */
  reason = '';
  /** The message of the error the request failed with, for the log. */
  error = '';
  private parsedQuery: URLSearchParams | undefined;

  constructor(
    readonly req: ServerRequest,
    readonly res: ServerResponse,
    readonly requestId: string,
    readonly route: string,
    readonly params: Readonly<Record<string, string>>,
    readonly startedAt: number,
    private readonly onFinish: FinishListener,
  ) {}

  header(name: string): string | undefined {
    return this.req.headers[name];
  }

  /** The query parameters; one given twice is refused (400, naming it): no route reads a list. */
  get query(): URLSearchParams {
    if (this.parsedQuery === undefined) {
      const q = new URLSearchParams(this.req.query);
      if (q.size > 1) {
        const seen = new Set<string>();
        for (const name of q.keys()) {
          if (seen.has(name))
            throw new ServiceError('invalid_request', `the query parameter ${name} is given more than once`, {
              param: name,
            });
          seen.add(name);
        }
      }
      this.parsedQuery = q;
    }
    return this.parsedQuery;
  }

  /**
   * Refuses (400, naming it) a query parameter not in `allowed`: a misspelt or unsupported filter
   * is an error, not ignored (ignored, it would widen what is read). `what`: "a search parameter".
   */
  onlyParams(allowed: ReadonlySet<string>, what: string): void {
    for (const name of this.query.keys())
      if (!allowed.has(name))
        throw new ServiceError('invalid_request', `${name} is not ${what}`, { param: name });
  }

  /** The body parsed as JSON (400 when it is not JSON, 415 for other media types). */
  jsonBody(): unknown {
    if (!isJsonish(this.req.headers['content-type'])) {
      throw new ServiceError('unsupported_media_type', 'the request body must be JSON (application/json)');
    }
    const encoding = this.req.headers['content-encoding'];
    if (encoding !== undefined && encoding !== '' && encoding.trim().toLowerCase() !== 'identity') {
      // Bodies are not decompressed: read as it came, a compressed body would be refused as
      // invalid JSON, or worse, read as something it is not.
      throw new ServiceError(
        'unsupported_media_type',
        'the request body must be sent without Content-Encoding (it is not decompressed)',
      );
    }
    const body = this.req.body;
    if (body.length === 0)
      throw new ServiceError('invalid_json', 'the request body is empty; a JSON object is expected');
    // Bytes that are not UTF-8 would be decoded as U+FFFD, changing the text that is scanned,
    // recorded and sent on: refused, as an unpaired surrogate escape is below.
    if (!isUtf8(body))
      throw new ServiceError('invalid_json', 'the request body is not valid UTF-8; send JSON in UTF-8');
    if (body.length > DEPTH_SCAN_FROM && nestedDeeperThan(body, MAX_JSON_DEPTH))
      throw new ServiceError(
        'invalid_json',
        `the request body is nested deeper than ${MAX_JSON_DEPTH} levels of arrays and objects`,
      );
    let value: unknown;
    try {
      value = JSON.parse(body.toString('utf8'));
    } catch (err) {
      throw new ServiceError(
        'invalid_json',
        `the request body is not valid JSON: ${parseProblem(err as Error)}`,
        { cause: err },
      );
    }
    // A surrogate code unit can only come from a `\ud…` escape (decoded UTF-8 holds none), so
    // nearly every body is let through by two byte searches.
    if (body.indexOf(SURROGATE_ESCAPE) !== -1 || body.indexOf(SURROGATE_ESCAPE_UPPER) !== -1) {
      const at = loneSurrogateAt(value, '');
      if (at !== undefined) {
        throw new ServiceError(
          'invalid_json',
          `the request body is not valid JSON: the string at ${at || 'the top level'} holds an unpaired ` +
            'UTF-16 surrogate (a \\ud800-\\udfff escape with no partner); send well-formed Unicode',
          at === '' ? {} : { param: at },
        );
      }
    }
    return value;
  }

  /** A JSON object body, or 400. */
  jsonObject(): Record<string, unknown> {
    const value = this.jsonBody();
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new ServiceError('invalid_request', 'the request body must be a JSON object');
    }
    return value as Record<string, unknown>;
  }

  private finished = false;

  private finish(status: number): void {
    if (this.finished) return;
    this.finished = true;
    this.status = status;
    this.onFinish(this, status);
  }

  /**
   * The connection closed before the response ended: the client went away (recorded as 499), or
   * the service closed it at the end of its drain (503).
   */
  clientGone(): void {
    const cut = this.res.cut;
    if (!this.reason) this.reason = cut ? 'shutdown_cut' : 'client_disconnected';
    this.finish(cut ? 503 : 499);
  }

  /** A stream's client stopped reading: its connection is closed (recorded as 408). */
  clientStalled(): void {
    if (!this.reason) this.reason = 'client_stalled';
    this.finish(408);
    this.res.close();
  }

  sendRaw(status: number, contentType: string, body: string | Uint8Array, extra?: OutgoingHeaders): void {
    if (this.res.started || this.res.aborted) return;
    const headers: Record<string, string> = { 'content-type': contentType, 'x-request-id': this.requestId };
    if (extra) Object.assign(headers, extra);
    // A body refused unread, or a request refused for a repeated header (its framing may be in
    // doubt): what follows on the connection cannot be read as requests.
    const req = this.req;
    this.res.send(status, headers, body, req.bodyError !== undefined || req.repeated !== undefined);
    this.finish(status);
  }

  json(status: number, body: unknown, extra?: OutgoingHeaders): void {
    this.sendRaw(status, JSON_TYPE, JSON.stringify(body), extra);
  }

  /** Starts a streamed response; call `endStream` when it is over. */
  startStream(status: number, contentType: string, extra?: OutgoingHeaders): void {
    const headers: Record<string, string> = {
      'content-type': contentType,
      'cache-control': 'no-cache',
      'x-request-id': this.requestId,
    };
    if (extra) Object.assign(headers, extra);
    this.res.stream(status, headers);
    this.status = status;
  }

  endStream(chunk?: string): void {
    this.res.end(chunk);
    this.finish(this.status);
  }

  /** Answers with the error's status and contract body; a non-service error is a bug (500). */
  fail(err: unknown): void {
    const e = isServiceError(err)
      ? err
      : new ServiceError('internal_error', 'internal error', { cause: err });
    if (!this.reason) this.reason = e.code;
    if (!this.error) this.error = e.message;
    if (this.res.started) {
      // Headers are out: the stream owner decides how to end it. Nothing more can be said here.
      if (!this.res.aborted) this.endStream();
      return;
    }
    // DESIGN C: 429 comes with Retry-After; a source that knows no better time says 1 s.
    const headers =
      e.status === 429 && e.headers?.['retry-after'] === undefined
        ? { ...e.headers, ...RETRY_SOON }
        : e.headers;
    this.json(e.status, errorBody(e.code, e.message, this.requestId, e.param, e.problems), headers);
  }
}

const RETRY_SOON = { 'retry-after': '1' } as const;

const SURROGATE_ESCAPE = Buffer.from('\\ud');
const SURROGATE_ESCAPE_UPPER = Buffer.from('\\uD');

/**
 * Where a string (or member name) of `v` holds an unpaired surrogate, as a path (`messages[0].content`),
 * or undefined. I-JSON (RFC 7493) forbids them, RFC 8785 cannot canonicalize them, and the
 * providers refuse them ("no low surrogate in string"): such a body is refused whole.
 */
function loneSurrogateAt(root: unknown, rootPath: string): string | undefined {
  // Depth first, in document order, on a stack of its own: JSON.parse nests as deep as the body
  // does, and a recursive walk would overflow the call stack on a body a few thousand levels deep.
  const stack: Array<{ v: unknown; path: string }> = [{ v: root, path: rootPath }];
  for (let top = stack.pop(); top !== undefined; top = stack.pop()) {
    const { v, path } = top;
    if (typeof v === 'string') {
      if (!v.isWellFormed()) return path;
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], path: `${path}[${i}]` });
      continue;
    }
    const entries = Object.entries(v);
    for (const [k] of entries) if (!k.isWellFormed()) return (path ? `${path}.${k}` : k).toWellFormed();
    for (let i = entries.length - 1; i >= 0; i--) {
      const [k, x] = entries[i] as [string, unknown];
      stack.push({ v: x, path: path ? `${path}.${k}` : k });
    }
  }
  return undefined;
}

/**
 * What JSON.parse found wrong, without the excerpt of the body V8 quotes in some messages
 * (`Unexpected token 's', "{"key": sk-live-…"... is not valid JSON`): a body can hold a secret.
 */
function parseProblem(err: Error): string {
  const cut = err.message.search(/, (?:\.\.\.)?".*(?:\.\.\.)? is not valid JSON$/s);
  return cut === -1 ? err.message : err.message.slice(0, cut);
}

/** For `Ctx.onlyParams`: a route that takes no query parameter. */
export const NO_PARAMS: ReadonlySet<string> = new Set();

/** The nesting a request body may have (a tool's JSON schema is the deepest thing sent). */
const MAX_JSON_DEPTH = 256;
/**
 * Bodies up to this size are parsed without a depth scan: they cannot nest more than 32 Ki levels,
 * which JSON.parse and the walks after it take in about a millisecond. A 5 MiB body of brackets
 * held the event loop over a second in JSON.parse alone.
 */
const DEPTH_SCAN_FROM = 64 * 1024;

/** Does the JSON text in `body` open more than `max` arrays and objects at once? (Strings skipped.) */
function nestedDeeperThan(body: Buffer, max: number): boolean {
  let depth = 0;
  for (let i = 0; i < body.length; i++) {
    const c = body[i] as number;
    if (c === 0x22) {
      // A string: to its closing quote, an escaped character skipped whole.
      for (i++; i < body.length; i++) {
        const d = body[i] as number;
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}
