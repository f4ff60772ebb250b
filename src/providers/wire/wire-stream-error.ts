/**
 * An `error` event inside an upstream Anthropic stream (the HTTP status was already 200).
 * The caller turns it into an error chunk for the agent.
 */
export class WireStreamError extends Error {
  readonly code = 'upstream_error';
  /** The provider's error type, e.g. `overloaded_error` or `api_error`. */
  readonly errorType: string;

  constructor(errorType: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'WireStreamError';
    this.errorType = errorType;
  }
}
