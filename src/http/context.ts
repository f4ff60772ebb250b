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

  get query(): URLSearchParams {
    this.parsedQuery ??= new URLSearchParams(this.req.query);
    return this.parsedQuery;
  }

  /** The body parsed as JSON (400 when it is not JSON, 415 for other media types). */
  jsonBody(): unknown {
    if (!isJsonish(this.req.headers['content-type'])) {
      throw new ServiceError('unsupported_media_type', 'the request body must be JSON (application/json)');
    }
    const body = this.req.body;
    if (body.length === 0)
      throw new ServiceError('invalid_json', 'the request body is empty; a JSON object is expected');
    try {
      return JSON.parse(body.toString('utf8'));
    } catch (err) {
      throw new ServiceError(
        'invalid_json',
        `the request body is not valid JSON: ${(err as Error).message}`,
        { cause: err },
      );
    }
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

  /** The client went away before the response ended (recorded as 499). */
  clientGone(): void {
    if (!this.reason) this.reason = 'client_disconnected';
    this.finish(499);
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
    this.res.send(status, headers, body, this.req.bodyError !== undefined);
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
    this.json(e.status, errorBody(e.code, e.message, this.requestId, e.param, e.problems), e.headers);
  }
}
