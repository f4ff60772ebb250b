import type { TlsFiles } from './tls.js';
/** What an adapter hands to the application: a plain request, independent of the HTTP engine. */
export interface ServerRequest {
  /** Upper-case method. */
  readonly method: string;
  readonly path: string;
  /** Raw query string without the leading `?` ('' when absent). */
  readonly query: string;
  /** Lower-case header names. */
  readonly headers: Readonly<Record<string, string>>;
  /** The whole body (empty when none). Bounded by MAX_BODY_BYTES. */
  readonly body: Buffer;
  /**
   * Set when the body was refused while reading it; the body is then empty. `busy`: the server
   * holds as many body bytes as it may (BodyBudget), the request is answered 503.
   */
  readonly bodyError: 'too_large' | 'busy' | undefined;
  /** With `too_large`: the limit it passed, in bytes (MAX_BODY_BYTES, or a `LargeBodyLimit`'s). */
  readonly bodyLimit?: number;
  /**
   * A header that may come once (`ONCE_HEADERS`: framing, host, credentials) that came more than
   * once, lower case. The body is then empty and unread: the application refuses the request and
   * the connection is closed after the answer.
   */
  readonly repeated: string | undefined;
  /**
   * The request arrived after the server began to drain (on a connection kept alive from before:
   * the listener is closed by then). The application refuses it; the adapter closes the
   * connection after every answer sent during the drain.
   */
  readonly draining: boolean;
}

export type OutgoingHeaders = Readonly<Record<string, string>>;

/** The response side. Only the adapter touches the engine's objects; this is safe after an abort. */
export interface ServerResponse {
  /** True once the client went away before the response ended. */
  readonly aborted: boolean;
  /**
   * With `aborted`: the service closed the connection (its drain's time was up), the client did
   * not leave. A call cut so is the service's failure (503), not the client's (499).
   */
  readonly cut: boolean;
  /** True once a response was started (send, or stream headers). */
  readonly started: boolean;
  /** Called once if the client goes away before the response ends. */
  onAbort(listener: () => void): void;
  send(status: number, headers: OutgoingHeaders, body: string | Uint8Array, closeConnection?: boolean): void;
  /** Starts a streamed response (headers are written with the first chunk). */
  stream(status: number, headers: OutgoingHeaders): void;
  /**
   * Writes a chunk of a streamed response; returns false when the client is gone. It never
   * refuses a chunk: a writer that may outrun the client watches `backlog` and waits in `drain`.
   */
  write(chunk: string | Uint8Array): boolean;
  end(chunk?: string | Uint8Array): void;
  /**
   * Bytes written that the client's connection has not taken yet, held by govgate or by the HTTP
   * engine (not by the kernel): node:http counts them exactly; uWS only says whether a write was
   * taken whole, so there it is what govgate holds plus every byte written since the first write
   * uWS did not take whole.
   */
  readonly backlog: number;
  /**
   * Waits until the connection took what is held (true at once when nothing is), or false when
   * the client goes away or the connection takes nothing for `stallMs`.
   */
  drain(stallMs: number): Promise<boolean>;
  /** Closes the connection at once, abandoning the response (a client that stopped reading). */
  close(): void;
}

export type HttpHandler = (req: ServerRequest, res: ServerResponse) => void;

export interface HttpServer {
  readonly engine: 'uws' | 'node';
  readonly port: number;
  /**
   * Drains: stops listening and marks the requests that still arrive on open connections
   * `draining` (synchronously, before the first await), answers with `Connection: close` from
   * then on, waits for the requests in flight (at most `graceMs`), then closes every connection.
   */
  close(graceMs?: number): Promise<void>;
  /** Request body bytes held while bodies are read (BodyBudget). */
  readonly bufferedBodyBytes: number;
  /**
   * Serves new connections with `files` (checked by `loadTlsFiles`), on the port it holds, once
   * it resolves; connections open already keep the certificate they were made with, and their
   * requests in flight run on. Rejects, the listener serving as before, when the files cannot be
   * put in force, or when this listener serves plain HTTP. (tls-reload.ts calls it.)
   */
  replaceTls(files: TlsFiles): Promise<void>;
}

export interface ListenOptions {
  readonly host: string;
  readonly port: number;
  /**
   * node:http only: a connection whose request headers, or whole request, take longer than this
   * is answered 408 and closed (defaults: 30 s and 120 s). uWS closes idle connections itself.
   */
  readonly headersTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  /** HTTPS with this certificate and key (SERVICE_TLS_CERT, SERVICE_TLS_KEY); plain HTTP without. */
  readonly tls?: TlsFiles;
  /** Requests that may carry more than MAX_BODY_BYTES (see `LargeBodyLimit`). */
  readonly largeBodyLimit?: LargeBodyLimit;
  /** The bound on body bytes held across requests (default MAX_BUFFERED_BODY_BYTES). */
  readonly bodyBudgetBytes?: number;
  /**
   * uWS over TLS only: how many apps retired by certificate renewals are kept (default
   * RETIRED_APPS_KEPT), and how long one beyond them must have had no request in flight before it
   * is closed (default RETIRED_APP_QUIET_MS). See `listenUws`.
   */
  readonly retiredApps?: { readonly kept?: number; readonly quietMs?: number };
}

/**
 * The body limit of a request whose body turns out larger than MAX_BODY_BYTES, asked only then,
 * with its path and headers, before more of it is read. The control plane lets a sidecar with a
 * valid token send audit batches larger than that (one entry can be); everything else stays at
 * MAX_BODY_BYTES, whatever this answers below it.
 */
export type LargeBodyLimit = (path: string, headers: Readonly<Record<string, string>>) => number;

/** What `path` may carry once its body is past MAX_BODY_BYTES. */
export function largeLimit(
  large: LargeBodyLimit | undefined,
  path: string,
  headers: Readonly<Record<string, string>>,
): number {
  return large === undefined ? MAX_BODY_BYTES : Math.max(MAX_BODY_BYTES, large(path, headers));
}

/** Bodies over this size are refused with 413 (DESIGN C). */
export const MAX_BODY_BYTES = 5 * 1024 * 1024;

const STATUS_TEXT: Record<number, string> = {
  200: 'OK',
  201: 'Created',
  202: 'Accepted',
  204: 'No Content',
  304: 'Not Modified',
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Entity',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
  508: 'Loop Detected',
};

const STATUS_LINES = new Map<number, string>();
export function statusLine(status: number): string {
  let line = STATUS_LINES.get(status);
  if (line === undefined) {
    line = `${status} ${STATUS_TEXT[status] ?? 'Status'}`;
    STATUS_LINES.set(status, line);
  }
  return line;
}

/** The address cannot be listened on (in use, not local, …): an operator's to fix, not a bug. */
export class ListenError extends Error {
  constructor(host: string, port: number, cause?: NodeJS.ErrnoException) {
    super(`cannot listen on ${host}:${port}${cause ? `: ${cause.code ?? cause.message}` : ''}`, { cause });
    this.name = 'ListenError';
  }
}
