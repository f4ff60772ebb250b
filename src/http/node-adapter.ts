import { createServer, type IncomingMessage, type ServerResponse as NodeRes } from 'node:http';
import { type AddressInfo, Server as NetServer } from 'node:net';
import type { Duplex } from 'node:stream';
import { errorBody } from '../core/errors.js';
import { InFlight } from './in-flight.js';
import { requestIdFor } from './request-id.js';
import {
  type HttpHandler,
  type HttpServer,
  ListenError,
  type ListenOptions,
  MAX_BODY_BYTES,
  type OutgoingHeaders,
  type ServerRequest,
  type ServerResponse,
} from './types.js';

const EMPTY = Buffer.alloc(0);
const netClose = NetServer.prototype.close;

class NodeResponse implements ServerResponse {
  aborted = false;
  started = false;
  private done = false;
  private abortListeners: (() => void)[] | undefined;

  constructor(
    private readonly res: NodeRes,
    private readonly inFlight: InFlight,
  ) {
    res.on('close', () => {
      if (!this.done) this.markAborted();
    });
  }

  private markAborted(): void {
    this.aborted = true;
    this.done = true;
    this.inFlight.leave();
    const listeners = this.abortListeners;
    this.abortListeners = undefined;
    if (listeners) for (const l of listeners) l();
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
    const res = this.res;
    res.statusCode = status;
    for (const name in headers) res.setHeader(name, headers[name] as string);
    // During the drain every answer closes its connection (node ends the socket after it): the
    // client then reconnects, and the closed listener sends it to another instance.
    if (closeConnection || this.inFlight.draining) res.setHeader('connection', 'close');
    res.setHeader('content-length', typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength);
    res.end(body);
    this.inFlight.leave();
  }

  stream(status: number, headers: OutgoingHeaders): void {
    if (this.done || this.started) return;
    this.started = true;
    const res = this.res;
    if (!this.inFlight.draining) res.writeHead(status, headers as Record<string, string>);
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
    this.res.write(chunk);
    return true;
  }

  end(chunk?: string | Uint8Array): void {
    if (this.done) return;
    this.done = true;
    // A stream whose head went out before the drain did not say close: its socket is ended after
    // the last chunk (queued behind it), so no request follows on it.
    const socket = this.inFlight.draining ? this.res.socket : null;
    if (chunk === undefined) this.res.end();
    else this.res.end(chunk);
    socket?.end();
    this.inFlight.leave();
  }
}

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
 * What node:http's parser refuses (a method it does not know, such as `XMETH1` or a lower-case
 * `get`, or a malformed request line or header) never reaches the handler. Node would answer a
 * bare 400 with no body and no request id; this answers in the contract's shape instead, and
 * closes the connection (the parser cannot find the next request in it). Headers over the size
 * limit keep node's 431, and a connection that is already gone is just let go.
 */
function answerUnparsable(err: Error & { code?: string }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    socket.end('HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n');
    return;
  }
  const requestId = requestIdFor(undefined);
  const why = err.code === 'HPE_INVALID_METHOD' ? 'an unknown HTTP method' : 'a malformed request';
  const body = JSON.stringify(
    errorBody('invalid_request', `the request is not valid HTTP/1.1: ${why}`, requestId),
  );
  socket.end(
    'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n' +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\n` +
      `Connection: close\r\n\r\n${body}`,
  );
}

export function listenNode(opts: ListenOptions, handler: HttpHandler): Promise<HttpServer> {
  const inFlight = new InFlight();
  const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
    inFlight.enter();
    // Read on arrival: a request that came before the drain is served even if its body ends after.
    const draining = inFlight.draining;
    const out = new NodeResponse(res, inFlight);
    const [path = '/', query = ''] = (req.url ?? '/').split('?', 2);
    const headers = flatHeaders(req);
    const method = (req.method ?? 'GET').toUpperCase();
    const dispatch = (body: Buffer, bodyError: ServerRequest['bodyError']): void => {
      handler({ method, path, query, headers, body, bodyError, draining }, out);
    };
    const declared = headers['content-length'] === undefined ? -1 : Number(headers['content-length']);
    if (declared > MAX_BODY_BYTES) {
      req.resume();
      dispatch(EMPTY, 'too_large');
      return;
    }
    const chunks: Buffer[] = [];
    let received = 0;
    let refused = false;
    req.on('data', (chunk: Buffer) => {
      if (refused) return;
      received += chunk.length;
      if (received > MAX_BODY_BYTES) {
        refused = true;
        chunks.length = 0;
        dispatch(EMPTY, 'too_large');
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (refused) return;
      dispatch(
        chunks.length === 1 ? (chunks[0] as Buffer) : chunks.length === 0 ? EMPTY : Buffer.concat(chunks),
        undefined,
      );
    });
    req.on('error', () => {
      /* the response's close handler reports the abort */
    });
  });
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
        async close(graceMs = 10_000) {
          if (closed) return;
          closed = true;
          // net's close, not http's: http's also closes the idle kept-alive connections at once, and
          // a request already on its way on one would meet a reset instead of the 503 that says
          // why. Such connections stay open through the drain, as on uWS, which cannot close them.
          const stopped = new Promise<void>((r) => netClose.call(server, () => r()));
          inFlight.draining = true;
          await inFlight.drained(graceMs);
          server.close(); // http's part now: stops its timeout checker
          server.closeAllConnections();
          await stopped;
        },
      });
    });
  });
}
