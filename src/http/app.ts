import { ServiceError } from '../core/errors.js';
import { recordable } from '../core/guardrails/recorded.js';
import type { Logger } from '../util/log.js';
import { Ctx } from './context.js';
import { HOP_HEADER, loopDetected } from './hop.js';
import type { InFlight } from './in-flight.js';
import { repeatedHeader } from './once-headers.js';
import { requestIdFor } from './request-id.js';
import type { Router } from './router.js';
import { type HttpHandler, MAX_BODY_BYTES } from './types.js';

export type RouteHandler = (ctx: Ctx) => void | Promise<void>;

export interface AppHooks {
  readonly logger: Logger;
  /** Called once per request when its response is complete (or the client left). */
  readonly onFinish: (ctx: Ctx, status: number, seconds: number) => void;
  /**
   * Routes still answered during the drain (the health probes, so readiness can say it is not
   * ready); every other request that arrives then is refused with 503 `unavailable`.
   */
  readonly answeredWhileDraining?: ReadonlySet<string>;
  /**
   * Counts route handlers still running. A request leaves the server's own count when it is
   * answered or its client leaves, but its handler may have more to do (a tool call its agent
   * left runs to its end, then is audited): the shutdown waits for these too before it closes
   * the store, or their events would be lost.
   */
  readonly work?: InFlight;
  /**
   * Runs before the handler of a request that may write (any method but GET and HEAD): undefined
   * to go on at once, or a promise to wait for; its rejection answers the request instead. The
   * server refuses these requests while the store cannot commit (a full disk), before a provider
   * or a tool is called for a request whose audit event could not be recorded.
   */
  readonly beforeWrite?: () => Promise<void> | undefined;
  /**
   * Handles requests no route matches, as the route `forward` (a sidecar sends them on to the
   * control plane); without it they are 404.
   */
  readonly fallback?: RouteHandler;
}

/** How long a client refused during the drain should wait: about as long as a reconnect takes. */
const DRAIN_RETRY_AFTER = { 'retry-after': '1' } as const;
/** A body refused because the server holds as many body bytes as it may (BodyBudget): room comes back as bodies finish. */
const BUSY_RETRY_AFTER = { 'retry-after': '1' } as const;

/**
 * Turns the router into the adapter's handler: request ids, 404/405/413, 508 for a request a
 * govgate sent to a provider (`x-govgate-hop`), 503 during the drain, one catch for every
 * error, and the finish hook for metrics. Handlers answer through `ctx` and may throw
 * ServiceError; anything else thrown is logged as a bug and answered with 500.
 */
