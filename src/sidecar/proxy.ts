import { createServer, type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import { errorBody, isServiceError, ServiceError } from '../core/errors.js';
import { recordable } from '../core/guardrails/recorded.js';
import { BodyBudget } from '../http/body-budget.js';
import {
  answerUnparsable,
  nodeTimeouts,
  requestCounter,
  requestListener,
  type Unparsable,
} from '../http/node-adapter.js';
import { requestIdFor } from '../http/request-id.js';
import type { HttpHandler, ServerRequest } from '../http/types.js';
import type { Logger } from '../util/log.js';
import { LogThrottle } from '../util/log-throttle.js';
import type { ProxyCa } from './proxy-ca.js';

/** Where an org's providers are reached: their host, and the path prefixes their SDKs put before `/v1`. */
export interface ProviderHost {
  readonly host: string;
  /**
   * The prefixes of the providers served on this host, longest first (e.g. `/openai` of
   * `https://h/openai/v1`; '' for a provider at the host's root, as on its public host). The
   * longest one a request's path is under is cut from it; a path under none is refused.
   */
  readonly prefixes: readonly string[];
}

/**
 * The path a provider's SDK sent, as the gateway routes know it: without the longest of
 * `prefixes` it is under (`/openai/v1/models` → `/v1/models`), or undefined when it is under none.
 * A prefix is a whole number of path segments: `/openaix/…` is not under `/openai`.
 */
export function pathUnder(prefixes: readonly string[], path: string): string | undefined {
  for (const prefix of prefixes) {
    if (prefix === '') return path;
    if (path.startsWith(`${prefix}/`)) return path.slice(prefix.length);
  }
  return undefined;
}

/**
 * The TLS handshake of a tunnel must end within this. An agent's SDK starts it as soon as the
 * proxy says 200, over loopback or a pod's network: 10 s is long for that, and short enough that
 * clients which open tunnels and say nothing cannot pile them up.
 */
export const TUNNEL_HANDSHAKE_TIMEOUT_MS = 10_000;
/**
 * Tunnels open at once. Each holds a socket and its TLS state; an agent opens about one per call
 * in flight, and past SERVICE_UPSTREAM_CONNECTIONS (128 by default) its calls wait for a provider
 * connection anyway, so 512 leaves room for a busy agent and bounds what a runaway one holds.
 */
export const MAX_TUNNELS = 512;
/**
 * Connections on the proxy's port that are not tunnels: waiting for their first request (a
 * `CONNECT` or a plain-HTTP call), carrying a plain-HTTP call, or idle between two. An agent opens
 * about one per call in flight and sends its `CONNECT` at once, so as many as MAX_TUNNELS leaves
 * room for a busy one; past it a new connection is answered 503 and closed, so an agent that
 * opens connections and says nothing cannot hold sockets without bound.
 */
export const MAX_PROXY_CONNECTIONS = 512;
/**
 * The headers of a request on the proxy's port (a `CONNECT` head, or a plain-HTTP call's) must
 * all arrive within this of its start, the connection's start for the first: an agent's SDK sends
 * its `CONNECT` as soon as it connects, over loopback or a pod's network, so 10 s (as for a
 * tunnel's handshake) is long, and a connection that says nothing holds its place in
 * MAX_PROXY_CONNECTIONS for 10-15 s at most (node checks every 5 s). Calls inside a tunnel keep
 * the port's general headers timeout.
 */
export const PROXY_HEADERS_TIMEOUT_MS = 10_000;
/** How long a connection refused past MAX_PROXY_CONNECTIONS is kept for its client to read the answer. */
const REFUSED_LINGER_MS = 1_000;
/** The method label of a refusal made before any request was read (a timeout, a parse error, the cap). */
const NO_METHOD = '-';

/**
 * What one client can make the proxy hold. The header, request and idle timeouts default to those
 * of the outer port (nodeTimeouts: 30 s, 120 s, 65 s), and apply to each call inside a tunnel too.
 */
export interface ForwardProxyLimits {
  readonly handshakeTimeoutMs?: number;
  readonly headersTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  /** How long a connection or tunnel may stay open with no call on it after an answer. */
  readonly idleTimeoutMs?: number;
  /** Past this many open tunnels a CONNECT is refused 503 `unavailable` with Retry-After. */
  readonly maxTunnels?: number;
  /**
   * The headers timeout of requests on the proxy's port itself (PROXY_HEADERS_TIMEOUT_MS, or
   * `headersTimeoutMs` when that is shorter).
   */
  readonly proxyHeadersTimeoutMs?: number;
  /** Past this many connections that are not tunnels, a new one is answered 503 and closed (MAX_PROXY_CONNECTIONS). */
  readonly maxProxyConnections?: number;
  /** The warnings of refusals at either cap: at most one per cap per this long (CAP_WARN_INTERVAL_MS). */
  readonly capWarnIntervalMs?: number;
}

/**
 * A connection flood refused at the caps (MAX_PROXY_CONNECTIONS, MAX_TUNNELS) would write a
 * warning per connection: at most one per cap is written per this long, saying how many were not
 * (`suppressed`) since the last. Every refusal is still counted (`onRefused`) and logged at debug.
 */
export const CAP_WARN_INTERVAL_MS = 10_000;

/** The `limit` log field of a refusal at a cap: which one (its warnings are throttled per cap). */
type CapLimit = 'proxy_connections' | 'proxy_tunnels';

/**
 * A target's host as the provider-host map spells it: lower case, an IPv6 address without its
 * brackets (a URL's hostname and a CONNECT target keep them; the map's keys do not), and a name
 * without the one trailing dot of its fully qualified form (`api.openai.com.` is the same host
 * to DNS and to the certificate check; two dots are no valid name).
 */
function hostKey(host: string): string {
  return host
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/([^.])\.$/, '$1');
}

