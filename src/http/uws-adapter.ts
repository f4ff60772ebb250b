import { createRequire } from 'node:module';
import type * as Uws from '@trufflesuite/uws-js-unofficial';
import { BodyBudget } from './body-budget.js';
import { InFlight } from './in-flight.js';
import { claimPort, listenFailure } from './listen-probe.js';
import { ONCE_HEADERS } from './once-headers.js';
import { StallWait } from './stall-wait.js';
import { TlsConfigError, type TlsFiles, unchangedOnDisk } from './tls.js';
import {
  type HttpHandler,
  type HttpServer,
  ListenError,
  type ListenOptions,
  largeLimit,
  MAX_BODY_BYTES,
  type OutgoingHeaders,
  type ServerRequest,
  type ServerResponse,
  statusLine,
} from './types.js';

type UwsModule = typeof Uws;

let cached: UwsModule | null | undefined;

/** Loads the native uWS binding once; null when it cannot load on this platform. */
export function loadUws(): UwsModule | null {
  if (cached !== undefined) return cached;
  try {
    const require = createRequire(import.meta.url);
    // The package logs to stdout when it falls back to its JS shim; we want the native one or none.
    if (process.env.UWS_USE_FALLBACK) return (cached = null);
    cached = require('@trufflesuite/uws-js-unofficial') as UwsModule;
    if (typeof cached.App !== 'function' || typeof cached.us_socket_local_port !== 'function') cached = null;
    // uWS writes `uWebSockets: 20` into every answer unless its event loop is told to be silent.
    // `_cfg` is in the typings without a word on its keys; in this build (uWS_cfg, disassembled)
    // it sets the loop's no-mark flag for a key whose character codes sum to 655, which 'silent'
    // does. Loop-wide, so once for every app; test/http/engine-headers.test.ts checks it holds.
    else cached._cfg('silent');
  } catch {
    cached = null;
  }
  return cached;
}

const EMPTY = Buffer.alloc(0);
const NOTHING = (): void => {};

/**
 * The only code that touches uWS objects. uWS aborts the process when a response is used after
 * the client went away, so every write checks `done` first and happens inside `cork`.
 */
class UwsResponse implements ServerResponse {
  aborted = false;
  cut = false;
  started = false;
  private done = false;
  private abortListeners: (() => void)[] | undefined;
  private pendingStatus = '';
  private pendingHeaders: OutgoingHeaders | undefined;
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  private flushScheduled = false;
  /**
   * Back-pressure. uWS says only whether a write was taken whole; what it keeps it sends only when
   * written to again while an onWritable handler is set (an empty cork counts). `held`: bytes
   * written since the first write uWS did not take whole (0 when the last one was taken); while
   * any are held, new chunks wait in `pending` for the writable event.
   */
  private held = 0;
  private writableSet = false;
  private writableEvents = 0;
  private wait: StallWait | undefined;
  private corkData: Uint8Array = EMPTY;
  private corkResult = true;

  constructor(
    private readonly res: Uws.HttpResponse,
    private readonly inFlight: InFlight,
    private readonly head: boolean,
    /** The requests in flight on this response's app (a retired one is closed once it has none). */
    private readonly appInFlight: InFlight,
  ) {}

  /** The request is over: answered, or its client gone. */
  private leave(): void {
    this.inFlight.leave();
    this.appInFlight.leave();
  }

  markAborted(): void {
    if (this.done) return;
    this.aborted = true;
    this.cut = this.inFlight.cutOff;
    this.done = true;
    this.wait?.settle(false);
    this.leave();
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
    // During the drain every answer closes its connection: the client then reconnects, and the
    // closed listener sends it to another instance.
    const close = closeConnection || this.inFlight.draining;
    res.cork(() => {
      res.writeStatus(statusLine(status));
      for (const name in headers) res.writeHeader(name, headers[name] as string);
      if (this.head) {
        // HEAD: headers only. (endWithoutBody with a reported length stalls the connection in this
        // uWS build, so no Content-Length is sent for HEAD; and its close flag writes a bogus
        // Content-Length and does not close, so the header is said here and the client, or the
        // end of the drain, closes the connection.)
        if (close) res.writeHeader('Connection', 'close');
        res.endWithoutBody();
      } else res.end(body, close);
    });
    this.leave();
  }

  stream(status: number, headers: OutgoingHeaders): void {
    if (this.done || this.started) return;
    this.started = true;
    this.pendingStatus = statusLine(status);
    this.pendingHeaders = headers;
  }