export function createHttpHandler(router: Router<RouteHandler>, hooks: AppHooks): HttpHandler {
  const logger = hooks.logger;
  const answeredWhileDraining = hooks.answeredWhileDraining ?? new Set<string>();
  const work = hooks.work;
  const finish = (ctx: Ctx, status: number): void => {
    const seconds = (performance.now() - ctx.startedAt) / 1000;
    hooks.onFinish(ctx, status, seconds);
    // Failures an operator must see (5xx, and provider failures inside a 200 stream) at warn;
    // every request at debug. Nothing is built when the level is off.
    const failed = status >= 500 || ctx.reason.startsWith('upstream_');
    if (failed ? logger.enabled('warn') : logger.enabled('debug')) {
      // A caller's request id and the names an error quotes (a model, an agent, a tool) are the
      // caller's own text: a secret in them is logged as its placeholder.
      const fields = {
        request_id: recordable(ctx.requestId),
        method: ctx.req.method,
        route: ctx.route,
        status,
        ms: Math.round(seconds * 1e4) / 10,
        reason: ctx.reason || undefined,
        error: ctx.error ? recordable(ctx.error) : undefined,
      };
      if (failed) logger.warn('request failed', fields);
      else logger.debug('request', fields);
    }
  };
  return (req, res) => {
    const startedAt = performance.now();
    const requestId = requestIdFor(req.headers['x-request-id']);
    if (req.repeated !== undefined) {
      // Framing or identity is ambiguous: no route runs, and the connection is closed after.
      const ctx = new Ctx(req, res, requestId, 'repeated_header', {}, startedAt, finish);
      res.onAbort(() => ctx.clientGone());
      ctx.fail(repeatedHeader(req.repeated));
      return;
    }
    const match =
      router.find(req.method, req.path) ??
      (hooks.fallback === undefined ? undefined : { handler: hooks.fallback, params: {}, route: 'forward' });
    if (match === undefined || 'allowed' in match) {
      const ctx = new Ctx(
        req,
        res,
        requestId,
        match ? 'method_not_allowed' : 'not_found',
        {},
        startedAt,
        finish,
      );
      ctx.fail(
        match
          ? new ServiceError('method_not_allowed', `${req.method} is not allowed on ${req.path}`, {
              headers: { allow: match.allowed.join(', ') },
            })
          : new ServiceError('not_found', `no route for ${req.method} ${req.path}`),
      );
      return;
    }
    const ctx = new Ctx(req, res, requestId, match.route, match.params, startedAt, finish);
    res.onAbort(() => ctx.clientGone());
    const hop = req.headers[HOP_HEADER];
    if (hop !== undefined) {
      // Sent by a govgate to a provider: refused before any route runs, so a loop ends at its
      // first hop, with no provider call and no audit event (only the warn line of a 5xx).
      ctx.fail(loopDetected(hop));
      return;
    }
    if (req.draining && !answeredWhileDraining.has(match.route)) {
      // A request on a connection kept alive from before the drain: not started (no provider call,
      // no audit event). The adapter closes the connection after this answer, so the client's
      // retry opens a new one, which reaches another instance.
      ctx.fail(
        new ServiceError('unavailable', 'govgate is shutting down; send the request again', {
          headers: DRAIN_RETRY_AFTER,
        }),
      );
      return;
    }
    if (req.bodyError === 'busy') {
      ctx.fail(
        new ServiceError(
          'unavailable',
          'govgate is reading as many request bodies as it may; send it again',
          {
            headers: BUSY_RETRY_AFTER,
          },
        ),
      );
      return;
    }
    if (req.bodyError === 'too_large') {
      ctx.fail(
        new ServiceError(
          'payload_too_large',
          `the request body is larger than ${sizeText(req.bodyLimit ?? MAX_BODY_BYTES)}`,
        ),
      );
      return;
    }
    let result: void | Promise<void>;
    try {
      // A request the fallback sends on (a sidecar forwarding to its control plane) writes nothing here.
      const gate =
        req.method === 'GET' || req.method === 'HEAD' || match.handler === hooks.fallback
          ? undefined
          : hooks.beforeWrite?.();
      result = gate === undefined ? match.handler(ctx) : gate.then(() => match.handler(ctx));
    } catch (err) {
      onError(ctx, err);
      return;
    }
    if (result instanceof Promise) {
      if (work === undefined) result.catch((err: unknown) => onError(ctx, err));
      else {
        work.enter();
        result.then(work.leave, (err: unknown) => {
          onError(ctx, err);
          work.leave();
        });
      }
    }
  };

  function onError(ctx: Ctx, err: unknown): void {
    if (!(err instanceof ServiceError)) {
      hooks.logger.error('unhandled error', {
        request_id: ctx.requestId,
        route: ctx.route,
        error: err instanceof Error ? (err.stack ?? err.message) : String(err),
      });
    }
    ctx.fail(err);
  }
}

/** A byte count as the limits are written (`5 MiB`, `96 MiB`, `512 KiB`). */
function sizeText(bytes: number): string {
  const mib = bytes / (1024 * 1024);
  if (Number.isInteger(mib)) return `${mib} MiB`;
  const kib = bytes / 1024;
  return Number.isInteger(kib) ? `${kib} KiB` : `${bytes} bytes`;
}
