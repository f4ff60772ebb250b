import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { ControlClient } from './control-client.js';

/** Request headers not passed on: the connection's own, and what undici sets from the body. */
const DROPPED_REQUEST = new Set([
  'host',
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'expect',
]);

/** Response headers not passed back: the connection's own (the adapter frames the answer). */
const DROPPED_RESPONSE = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-length',
  'trailer',
  'upgrade',
]);

/** Answers up to this size are read whole and sent with a length; larger ones and event streams are streamed. */
const BUFFER_LIMIT = 1024 * 1024;
/** A streamed answer waits for its client past this much unsent. */
const STREAM_BACKLOG = 256 * 1024;

/**
 * The paths a sidecar does not serve (`/api/*`, `/v1/me/*`, the govern and mandate endpoints):
 * sent on to the control plane as they came, with the caller's credential and request id, and
 * the answer sent back as it comes, event streams included. A client that leaves aborts the
 * control plane call. An unreachable control plane is a 503 (docs/sidecar.md).
 */
export function forwarder(client: ControlClient, stallMs: number): RouteHandler {
  return async (ctx) => {
    const req = ctx.req;
    const headers: Record<string, string> = {};
    for (const name of Object.keys(req.headers))
      if (!DROPPED_REQUEST.has(name)) headers[name] = req.headers[name] as string;
    headers['x-request-id'] = ctx.requestId;
    const abort = new AbortController();
    ctx.res.onAbort(() => abort.abort());
    let res: Awaited<ReturnType<ControlClient['pool']['request']>>;
    try {
      res = await client.pool.request({
        method: req.method as 'GET',
        path: `${client.prefix}${req.path}${req.query === '' ? '' : `?${req.query}`}`,
        headers,
        ...(req.body.length === 0 ? {} : { body: req.body }),
        signal: abort.signal,
        headersTimeout: 30_000,
        bodyTimeout: 0,
      });
    } catch (err) {
      if (ctx.res.aborted) return;
      throw new ServiceError(
        'unavailable',
        'the control plane cannot be reached from this sidecar; try again',
        {
          cause: err,
          headers: { 'retry-after': '2' },
        },
      );
    }
    const out: Record<string, string> = {};
    for (const [name, value] of Object.entries(res.headers)) {
      if (DROPPED_RESPONSE.has(name) || value === undefined) continue;
      out[name] = Array.isArray(value) ? value.join(', ') : value;
    }
    out['x-request-id'] = ctx.requestId;
    const length = Number(res.headers['content-length']);
    const type = String(res.headers['content-type'] ?? '');
    try {
      if (Number.isFinite(length) && length <= BUFFER_LIMIT && !type.startsWith('text/event-stream')) {
        const body = Buffer.from(await res.body.arrayBuffer());
        ctx.sendRaw(res.statusCode, type || 'application/octet-stream', body, out);
        return;
      }
      ctx.status = res.statusCode;
      ctx.res.stream(res.statusCode, out);
      for await (const chunk of res.body) {
        if (!ctx.res.write(chunk as Buffer)) break;
        if (ctx.res.backlog > STREAM_BACKLOG && !(await ctx.res.drain(stallMs))) {
          ctx.clientStalled();
          abort.abort();
          return;
        }
      }
      if (!ctx.res.aborted) ctx.endStream();
    } catch (err) {
      if (ctx.res.aborted) return;
      if (ctx.res.started) {
        ctx.endStream();
        return;
      }
      throw new ServiceError('unavailable', 'the control plane answer was cut off; try again', {
        cause: err,
      });
    } finally {
      res.body.destroy();
    }
  };
}