  /**
   * Writes a stream's status and headers. During the drain the application's own `Connection`
   * header (keep-alive on SSE) gives way to `Connection: close`, which this writes unless
   * `uwsCloses` (uWS writes it itself when `end` closes the connection).
   */
  private flushHead(uwsCloses: boolean): void {
    const headers = this.pendingHeaders;
    if (headers === undefined) return;
    this.pendingHeaders = undefined;
    const res = this.res;
    res.writeStatus(this.pendingStatus);
    if (!this.inFlight.draining) {
      for (const name in headers) res.writeHeader(name, headers[name] as string);
      return;
    }
    for (const name in headers) if (name !== 'connection') res.writeHeader(name, headers[name] as string);
    if (!uwsCloses) res.writeHeader('Connection', 'close');
  }

  /**
   * Stream chunks written during one event-loop turn go out together: a provider's network read
   * often yields many SSE events at once, and one socket write each would cost a syscall apiece.
   */
  write(chunk: string | Uint8Array): boolean {
    if (this.done) return false;
    const data = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    this.pending.push(data);
    this.pendingBytes += data.byteLength;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(this.flushPending);
    }
    return true;
  }

  get backlog(): number {
    return this.pendingBytes + this.held;
  }

  private readonly flushPending = (): void => {
    this.flushScheduled = false;
    // While uWS holds bytes, chunks wait for the writable event, which writes them.
    if (this.done || this.pending.length === 0 || this.held > 0) return;
    this.writeOut(this.takePending());
  };

  private readonly corkedWrite = (): void => {
    this.flushHead(false);
    this.corkResult = this.res.write(this.corkData);
  };

  /** Writes `data` (in one cork with the head, if still pending); whether uWS took it whole. */
  private writeOut(data: Uint8Array): boolean {
    this.corkData = data;
    this.res.cork(this.corkedWrite);
    this.corkData = EMPTY;
    const ok = this.corkResult;
    if (ok) {
      this.held = 0;
    } else {
      this.held += data.byteLength;
      if (!this.writableSet) {
        this.writableSet = true;
        this.res.onWritable(this.onWritable);
      }
    }
    return ok;
  }

  /** uWS calls this when the socket can take more; it must not throw, and returns true. */
  private readonly onWritable = (): boolean => {
    if (this.done) return true;
    this.writableEvents++;
    if (this.pendingBytes > 0) this.writeOut(this.takePending());
    else {
      // Nothing to write: an empty cork sends what uWS holds, without saying whether all went.
      this.res.cork(NOTHING);
      this.held = 0;
    }
    this.wait?.check();
    return true;
  };

  drain(stallMs: number): Promise<boolean> {
    if (this.done) return Promise.resolve(false);
    // Nothing refused: chunks still pending go out with this turn's write (with the end, at the
    // end of a stream: one socket write, not two).
    if (this.held === 0) return Promise.resolve(true);
    return this.waitFor(() => this.held === 0, stallMs);
  }

  private waitFor(ready: () => boolean, stallMs: number): Promise<boolean> {
    const wait = new StallWait(ready, () => this.writableEvents, stallMs);
    this.wait = wait;
    return wait.done.then((ok) => {
      if (this.wait === wait) this.wait = undefined;
      return ok;
    });
  }

  close(): void {
    if (this.done) return;
    // uWS calls onAborted from here, which marks the response aborted.
    this.res.close();
  }

  private takePending(extra?: string | Uint8Array): Uint8Array {
    const parts = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    if (extra !== undefined) parts.push(typeof extra === 'string' ? Buffer.from(extra) : extra);
    return parts.length === 1 ? (parts[0] as Uint8Array) : Buffer.concat(parts);
  }

  end(chunk?: string | Uint8Array): void {
    if (this.done) return;
    this.done = true;
    const res = this.res;
    const data = this.pending.length > 0 ? this.takePending(chunk) : (chunk ?? EMPTY);
    // A stream whose head is still pending goes out whole, with a Content-Length, and uWS can close
    // the connection after it. Once chunks are out, this uWS build would write end's
    // `Connection: close` into the chunked body, so such a stream ends without closing: a stream
    // flushed during the drain said close in its head (the client closes), one flushed before it
    // keeps its connection until the drain ends (a request sent on it meanwhile is refused).
    const close = this.pendingHeaders !== undefined && this.inFlight.draining;
    res.cork(() => {
      this.flushHead(close);
      res.end(data, close);
    });
    this.leave();
  }
}

