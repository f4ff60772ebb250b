import { createServer, type IncomingMessage, type ServerResponse as NodeRes } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { type AddressInfo, Server as NetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { type ErrorCode, errorBody } from '../core/errors.js';
import { BodyBudget } from './body-budget.js';
import { InFlight } from './in-flight.js';
import { repeatedHeader, repeatedOnceHeader } from './once-headers.js';
import { requestIdFor } from './request-id.js';
import { StallWait } from './stall-wait.js';
import {
  type HttpHandler,
  type HttpServer,
  type LargeBodyLimit,
  ListenError,
  type ListenOptions,
  largeLimit,
  MAX_BODY_BYTES,
  type OutgoingHeaders,
  type ServerRequest,
  type ServerResponse,
} from './types.js';

const EMPTY = Buffer.alloc(0);
const netClose = NetServer.prototype.close;

/** How many requests node has parsed on a connection, counted on its socket. */
const ARRIVED = Symbol('govgate.requestsArrived');
/** How many answers node holds behind an earlier one on a connection, not written yet. */
const QUEUED = Symbol('govgate.answersQueued');
/** The `ARRIVED` number of the last request whose answer began (a 413 can begin before its body ends). */
const ANSWERED = Symbol('govgate.lastAnswered');
/** The last request parsed on the connection. */
const LAST = Symbol('govgate.lastRequest');
/** A request on the connection was refused for a repeated header: nothing more on it runs. */
const REFUSED = Symbol('govgate.refused');
type CountedSocket = Socket & {
  [ARRIVED]?: number;
  [QUEUED]?: number;
  [ANSWERED]?: number;
  [LAST]?: IncomingMessage;
  [REFUSED]?: boolean;
  /** node's: the response being written on the connection, if one is. */
  _httpMessage?: { headersSent?: boolean } | null;
};

/**
 * node parses requests pipelined on one connection at once and writes their answers in order,
 * each held until the one before it is written. So during the drain only the last answer on a
 * connection may close it: an earlier one that did would cut off the answers queued behind it,
 * calls already made and audited. The last one closes it instead, or the 503 of a request parsed
 * after the drain began.
 */
class NodeResponse implements ServerResponse {
  aborted = false;
  cut = false;
  started = false;
  private done = false;
  private abortListeners: (() => void)[] | undefined;
  /** Stream writes node reported handed to the kernel (its write callback): a stalled wait's progress. */
  private taken = 0;
  private wait: StallWait | undefined;
  private readonly onTaken = (err?: Error | null): void => {
    if (err) return;
    this.taken++;
    this.wait?.check();
  };

  /**
   * `seq`: this request's place among those parsed on `socket` (1 for the first); `queuedLost`:
   * the server's `close` listener for a connection with answers queued on it.
   */
  constructor(
    private readonly res: NodeRes,
    private readonly inFlight: InFlight,
    private readonly socket: CountedSocket,
    private readonly seq: number,
    private readonly queuedLost: (this: CountedSocket) => void,
  ) {
    res.on('close', () => {
      if (!this.done) this.markAborted();
    });
  }

  private markAborted(): void {
    this.aborted = true;
    this.cut = this.inFlight.cutOff;
    this.done = true;
    this.wait?.settle(false);
    this.inFlight.leave();
    const listeners = this.abortListeners;
    this.abortListeners = undefined;
    if (listeners) for (const l of listeners) l();
  }

  /** During the drain, whether this answer closes its connection: no request came after it on it. */
  private closesInDrain(): boolean {
    return this.inFlight.draining && this.socket[ARRIVED] === this.seq;
  }

  /**
   * The answer is handed to node; `endSocket`: a stream's, whose head may have said keep-alive, so
   * its connection is ended after it when it is the last answer on it during the drain. An answer
   * queued behind an earlier one on its connection (pipelined) is in flight until node writes it:
   * the end of the drain closes every connection, and would cut it off. Its connection gets one
   * `close` listener however many answers are queued on it (one each would warn past ten).
   */
  private handedOver(endSocket: boolean): void {
    const socket = this.socket;
    if (this.res.socket !== null || socket.destroyed) {
      if (endSocket && this.closesInDrain()) socket.end(); // after the chunks already written to it
      this.inFlight.leave();
      return;
    }
    const queued = (socket[QUEUED] ?? 0) + 1;
    socket[QUEUED] = queued;
    if (queued === 1) socket.on('close', this.queuedLost);
    this.res.once('finish', () => {
      const left = (socket[QUEUED] ?? 0) - 1;
      if (left < 0) return; // the connection closed first, and counted this one
      socket[QUEUED] = left;
      if (left === 0) socket.off('close', this.queuedLost);
      if (endSocket && this.closesInDrain()) socket.end();
      this.inFlight.leave();
    });
  }

  onAbort(listener: () => void): void {
    if (this.aborted) {
      listener();
      return;
    }
    if (this.done) return;
    (this.abortListeners ??= []).push(listener);
  }

  send(status: number, headers: OutgoingHeaders, body: string | Uint8Array, closeConnection = false): void {
    if (this.done) return;
    this.done = true;
    this.started = true;
    this.socket[ANSWERED] = this.seq;
    const res = this.res;
    res.statusCode = status;
    for (const name in headers) res.setHeader(name, headers[name] as string);
    // During the drain the last answer on a connection closes it (node ends the socket after it):
    // the client then reconnects, and the closed listener sends it to another instance.
    if (closeConnection || this.closesInDrain()) res.setHeader('connection', 'close');
    res.setHeader('content-length', typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength);
    res.end(body);
    this.handedOver(false);
  }

  stream(status: number, headers: OutgoingHeaders): void {
    if (this.done || this.started) return;
    this.started = true;
    this.socket[ANSWERED] = this.seq;
    const res = this.res;
    if (!this.closesInDrain()) res.writeHead(status, headers as Record<string, string>);
    else {
      // The application's own Connection header (keep-alive on SSE) gives way to close.
      for (const name in headers) if (name !== 'connection') res.setHeader(name, headers[name] as string);
      res.setHeader('connection', 'close');
      res.writeHead(status);
    }
    res.flushHeaders();
  }

  write(chunk: string | Uint8Array): boolean {
    if (this.done) return false;
    // One callback for every write (no allocation per chunk): it counts what reached the kernel.
    this.res.write(chunk, this.onTaken);
    return true;
  }

  get backlog(): number {
    return this.res.writableLength;
  }

  drain(stallMs: number): Promise<boolean> {
    if (this.done) return Promise.resolve(false);
    if (this.res.writableLength === 0) return Promise.resolve(true);
    return this.waitFor(() => this.res.writableLength === 0, stallMs);
  }

  private waitFor(ready: () => boolean, stallMs: number): Promise<boolean> {
    const wait = new StallWait(ready, () => this.taken, stallMs);
    this.wait = wait;
    return wait.done.then((ok) => {
      if (this.wait === wait) this.wait = undefined;
      return ok;
    });
  }

  close(): void {
    if (this.done) return;
    // The 'close' that follows marks the response aborted.
    this.res.destroy();
  }

  end(chunk?: string | Uint8Array): void {
    if (this.done) return;
    this.done = true;
    // A stream whose head went out before the drain did not say close: its socket is ended after
    // the last chunk, so no request follows on it.
    if (chunk === undefined) this.res.end();
    else this.res.end(chunk);
    this.handedOver(true);
  }
}

/** The request's headers, one string each (a repeated one's values joined with ', '). */
function flatHeaders(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  const raw = req.headers;
  for (const name in raw) {
    const v = raw[name];
    if (v !== undefined) out[name] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

/**
 * A header of ONCE_HEADERS the request repeats. node's parser refuses a repeated Content-Length
 * itself, keeps the first Authorization or Host and joins the rest: fewer names than header
 * lines means something was repeated, and only then are the lines read again.
 */
function repeatedIn(req: IncomingMessage, headers: Record<string, string>): string | undefined {
  const lines = req.rawHeaders.length >> 1;
  let names = 0;
  for (const _ in headers) names++;
  return names === lines ? undefined : repeatedOnceHeader(req.rawHeaders);
}

/**
 * What node:http's parser refuses (a method it does not know, such as `XMETH1` or a lower-case
 * `get`, or a malformed request line or header) never reaches the handler. Node would answer a
 * bare 400 with no body and no request id; this answers in the contract's shape instead, and
 * closes the connection (the parser cannot find the next request in it). Headers over the size
 * limit keep node's 431, and a connection that is already gone is just let go. A node:http
 * server's `clientError` listener: `listenNode`'s, and the sidecar forward proxy's.
 */
export function answerUnparsable(err: Error & { code?: string }, socket: Duplex): Unparsable | undefined {
  // An answer under way on the connection (a stream, with a pipelined request behind it), or one
  // sent to the request still being read (a 413 sent before its body ended): a second status line
  // must not follow it, so the connection is just closed.
  const counted = socket as CountedSocket;
  const answering =
    counted._httpMessage?.headersSent === true ||
    (counted[LAST]?.complete === false && counted[ANSWERED] === counted[ARRIVED]);
  if (err.code === 'ECONNRESET' || !socket.writable || answering) {
    socket.destroy();
    return undefined;
  }
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    socket.end('HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n');
    return { status: 431, code: null, message: 'request headers too large', requestId: null };
  }
  const requestId = requestIdFor(undefined);
  const timedOut = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
  let e: { code: ErrorCode; message: string; param?: string };
  if (timedOut) e = { code: 'request_timeout', message: 'the request did not arrive in time' };
  // llhttp's code for a repeated Content-Length: the same answer as uWS gives (once-headers.ts).
  else if (err.code === 'HPE_UNEXPECTED_CONTENT_LENGTH') e = repeatedHeader('content-length');
  else {
    const why = err.code === 'HPE_INVALID_METHOD' ? 'an unknown HTTP method' : 'a malformed request';
    e = { code: 'invalid_request', message: `the request is not valid HTTP/1.1: ${why}` };
  }
  const body = JSON.stringify(errorBody(e.code, e.message, requestId, e.param));
  const status = timedOut ? 408 : 400;
  socket.end(
    `HTTP/1.1 ${timedOut ? '408 Request Timeout' : '400 Bad Request'}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\n` +
      `Connection: close\r\n\r\n${body}`,
  );
  return { status, code: e.code, message: e.message, requestId };
}

/** What answerUnparsable answered: its status, error code and request id (none for a bare 431). */
export interface Unparsable {
  readonly status: number;
  readonly code: ErrorCode | null;
  readonly message: string;
  readonly requestId: string | null;
}

/**
 * The node:http request listener that turns each request into a `ServerRequest` for `handler`:
 * the body read whole (413 past MAX_BODY_BYTES), repeated once-headers refused, the drain read
 * on arrival. `listenNode` serves it; the sidecar's forward proxy feeds it the connections it
 * decrypts.
 */
export function requestListener(
  handler: HttpHandler,
  inFlight: InFlight,
  queuedLost: (this: CountedSocket) => void,
  largeBodyLimit?: LargeBodyLimit,
  budget: BodyBudget = new BodyBudget(),
): (req: IncomingMessage, res: NodeRes) => void {
  return (req, res) => {
    const socket = req.socket as CountedSocket;
    if (socket[REFUSED] === true) {
      // Parsed from the same read as a request refused for a repeated header (node parses ahead
      // of the answers): where the first request ends is in doubt, so this one never runs. The
      // connection ends after that refusal, which closed it.
      req.resume();
      return;
    }
    inFlight.enter();
    // Read on arrival: a request that came before the drain is served even if its body ends after.
    const draining = inFlight.draining;
    const seq = (socket[ARRIVED] ?? 0) + 1;
    socket[ARRIVED] = seq;
    socket[LAST] = req;
    const out = new NodeResponse(res, inFlight, socket, seq, queuedLost);
    // The query is everything after the first `?` (a later `?` is part of it, as uWS reads it).
    const url = req.url ?? '/';
    const mark = url.indexOf('?');
    const path = mark === -1 ? url : url.slice(0, mark);
    const query = mark === -1 ? '' : url.slice(mark + 1);
    const headers = flatHeaders(req);
    const method = (req.method ?? 'GET').toUpperCase();
    const repeated = repeatedIn(req, headers);
    const dispatch = (body: Buffer, bodyError: ServerRequest['bodyError'], bodyLimit?: number): void => {
      handler({ method, path, query, headers, body, bodyError, bodyLimit, repeated, draining }, out);
    };
    if (repeated !== undefined) {
      socket[REFUSED] = true;
      req.resume();
      dispatch(EMPTY, undefined);
      return;
    }
    const declared = headers['content-length'] === undefined ? -1 : Number(headers['content-length']);
    if (declared > MAX_BODY_BYTES && declared > largeLimit(largeBodyLimit, path, headers)) {
      req.resume();
      dispatch(EMPTY, 'too_large', largeLimit(largeBodyLimit, path, headers));
      return;
    }
    const chunks: Buffer[] = [];
    let received = 0;
    let refused = false;
    let max = MAX_BODY_BYTES;
    let asked = false;
    // The body bytes this request holds in the server's budget (BodyBudget), given back once it
    // is handed on, refused, or its client is gone.
    let held = 0;
    const giveBack = (): void => {
      budget.give(held);
      held = 0;
    };
    const refuse = (error: 'too_large' | 'busy', limit?: number): void => {
      refused = true;
      chunks.length = 0;
      giveBack();
      dispatch(EMPTY, error, limit);
    };
    req.on('data', (chunk: Buffer) => {
      if (refused) return;
      received += chunk.length;
      // Past the limit: asked once whether this request may carry more.
      if (!asked && received > max) {
        asked = true;
        max = largeLimit(largeBodyLimit, path, headers);
      }
      if (received > max) return refuse('too_large', max);
      if (!budget.take(chunk.length)) return refuse('busy');
      held += chunk.length;
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (refused) return;
      giveBack();
      dispatch(
        chunks.length === 1 ? (chunks[0] as Buffer) : chunks.length === 0 ? EMPTY : Buffer.concat(chunks),
        undefined,
      );
    });
    req.on('close', giveBack);
    req.on('error', () => {
      /* the response's close handler reports the abort */
    });
  };
}

/** The counting a request listener needs: the requests in flight (the drain waits for them). */
export function requestCounter(): { inFlight: InFlight; queuedLost: (this: CountedSocket) => void } {
  const inFlight = new InFlight();
  const queuedLost = function (this: CountedSocket): void {
    for (let n = this[QUEUED] ?? 0; n > 0; n--) inFlight.leave();
    this[QUEUED] = 0;
  };
  return { inFlight, queuedLost };
}

/**
 * node:http server options: a client that never finishes its request must not hold its
 * connection, nor one that leaves it idle after an answer (`keepAliveTimeoutMs`, 65 s by default).
 */
export function nodeTimeouts(
  opts: Pick<ListenOptions, 'headersTimeoutMs' | 'requestTimeoutMs'> & { keepAliveTimeoutMs?: number },
) {
  const headersTimeout = opts.headersTimeoutMs ?? 30_000;
  const requestTimeout = opts.requestTimeoutMs ?? 120_000;
  return {
    keepAliveTimeout: opts.keepAliveTimeoutMs ?? 65_000,
    headersTimeout,
    requestTimeout,
    connectionsCheckingInterval: Math.min(5_000, Math.ceil(headersTimeout / 2)),
  };
}

/** The lowest TLS version served, as uWS's: TLS 1.2. */
const TLS_MIN = 'TLSv1.2';

export function listenNode(opts: ListenOptions, handler: HttpHandler): Promise<HttpServer> {
  // A connection closed with answers queued on it: node never writes them, nothing is in flight.
  const { inFlight, queuedLost } = requestCounter();
  // A client that never finishes its request must not hold its connection (and up to 5 MiB of
  // body) for good: node's timeouts are checked every `connectionsCheckingInterval`.
  const timeouts = nodeTimeouts(opts);
  const budget = new BodyBudget(opts.bodyBudgetBytes);
  const listener = requestListener(handler, inFlight, queuedLost, opts.largeBodyLimit, budget);
  const https = opts.tls
    ? createHttpsServer(
        { ...timeouts, cert: opts.tls.cert, key: opts.tls.key, minVersion: TLS_MIN },
        listener,
      )
    : undefined;
  const server = https ?? createServer(timeouts, listener);
  server.on('clientError', answerUnparsable);
  return new Promise((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException): void => reject(new ListenError(opts.host, opts.port, err));
    server.once('error', failed);
    server.listen(opts.port, opts.host, () => {
      server.off('error', failed);
      const port = (server.address() as AddressInfo).port;
      let closed = false;
      resolve({
        engine: 'node',
        port,
        get bufferedBodyBytes() {
          return budget.held;
        },
        async replaceTls(files) {
          if (https === undefined) throw new Error('this listener serves plain HTTP');
          // For the handshakes to come; a connection keeps the context it was made with.
          https.setSecureContext({ cert: files.cert, key: files.key, minVersion: TLS_MIN });
        },
        async close(graceMs = 10_000) {
          if (closed) return;
          closed = true;
          // net's close, not http's: http's also closes the idle kept-alive connections at once, and
          // a request already on its way on one would meet a reset instead of the 503 that says
          // why. Such connections stay open through the drain, as on uWS, which cannot close them.
          const stopped = new Promise<void>((r) => netClose.call(server, () => r()));
          inFlight.draining = true;
          await inFlight.drained(graceMs);
          inFlight.cutOff = true;
          server.close(); // http's part now: stops its timeout checker
          server.closeAllConnections();
          await stopped;
        },
      });
    });
  });
}