export interface ForwardProxyOptions {
  readonly host: string;
  readonly port: number;
  readonly ca: ProxyCa;
  /** The hosts of the org's providers (the agent's SDK calls them): these calls are governed. */
  readonly providerHosts: () => ReadonlyMap<string, ProviderHost>;
  /** Whether `secret` is an agent key of the org (throws `unavailable` without a snapshot). */
  readonly authenticate: (secret: string) => boolean;
  /** The sidecar's own handler: a call through the proxy is answered as one to its /v1 routes. */
  readonly handler: HttpHandler;
  readonly logger: Logger;
  readonly limits?: ForwardProxyLimits;
  /**
   * Called for each request the proxy itself refuses (403, 407, 503, 400, and 404 for a path under
   * no provider's prefix), the calls it hands to `handler` being counted there: the sidecar counts
   * them in govgate_http_requests_total.
   */
  readonly onRefused?: (method: string, status: number, seconds: number) => void;
}

/** The route label and log field of the proxy's own refusals (its calls are `proxy <route>`). */
export const PROXY_ROUTE = 'proxy';

export interface ForwardProxy {
  readonly port: number;
  /** Tunnels open now (from the proxy's 200 to their close). */
  readonly openTunnels: number;
  /** Connections on the proxy's port that are not tunnels (MAX_PROXY_CONNECTIONS). */
  readonly waitingConnections: number;
  close(graceMs?: number): Promise<void>;
}

/**
 * The sidecar's forward proxy (`SERVICE_PROXY_PORT`, docs/sidecar.md): for agents that send their
 * traffic through `HTTPS_PROXY`/`HTTP_PROXY` instead of pointing a base URL at the sidecar. The
 * agent names itself with its agent key as the proxy credential
 * (`https_proxy=http://agent:gk_agent_…@127.0.0.1:15001`). A tunnel (`CONNECT`) to one of its
 * org's provider hosts is opened here with a certificate the sidecar's proxy CA signs, and every
 * call in it is answered by the sidecar's gateway exactly as a call to its base URL: governed,
 * recorded, sent to the provider with the org's key (the key the agent's SDK sent is dropped).
 * Anything else is refused: a tunnel to another host (403), no or an unknown credential (407).
 */
