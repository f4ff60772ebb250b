import { type Dispatcher, Pool } from 'undici';
import { ServiceError } from '../core/errors.js';

export interface UpstreamOptions {
  readonly timeoutMs: number;
  readonly connections: number;
}

/**
 * One keep-alive undici Pool per upstream origin, shared by every org that uses that origin.
 */
export class UpstreamPools {
  private readonly pools = new Map<string, Pool>();

  constructor(private readonly opts: UpstreamOptions) {}

  get(origin: string): Pool {
    let pool = this.pools.get(origin);
    if (!pool) {
      pool = new Pool(origin, {
        connections: this.opts.connections,
        pipelining: 1,
        keepAliveTimeout: 30_000,
        headersTimeout: this.opts.timeoutMs,
        bodyTimeout: this.opts.timeoutMs,
        connectTimeout: Math.min(this.opts.timeoutMs, 10_000),
      });
      this.pools.set(origin, pool);
    }
    return pool;
  }

  async close(): Promise<void> {
    await Promise.all([...this.pools.values()].map((p) => p.close().catch(() => {})));
    this.pools.clear();
  }
}

/** Splits a base URL into the pool origin and the path prefix requests are appended to. */
export function splitBaseUrl(baseUrl: string): { origin: string; prefix: string } {
  const url = new URL(baseUrl);
  return { origin: url.origin, prefix: url.pathname.replace(/\/+$/, '') };
}

const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/** Turns a transport failure into the contract's error: timeouts 504, anything else 502. */
export function transportError(provider: string, err: unknown): ServiceError {
  if (err instanceof ServiceError) return err;
  const code = (err as { code?: string } | null)?.code;
  if (code !== undefined && TIMEOUT_CODES.has(code)) {
    return new ServiceError('upstream_timeout', `provider ${provider} did not answer in time`, {
      cause: err,
    });
  }
  if (code === 'UND_ERR_ABORTED' || (err as Error | null)?.name === 'AbortError') {
    return new ServiceError('upstream_error', `call to provider ${provider} was aborted`, { cause: err });
  }
  return new ServiceError('upstream_error', `provider ${provider} is unreachable`, { cause: err });
}

/**
 * Maps a non-2xx upstream answer. The agent can fix a bad request (400 with the provider's
 * message); it cannot fix govgate's provider credentials or a provider outage (502); rate limits
 * pass through as 429 with Retry-After.
 */
export async function statusError(provider: string, res: Dispatcher.ResponseData): Promise<ServiceError> {
  let message = '';
  try {
    const text = (await res.body.text()).slice(0, 4096);
    try {
      const parsed = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
      const e = parsed.error;
      message =
        typeof e === 'string'
          ? e
          : typeof e?.message === 'string'
            ? e.message
            : String(parsed.message ?? text);
    } catch {
      message = text;
    }
  } catch {
    /* body unreadable; the status says enough */
  }
  const status = res.statusCode;
  const detail = message ? `: ${message.slice(0, 500)}` : '';
  if (status === 429) {
    const retry = res.headers['retry-after'];
    return new ServiceError('rate_limited', `provider ${provider} is rate limiting${detail}`, {
      headers: { 'retry-after': typeof retry === 'string' ? retry : '1' },
    });
  }
  if (status === 400 || status === 404 || status === 413 || status === 422) {
    return new ServiceError(
      'invalid_request',
      `provider ${provider} rejected the request (${status})${detail}`,
    );
  }
  if (status === 401 || status === 403) {
    return new ServiceError(
      'upstream_error',
      `provider ${provider} refused govgate's credentials (${status})`,
    );
  }
  return new ServiceError('upstream_error', `provider ${provider} failed (${status})${detail}`);
}

/** Sends a JSON request and returns the parsed JSON answer, mapping every failure. */
export async function requestJson(
  provider: string,
  pool: Pool,
  opts: {
    path: string;
    method: 'GET' | 'POST';
    headers: Record<string, string>;
    body?: string | Buffer;
    signal: AbortSignal;
  },
): Promise<unknown> {
  let res: Dispatcher.ResponseData;
  try {
    res = await pool.request({
      path: opts.path,
      method: opts.method,
      headers: opts.headers,
      body: opts.body ?? null,
      signal: opts.signal,
    });
  } catch (err) {
    throw transportError(provider, err);
  }
  if (res.statusCode < 200 || res.statusCode >= 300) throw await statusError(provider, res);
  try {
    return await res.body.json();
  } catch (err) {
    throw new ServiceError('upstream_error', `provider ${provider} sent an unreadable answer`, {
      cause: err,
    });
  }
}

/** Opens a streaming request; the caller consumes `body` (utf8 text chunks). */
export async function requestStream(
  provider: string,
  pool: Pool,
  opts: { path: string; headers: Record<string, string>; body: string | Buffer; signal: AbortSignal },
): Promise<AsyncIterable<string>> {
  let res: Dispatcher.ResponseData;
  try {
    res = await pool.request({
      path: opts.path,
      method: 'POST',
      headers: opts.headers,
      body: opts.body,
      signal: opts.signal,
    });
  } catch (err) {
    throw transportError(provider, err);
  }
  if (res.statusCode < 200 || res.statusCode >= 300) throw await statusError(provider, res);
  const body = res.body;
  return {
    async *[Symbol.asyncIterator]() {
      const decoder = new TextDecoder();
      try {
        for await (const chunk of body) yield decoder.decode(chunk as Uint8Array, { stream: true });
      } catch (err) {
        throw transportError(provider, err);
      }
    },
  };
}