const LIBUS_LISTEN_EXCLUSIVE_PORT = 1;
/** uWS's default: SO_REUSEADDR and SO_REUSEPORT, so that another socket of this process can join the port. */
const LIBUS_LISTEN_SHAREABLE = 0;

/** Listens `app` on host:port (uWS calls back before `listen` returns); false when it cannot. */
function listenNow(
  app: Uws.TemplatedApp,
  host: string,
  port: number,
  options: number,
): Uws.us_listen_socket | false {
  // The typings omit the host + port + options form.
  const listenWith = app.listen as unknown as (
    host: string,
    port: number,
    options: number,
    cb: (socket: Uws.us_listen_socket | false) => void,
  ) => void;
  let socket = false as Uws.us_listen_socket | false;
  listenWith.call(app, host, port, options, (s) => {
    socket = s;
  });
  return socket;
}

/** How many apps retired by certificate renewals are kept open (see `listenUws`). */
export const RETIRED_APPS_KEPT = 4;
/** How long a retired app beyond RETIRED_APPS_KEPT must have had no request in flight before it is closed. */
export const RETIRED_APP_QUIET_MS = 30_000;

/** Closes every connection of `app` (and its listen socket, if still open). */
function closeApp(app: Uws.TemplatedApp): void {
  (app as unknown as { close?: () => void }).close?.();
}

/**
 * An SSLApp serving `files`. uWS takes file names and reads them itself: read again after, they
 * must still be the bytes loadTlsFiles checked (a renewal landing in between is not served
 * unchecked; the next check sees it).
 */
function sslApp(uws: UwsModule, files: TlsFiles): Uws.TemplatedApp {
  let app: Uws.TemplatedApp;
  try {
    app = uws.SSLApp({ cert_file_name: files.certFile, key_file_name: files.keyFile });
  } catch {
    throw new TlsConfigError(`uWS could not build a TLS context from ${files.certFile} and ${files.keyFile}`);
  }
  if (!unchangedOnDisk(files)) {
    closeApp(app);
    throw new TlsConfigError(`${files.certFile} or ${files.keyFile} changed while being read`);
  }
  return app;
}

/**
 * Listens with uWS. Plain HTTP listens with LIBUS_LISTEN_EXCLUSIVE_PORT: without it uWS sets
 * SO_REUSEPORT, and a second govgate on a port already held would share it (the kernel splitting
 * connections between the two) instead of failing.
 *
 * HTTPS must be able to take a renewed certificate (`replaceTls`), and an SSLApp's certificate
 * cannot be replaced: uWS has no call for it (`addServerName` adds contexts chosen by SNI only,
 * and clients that dial an IP address send none). So a renewal builds a new SSLApp with the same
 * route, listens it on the same port, and closes the old listen socket: new connections go to
 * the new app, those of the old one (kept alive, or with a request in flight) run on until they
 * close, or until the server's drain closes them (an app retired beyond the newest
 * RETIRED_APPS_KEPT is closed sooner, once idle: `closeWhenIdle`). Two sockets on one port need SO_REUSEPORT on
 * both, so HTTPS listens shareable; the guard the exclusive flag gives is kept by `claimPort`: a
 * node:net socket without SO_REUSEPORT must get the port first, which fails while any socket
 * holds it, and the kernel lets only sockets of the same user join a port. What remains is the
 * instant between that socket's close and uWS's bind, on the same turn (docs/ops.md, "TLS").
 */