export async function startForwardProxy(opts: ForwardProxyOptions): Promise<ForwardProxy> {
  const { inFlight, queuedLost } = requestCounter();
  // One bound on the body bytes held for every call the proxy carries, tunnelled or plain.
  const bodyBudget = new BodyBudget();
  const limits = opts.limits ?? {};
  const timeouts = nodeTimeouts({
    ...(limits.headersTimeoutMs === undefined ? {} : { headersTimeoutMs: limits.headersTimeoutMs }),
    ...(limits.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: limits.requestTimeoutMs }),
    ...(limits.idleTimeoutMs === undefined ? {} : { keepAliveTimeoutMs: limits.idleTimeoutMs }),
  });
  const handshakeTimeoutMs = limits.handshakeTimeoutMs ?? TUNNEL_HANDSHAKE_TIMEOUT_MS;
  const maxTunnels = limits.maxTunnels ?? MAX_TUNNELS;
  const tunnels = new Set<Duplex>();
  // The proxy port's own headers timeout, never longer than the general one.
  const outerTimeouts = nodeTimeouts({
    headersTimeoutMs: Math.min(
      limits.proxyHeadersTimeoutMs ?? PROXY_HEADERS_TIMEOUT_MS,
      timeouts.headersTimeout,
    ),
    requestTimeoutMs: timeouts.requestTimeout,
    keepAliveTimeoutMs: timeouts.keepAliveTimeout,
  });
  const maxWaiting = limits.maxProxyConnections ?? MAX_PROXY_CONNECTIONS;
  /** The connections that are not tunnels (yet), with when each was accepted. */
  const waiting = new Map<Socket, number>();
  /** Connections refused past maxWaiting, while their answer is read (REFUSED_LINGER_MS). */
  const refusedSockets = new Set<Socket>();
  const capWarnings = new LogThrottle(limits.capWarnIntervalMs ?? CAP_WARN_INTERVAL_MS);
  /** When each request the proxy answers itself arrived (its refusals are timed as the gateway's answers). */
  const arrivedAt = new WeakMap<IncomingMessage, number>();
  /** Each tunnel's request listener: its calls are its agent's, with its provider's prefix cut. */
  const tunnelListeners = new WeakMap<Duplex, (req: IncomingMessage, res: ServerResponse) => void>();

  /**
   * The agent's calls, with its agent key as their credential and the prefix of the provider they
   * name cut. A path under none of the host's prefixes is refused 404 here: passed on as it came,
   * a gateway route would have served it (to the provider its route names) although no provider
   * of the org is reached at that path.
   */
  const asAgent = (key: string, provider: ProviderHost): HttpHandler => {
    return (req, res) => {
      const path = pathUnder(provider.prefixes, req.path);
      if (path === undefined) {
        const err = new ServiceError(
          'not_found',
          `${req.path} is under no path prefix of this org's providers on ${provider.host} (${provider.prefixes.map((p) => `${p}/`).join(', ')})`,
        );
        const { status, headers, body } = refusal(req.method, req.headers, performance.now(), err);
        res.send(status, headers, body);
        return;
      }
      const headers: Record<string, string> = {};
      for (const name of Object.keys(req.headers))
        if (name !== 'authorization' && name !== 'x-api-key') headers[name] = req.headers[name] as string;
      headers.authorization = `Bearer ${key}`;
      opts.handler(Object.assign({}, req, { headers, path }), res);
    };
  };

  /** The agent key a proxy request presents (Basic: the password, or the user when it has none; or Bearer). */
  const credentialOf = (req: IncomingMessage): string | undefined => {
    const auth = req.headers['proxy-authorization'];
    if (typeof auth !== 'string') return undefined;
    const space = auth.indexOf(' ');
    if (space < 0) return undefined;
    const scheme = auth.slice(0, space).toLowerCase();
    const value = auth.slice(space + 1).trim();
    if (scheme === 'bearer') return value || undefined;
    if (scheme !== 'basic') return undefined;
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    const user = colon < 0 ? decoded : decoded.slice(0, colon);
    const password = colon < 0 ? '' : decoded.slice(colon + 1);
    return password || user || undefined;
  };

  /** Who may use the proxy: the agent key, or the refusal. */
  const admit = (req: IncomingMessage): { key: string } | ServiceError => {
    const key = credentialOf(req);
    if (key === undefined)
      return new ServiceError(
        'proxy_auth_required',
        'the proxy needs the agent key as its credential (http://agent:<agent key>@host:port)',
      );
    try {
      if (!opts.authenticate(key))
        return new ServiceError('proxy_auth_required', 'the agent key is not valid');
    } catch (err) {
      if (isServiceError(err) && err.status === 503) return err;
      throw err;
    }
    return { key };
  };

  /**
   * Counts and logs a refusal as the gateway's handler does its own answers (createHttpHandler's
   * finish): an agent refused for its credential or its target shows in the metrics, every
   * refusal at debug, and a 503 at warn, for an operator must see those; a refusal at a cap
   * (`limit`) at warn once per cap per CAP_WARN_INTERVAL_MS, the others at debug.
   */
  const recordRefusal = (
    method: string,
    arrived: number,
    err: Pick<Unparsable, 'status' | 'code' | 'message'>,
    id: string | null,
    limit?: CapLimit,
  ): void => {
    const seconds = (performance.now() - arrived) / 1000;
    opts.onRefused?.(method, err.status, seconds);
    let failed = err.status >= 500;
    let suppressed: number | undefined;
    if (failed && limit !== undefined && opts.logger.enabled('warn')) {
      suppressed = capWarnings.take(limit);
      if (suppressed === undefined) failed = false;
    }
    if (failed ? opts.logger.enabled('warn') : opts.logger.enabled('debug')) {
      // The request id and the target an error quotes are the caller's own text: a secret in them
      // is logged as its placeholder.
      const fields = {
        request_id: id === null ? null : recordable(id),
        method,
        route: PROXY_ROUTE,
        status: err.status,
        ms: Math.round(seconds * 1e4) / 10,
        reason: err.code,
        error: recordable(err.message),
        ...(limit === undefined ? {} : { limit }),
        ...(suppressed === undefined ? {} : { suppressed }),
      };
      if (failed) opts.logger.warn('request failed', fields);
      else opts.logger.debug('request', fields);
    }
  };

  /**
   * A refusal as every govgate answer has it: the error body, X-Request-Id, the error's own
   * headers (the Retry-After of a 503), and for 407 the challenge.
   */
  const refusal = (
    method: string,
    reqHeaders: IncomingMessage['headers'] | ServerRequest['headers'],
    arrived: number,
    err: ServiceError,
    limit?: CapLimit,
  ): { status: number; headers: Record<string, string>; body: string } => {
    const id = requestIdFor(reqHeaders['x-request-id'] as string | undefined);
    recordRefusal(method, arrived, err, id, limit);
    const headers: Record<string, string> = {
      ...err.headers,
      'content-type': 'application/json',
      'x-request-id': id,
    };
    if (err.status === 407) headers['proxy-authenticate'] = 'Basic realm="govgate"';
    return { status: err.status, headers, body: JSON.stringify(errorBody(err.code, err.message, id)) };
  };

  /** The refusal of a request the proxy's own servers parsed (timed from its arrival). */
  const refusalOf = (req: IncomingMessage, err: ServiceError, limit?: CapLimit): ReturnType<typeof refusal> =>
    refusal(req.method ?? 'GET', req.headers, arrivedAt.get(req) ?? performance.now(), err, limit);

  /** Writes a refusal on a socket no HTTP server answers (a CONNECT's, or one refused on arrival), and ends it. */
  const endWith = (socket: Duplex, refused: ReturnType<typeof refusal>): void => {
    const { status, headers, body } = refused;
    let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n`;
    for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
    socket.end(`${head}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  };

  const refuseSocket = (req: IncomingMessage, socket: Duplex, err: ServiceError, limit?: CapLimit): void =>
    endWith(socket, refusalOf(req, err, limit));

  /**
   * What an HTTP server of the proxy could not parse, or what did not arrive in time (408): answered
   * as on the gateway's node:http port (answerUnparsable), counted and logged as a refusal. `since`
   * is when the request could have started: the connection's acceptance on the proxy's port, or
   * undefined inside a tunnel (timed from now).
   */
  const unparsable = (err: Error & { code?: string }, socket: Duplex, since: number | undefined): void => {
    const answered = answerUnparsable(err, socket);
    if (answered !== undefined)
      recordRefusal(NO_METHOD, since ?? performance.now(), answered, answered.requestId);
  };

  const refuse = (req: IncomingMessage, res: ServerResponse, err: ServiceError): void => {
    const { status, headers, body } = refusalOf(req, err);
    res.writeHead(status, {
      ...headers,
      'content-length': String(Buffer.byteLength(body)),
      connection: 'close',
    });
    res.end(body);
  };

  // The proxy's port: a net server that takes each connection (or refuses it past maxWaiting)
  // and hands it to this HTTP server, which never listens (as `inner` below; it is told it does,
  // so that its header and request timeouts are checked).
  const server = createServer(outerTimeouts, (req: IncomingMessage, res: ServerResponse) => {
    arrivedAt.set(req, performance.now());
    // A plain-HTTP call through the proxy names its target in the request line (absolute form).
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      refuse(
        req,
        res,
        new ServiceError(
          'invalid_request',
          'not a proxy request: name the target in the request line (http://host/path) or use CONNECT',
        ),
      );
      return;
    }
    const admitted = admit(req);
    if (admitted instanceof ServiceError) {
      refuse(req, res, admitted);
      return;
    }
    // Only http: on its default port (80) is the provider's plain-HTTP API: another port is
    // another service of that host, and another scheme is no call the gateway can answer.
    const provider =
      target.protocol === 'http:' && target.port === ''
        ? opts.providerHosts().get(hostKey(target.hostname))
        : undefined;
    if (provider === undefined) {
      refuse(
        req,
        res,
        new ServiceError(
          'forbidden',
          `govgate's proxy carries calls to this org's model providers only (http:// on port 80, or a tunnel to port 443); ${target.protocol}//${target.host} is not one`,
        ),
      );
      return;
    }
    req.url = target.pathname + target.search;
    requestListener(asAgent(admitted.key, provider), inFlight, queuedLost, undefined, bodyBudget)(req, res);
  });

  // The calls inside the tunnels: one HTTP server for all of them, which never listens (each
  // tunnel is handed to it as a connection). node starts the checker of its header and request
  // timeouts when a server emits 'listening', so this one is told it listens: without that, a
  // call that never finished held its tunnel for good (proxy-limits.test.ts fails if node stops
  // doing so). Its idle timeout (keepAliveTimeout) is each socket's own and needs nothing more.
  const inner = createServer(timeouts, (req: IncomingMessage, res: ServerResponse) => {
    const listener = tunnelListeners.get(req.socket);
    // Every socket it serves is a tunnel, listed before it is handed over.
    if (listener !== undefined) listener(req, res);
    else res.destroy();
  });
  // What its parser refuses, and a call that does not arrive in time, is answered as on the
  // gateway's port (400 or 408 in the error shape, 431), not with the tunnel just closed.
  inner.on('clientError', (err: Error & { code?: string }, socket: Duplex) =>
    unparsable(err, socket, undefined),
  );
  // A CONNECT inside a tunnel is a call no provider answers: node would close the tunnel unanswered.
  inner.on('connect', (req: IncomingMessage, socket: Duplex) => {
    arrivedAt.set(req, performance.now());
    refuseSocket(
      req,
      socket,
      new ServiceError('invalid_request', 'a tunnel carries calls to its provider; CONNECT is not one'),
    );
  });
  inner.emit('listening');

  server.on('connect', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    arrivedAt.set(req, performance.now());
    // No longer waiting for a request: a tunnel now (MAX_TUNNELS), or refused and closing.
    waiting.delete(socket);
    socket.on('error', () => socket.destroy());
    const [host = '', portText = '443'] = (req.url ?? '').toLowerCase().split(/:(?=\d+$)/);
    const admitted = admit(req);
    if (admitted instanceof ServiceError) {
      refuseSocket(req, socket, admitted);
      return;
    }
    const provider = opts.providerHosts().get(hostKey(host));
    if (provider === undefined || portText !== '443') {
      refuseSocket(
        req,
        socket,
        new ServiceError(
          'forbidden',
          `govgate's proxy opens tunnels to this org's model providers only (port 443); ${req.url} is not one`,
        ),
      );
      return;
    }
    if (tunnels.size >= maxTunnels) {
      refuseSocket(
        req,
        socket,
        new ServiceError('unavailable', `the proxy already has ${maxTunnels} tunnels open, its limit`, {
          headers: { 'retry-after': '1' },
        }),
        'proxy_tunnels',
      );
      return;
    }
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) socket.unshift(head);
    const tls = new TLSSocket(socket, {
      isServer: true,
      secureContext: opts.ca.contextFor(provider.host),
      ALPNProtocols: ['http/1.1'],
    });
    tls.on('error', () => tls.destroy());
    tunnels.add(tls);
    // A TLSSocket has no handshake timeout of its own (tls.Server's is not used here): an agent
    // that opens a tunnel and never starts TLS would hold it for good.
    const handshake = setTimeout(() => tls.destroy(), handshakeTimeoutMs);
    tls.once('secure', () => clearTimeout(handshake));
    tls.once('close', () => {
      clearTimeout(handshake);
      tunnels.delete(tls);
    });
    tunnelListeners.set(
      tls,
      requestListener(asAgent(admitted.key, provider), inFlight, queuedLost, undefined, bodyBudget),
    );
    inner.emit('connection', tls);
  });
  server.on('clientError', (err: Error & { code?: string }, socket: Duplex) =>
    unparsable(err, socket, waiting.get(socket as Socket)),
  );
  server.emit('listening');

  // The options node:http gives its own listening socket (a client may end its side after its
  // request and still read the answer).
  const port_ = createNetServer({ allowHalfOpen: true, noDelay: true }, (socket: Socket) => {
    const accepted = performance.now();
    if (waiting.size >= maxWaiting) {
      // Answered at once (the client reads it as the answer to the request it sends), and kept a
      // moment, reading and dropping what comes, so that the client gets it rather than a reset.
      socket.on('error', () => socket.destroy());
      refusedSockets.add(socket);
      socket.once('close', () => refusedSockets.delete(socket));
      socket.setTimeout(REFUSED_LINGER_MS, () => socket.destroy());
      socket.resume();
      const err = new ServiceError(
        'unavailable',
        `the proxy already has ${maxWaiting} connections waiting for their request, its limit`,
        { headers: { 'retry-after': '1' } },
      );
      endWith(socket, refusal(NO_METHOD, {}, accepted, err, 'proxy_connections'));
      return;
    }
    waiting.set(socket, accepted);
    socket.once('close', () => waiting.delete(socket));
    server.emit('connection', socket);
  });
  await new Promise<void>((resolve, reject) => {
    port_.once('error', reject);
    port_.listen(opts.port, opts.host, () => {
      port_.off('error', reject);
      resolve();
    });
  });
  const port = (port_.address() as AddressInfo).port;
  opts.logger.debug('forward proxy listening', { port });
  let closing: Promise<void> | undefined;
  return {
    port,
    get openTunnels() {
      return tunnels.size;
    },
    get waitingConnections() {
      return waiting.size;
    },
    close(graceMs = 10_000) {
      closing ??= shut(graceMs);
      return closing;
    },
  };

  /** Stops listening, waits for the calls in flight (at most `graceMs`), then ends every tunnel. */
  async function shut(graceMs: number): Promise<void> {
    const closed = new Promise<void>((r) => port_.close(() => r()));
    server.closeIdleConnections();
    inFlight.draining = true;
    await inFlight.drained(graceMs);
    for (const t of tunnels) t.destroy();
    for (const s of refusedSockets) s.destroy();
    server.closeAllConnections();
    for (const s of waiting.keys()) s.destroy();
    server.close(); // stops its timeout checker
    inner.close();
    await closed;
  }
}
