/**
 * The one error catalog. Every non-2xx response govgate sends carries one of these codes, in the
 * shape `{error: {type, code, message, param?, request_id}}`. `docs/errors.md` lists every code;
 * a test keeps the two in sync.
 */
export const ERROR_CATALOG = {
  invalid_request: { status: 400, type: 'invalid_request_error' },
  invalid_json: { status: 400, type: 'invalid_request_error' },
  invalid_flags: { status: 400, type: 'invalid_request_error' },
  invalid_policy: { status: 400, type: 'invalid_request_error' },
  model_not_found: { status: 400, type: 'invalid_request_error' },
  unauthenticated: { status: 401, type: 'authentication_error' },
  proxy_auth_required: { status: 407, type: 'authentication_error' },
  forbidden: { status: 403, type: 'permission_error' },
  webauthn_required: { status: 403, type: 'permission_error' },
  mandate_invalid: { status: 403, type: 'permission_error' },
  not_found: { status: 404, type: 'not_found_error' },
  tool_not_found: { status: 404, type: 'not_found_error' },
  method_not_allowed: { status: 405, type: 'invalid_request_error' },
  request_timeout: { status: 408, type: 'invalid_request_error' },
  conflict: { status: 409, type: 'conflict_error' },
  approval_not_pending: { status: 409, type: 'conflict_error' },
  idempotency_in_progress: { status: 409, type: 'conflict_error' },
  idempotency_mismatch: { status: 409, type: 'conflict_error' },
  idempotency_not_kept: { status: 409, type: 'conflict_error' },
  org_protected: { status: 409, type: 'conflict_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  rate_limited: { status: 429, type: 'rate_limit_error' },
  internal_error: { status: 500, type: 'api_error' },
  upstream_error: { status: 502, type: 'api_error' },
  unavailable: { status: 503, type: 'api_error' },
  upstream_timeout: { status: 504, type: 'api_error' },
  loop_detected: { status: 508, type: 'api_error' },
} as const satisfies Record<string, { status: number; type: string }>;

export type ErrorCode = keyof typeof ERROR_CATALOG;

/** An error that is meant to reach the caller. Anything else thrown is a bug and becomes a 500. */
export class ServiceError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly param: string | undefined;
  readonly headers: Readonly<Record<string, string>> | undefined;
  /** Every problem found, when there are several (invalid policies, strict bodies). */
  readonly problems: readonly { path: string; message: string }[] | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    opts: {
      param?: string;
      cause?: unknown;
      headers?: Record<string, string>;
      problems?: readonly { path: string; message: string }[];
    } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ServiceError';
    this.code = code;
    this.status = ERROR_CATALOG[code].status;
    this.param = opts.param;
    this.headers = opts.headers;
    this.problems = opts.problems;
  }
}

/**
 * A call refused before anything was sent to its provider, by the provider's own request
 * conversion (a custom tool's grammar an Anthropic model cannot be held to): its audit event
 * names no provider, as a policy block's does (spec 2.7: `provider` is the one that received it).
 */
export class UnsentError extends ServiceError {}

export interface ErrorBody {
  type: 'error';
  error: {
    type: string;
    code: ErrorCode;
    message: string;
    param?: string;
    request_id: string;
    problems?: readonly { path: string; message: string }[];
  };
}

/**
 * The body of an error response. The top-level `type: "error"` makes the same body readable by
 * Anthropic-style clients, which look for it; OpenAI-style clients read `error`.
 */
export function errorBody(
  code: ErrorCode,
  message: string,
  requestId: string,
  param?: string,
  problems?: readonly { path: string; message: string }[],
): ErrorBody {
  const error: ErrorBody['error'] = { type: ERROR_CATALOG[code].type, code, message, request_id: requestId };
  if (param !== undefined) error.param = param;
  if (problems !== undefined) error.problems = problems;
  return { type: 'error', error };
}

export function isServiceError(err: unknown): err is ServiceError {
  return err instanceof ServiceError;
}