export function listenUws(uws: UwsModule, opts: ListenOptions, handler: HttpHandler): Promise<HttpServer> {
  const inFlight = new InFlight();
  const budget = new BodyBudget(opts.bodyBudgetBytes);

  const route = (res: Uws.HttpResponse, req: Uws.HttpRequest, appInFlight: InFlight): void => {
    inFlight.enter();
    appInFlight.enter();
    // Read on arrival: a request that came before the drain is served even if its body ends after.
    const draining = inFlight.draining;
    // Everything from `req` must be copied now: it is invalid after this callback returns.
    const method = req.getCaseSensitiveMethod().toUpperCase();
    const out = new UwsResponse(res, inFlight, method === 'HEAD', appInFlight);
    // The body bytes this request holds in the server's budget, given back once it is handed on,
    // refused, or its client is gone.
    let held = 0;
    res.onAborted(() => {
      out.markAborted();
      budget.give(held);
      held = 0;
    });
    const path = req.getUrl();
    const query = req.getQuery() ?? '';
    const headers: Record<string, string> = {};
    // uWS lists a repeated header once per line, and a plain copy would keep the last: for the
    // framing headers uWS itself used the first (egress review #7).
    let repeated: string | undefined;
    req.forEach((k, v) => {
      const prev = headers[k];
      if (prev === undefined) headers[k] = v;
      else if (ONCE_HEADERS.has(k)) repeated ??= k;
      // Another header sent twice is one list, as node:http reads it (once-headers.ts).
      else headers[k] = `${prev}, ${v}`;
    });
    const lengthHeader = headers['content-length'];
    const declared = lengthHeader === undefined ? -1 : Number(lengthHeader);
    const chunked = headers['transfer-encoding'] !== undefined;

    const dispatch = (body: Buffer, bodyError: ServerRequest['bodyError'], bodyLimit?: number): void => {
      const request: ServerRequest = {
        method,
        path,
        query,
        headers,
        body,
        bodyError,
        bodyLimit,
        repeated,
        draining,
      };
      handler(request, out);
    };

    if (repeated !== undefined) {
      // Refused unread, on the next turn: once this handler returns, uWS parses the rest of what
      // it read, and an answer given now, even one that closes the connection, lets a request
      // that follows in it run (uWS forgets the close when it parses the next request). Still
      // unanswered, this request makes uWS close the connection if one follows (its rule against
      // pipelining: docs/ops.md), so nothing after this head is served either way.
      setImmediate(dispatch, EMPTY, undefined);
      return;
    }
    if (declared > MAX_BODY_BYTES && declared > largeLimit(opts.largeBodyLimit, path, headers)) {
      dispatch(EMPTY, 'too_large', largeLimit(opts.largeBodyLimit, path, headers));
      return;
    }
    if (declared <= 0 && !chunked) {
      dispatch(EMPTY, undefined);
      return;
    }
    // Collected as it arrives, never allocated from the declared length: a client that declares
    // 5 MiB and sends a byte holds a byte (it held 5 MiB at once, per connection).
    let chunks: Buffer[] | undefined = [];
    let received = 0;
    let refused = false;
    let max = declared > 0 ? declared : MAX_BODY_BYTES;
    let asked = declared > 0;
    const refuse = (error: 'too_large' | 'busy', limit?: number): void => {
      refused = true;
      chunks = undefined;
      budget.give(held);
      held = 0;
      dispatch(EMPTY, error, limit);
    };
    res.onData((ab, isLast) => {
      if (refused) return;
      const n = ab.byteLength;
      // A chunked body past the limit: asked once whether this request may carry more.
      if (!asked && received + n > max) {
        asked = true;
        max = largeLimit(opts.largeBodyLimit, path, headers);
      }
      if (received + n > max) return refuse('too_large', max);
      if (!budget.take(n)) return refuse('busy');
      held += n;
      // Copied out now (uWS reuses `ab`), into the buffer pool when small.
      const chunk = Buffer.allocUnsafe(n);
      Buffer.from(ab).copy(chunk);
      chunks?.push(chunk);
      received += n;
      if (isLast) {
        const full = chunks?.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks ?? [], received);
        chunks = undefined;
        budget.give(held);
        held = 0;
        dispatch(full, undefined);
      }
    });
  };
  /** The apps built, with their requests in flight. */
  const requestsOf = new WeakMap<Uws.TemplatedApp, InFlight>();
  const build = (files: TlsFiles | undefined): Uws.TemplatedApp => {
    const app = files ? sslApp(uws, files) : uws.App();
    const requests = new InFlight();
    requestsOf.set(app, requests);
    app.any('/*', (res, req) => route(res, req, requests));
    return app;
  };
  const kept = opts.retiredApps?.kept ?? RETIRED_APPS_KEPT;
  const quietMs = opts.retiredApps?.quietMs ?? RETIRED_APP_QUIET_MS;

  const serve = (first: Uws.TemplatedApp, socket: Uws.us_listen_socket): HttpServer => {
    const port = uws.us_socket_local_port(socket as unknown as Uws.us_socket);
    let listening = socket;
    let app = first;
    // Apps that served an older certificate, oldest first, with their listen sockets: their
    // connections run on. The newest `kept` are closed with the server; the first `closing`, those
    // beyond, once idle (closeWhenIdle).
    const retired: { readonly app: Uws.TemplatedApp; readonly socket: Uws.us_listen_socket }[] = [];
    let closing = 0;
    /**
     * uWS cannot say when an app has no connection left (its HTTP API has no connection events or
     * count: @trufflesuite/uws-js-unofficial's index.d.ts), so the apps are capped instead: one
     * retired beyond the newest `kept` (its connections are older than several renewals) is closed
     * once none of its requests has been in flight for `quietMs`. Closing an app closes its
     * connections; uWS closes a keep-alive connection idle 10 s by itself, so what is left by then
     * is at most one still sending an answer uWS holds. A request in flight is never cut: the app
     * waits for it. The server's close closes what is left.
     */
    const closeWhenIdle = (entry: (typeof retired)[number]): void => {
      const requests = requestsOf.get(entry.app) as InFlight;
      let seen = -1;
      const look = (): void => {
        if (closed) return;
        if (requests.size > 0 || requests.entered !== seen) {
          seen = requests.entered;
          void requests.idle().then(() => {
            if (!closed) setTimeout(look, quietMs).unref();
          });
          return;
        }
        const at = retired.indexOf(entry);
        if (at < 0) return;
        retired.splice(at, 1);
        closing--;
        // Its listen socket, if the turn that closes it has not come yet (renewals in one turn).
        if (retiring.delete(entry.socket)) uws.us_listen_socket_close(entry.socket);
        closeApp(entry.app);
      };
      look();
    };
    // Their listen sockets, between a renewal and the check phase that closes them.
    const retiring = new Set<Uws.us_listen_socket>();
    let closed = false;
    return {
      engine: 'uws',
      port,
      get bufferedBodyBytes() {
        return budget.held;
      },
      replaceTls(files) {
        if (!opts.tls) return Promise.reject(new Error('this listener serves plain HTTP'));
        if (closed) return Promise.reject(new Error('this listener is closed'));
        let next: Uws.TemplatedApp;
        try {
          next = build(files);
        } catch (err) {
          return Promise.reject(err);
        }
        const nextSocket = listenNow(next, opts.host, port, LIBUS_LISTEN_SHAREABLE);
        if (!nextSocket) {
          closeApp(next);
          return Promise.reject(
            new Error(`cannot listen a second socket on ${opts.host}:${port} for the new certificate`),
          );
        }
        // Both listen now, the kernel handing each new connection to one of them. The old socket
        // is closed on the turn's check phase, right after the poll phase in which uWS accepted
        // what was queued on it: a connection still in its queue when it closes is reset, and this
        // leaves the fewest there (docs/ops.md, "TLS").
        const old = listening;
        listening = nextSocket;
        retiring.add(old);
        retired.push({ app, socket: old });
        app = next;
        // Those beyond the newest `kept`, not closing yet (the oldest first).
        while (retired.length - closing > kept) closeWhenIdle(retired[closing++] as (typeof retired)[number]);
        return new Promise((resolve) =>
          setImmediate(() => {
            if (retiring.delete(old)) uws.us_listen_socket_close(old);
            resolve();
          }),
        );
      },
      async close(graceMs = 10_000) {
        if (closed) return;
        closed = true;
        uws.us_listen_socket_close(listening);
        for (const s of retiring) uws.us_listen_socket_close(s);
        retiring.clear();
        // Connections kept alive stay open (uWS cannot close only the idle ones); a request sent
        // on one is refused and its connection closed. Closing the apps closes what is left.
        inFlight.draining = true;
        await inFlight.drained(graceMs);
        inFlight.cutOff = true;
        for (const r of retired) closeApp(r.app);
        retired.length = 0;
        closing = 0;
        closeApp(app);
      },
    };
  };

  let app: Uws.TemplatedApp;
  try {
    app = build(opts.tls);
  } catch (err) {
    return Promise.reject(err);
  }
  if (opts.tls)
    return claimPort(opts, (port) => listenNow(app, opts.host, port, LIBUS_LISTEN_SHAREABLE)).then(
      (socket) => {
        if (!socket) {
          closeApp(app);
          throw new ListenError(opts.host, opts.port);
        }
        return serve(app, socket);
      },
    );
  return new Promise((resolve, reject) => {
    const socket = listenNow(app, opts.host, opts.port, LIBUS_LISTEN_EXCLUSIVE_PORT);
    if (socket) resolve(serve(app, socket));
    // uWS gives no reason: node:net, asked for the same address, names it (EADDRINUSE, ...).
    else void listenFailure(opts).then(reject);
  });
}
