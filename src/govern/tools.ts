import type { Duplex } from 'node:stream';
import { Agent, type Dispatcher, request } from 'undici';
import { ServiceError } from '../core/errors.js';
import { lastFour, maskedEcho } from '../crypto/vault.js';
import { EGRESS_FORBIDDEN, type EgressPolicy, originOf } from '../export/ssrf.js';
import type { Store } from '../store/db.js';
import { assertOrgLive } from '../store/org-tombstone.js';
import type { SettingsRepo } from '../store/settings.js';
import { newId } from '../util/ids.js';
import { toolHeaderProblem } from './tool-headers.js';

export interface ToolSettings {
  readonly name: string;
  readonly url: string;
  readonly method: 'POST' | 'PUT' | 'PATCH' | 'GET';
  /** Header name → vault slot of its value (values are secrets: tokens, keys). */
  readonly headers: Readonly<Record<string, { ref: string; last4: string }>>;
  readonly timeout_ms: number;
}

export interface ToolResult {
  readonly status: number;
  readonly body: unknown;
}

/**
 * A tool call that got no (whole) answer. `requestSent`: govgate had written the whole request
 * to the tool's connection, so the tool may have acted on it; `toolStatus`: the tool's HTTP
 * status when its answer had begun.
 */
export class ToolCallError extends ServiceError {
  constructor(
    code: 'upstream_error' | 'upstream_timeout',
    message: string,
    readonly requestSent: boolean,
    readonly toolStatus: number | undefined,
    cause: unknown,
  ) {
    super(code, message, { cause });
  }
}

const MAX_TOOL_RESPONSE = 1024 * 1024;

/**
 * The first `max` bytes of a tool's answer, as text. The rest is never read: leaving the loop
 * destroys the body, which closes the connection. A call runs to its end even when its agent
 * has gone, so without this bound a tool's answer could fill memory for as long as it lasts.
 */
async function firstBytes(body: AsyncIterable<Buffer>, max: number): Promise<string> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of body) {
    const room = max - n;
    if (chunk.length >= room) {
      chunks.push(chunk.subarray(0, room));
      n = max;
      break;
    }
    chunks.push(chunk);
    n += chunk.length;
  }
  return Buffer.concat(chunks, n).toString('utf8');
}

/** The legacy dispatch handler undici's request() hands its dispatcher (see ToolAgent). */
type LegacyHandler = Dispatcher.DispatchHandler & { onRequestSent?(): void };

/**
 * A dispatch handler that tells `sent` when the whole request (head and body) has been written
 * to the socket, then passes every call on. undici's core calls a handler's `onRequestSent` then
 * (it is not in its types); request() itself has no way to say it.
 */
class SentWatch implements LegacyHandler {
  constructor(
    private readonly inner: LegacyHandler,
    private readonly sent: () => void,
  ) {}
  onConnect(abort: (err?: Error) => void, context?: unknown): void {
    (this.inner.onConnect as (a: typeof abort, c: unknown) => void).call(this.inner, abort, context);
  }
  onError(err: Error): void {
    this.inner.onError?.(err);
  }
  onUpgrade(statusCode: number, headers: Buffer[] | string[] | null, socket: Duplex): void {
    this.inner.onUpgrade?.(statusCode, headers, socket);
  }
  onResponseStarted(): void {
    this.inner.onResponseStarted?.();
  }
  onHeaders(statusCode: number, headers: Buffer[], resume: () => void, statusText: string): boolean {
    return this.inner.onHeaders?.(statusCode, headers, resume, statusText) ?? true;
  }
  onData(chunk: Buffer): boolean {
    return this.inner.onData?.(chunk) ?? true;
  }
  onComplete(trailers: string[] | null): void {
    this.inner.onComplete?.(trailers);
  }
  onBodySent(chunkSize: number, totalBytesSent: number): void {
    this.inner.onBodySent?.(chunkSize, totalBytesSent);
  }
  onRequestSent(): void {
    this.sent();
    this.inner.onRequestSent?.();
  }
}

/** Dispatch options that may carry a call's `onRequestSent` (see SentWatch). */
type WatchedOptions = Dispatcher.DispatchOptions & { readonly onRequestSent?: () => void };

/**
 * The tools' connection pool. A dispatch whose options carry `onRequestSent` has its handler
 * watched. request() passes its options, unknown members included, on to dispatch, and its
 * handler is of the legacy kind (a handler of the newer kind, with `onRequestStart`, would not
 * hear of the write; tool-execute.test checks that a timed-out call says it was sent).
 */
class ToolAgent extends Agent {
  override dispatch(opts: WatchedOptions, handler: Dispatcher.DispatchHandler): boolean {
    const sent = opts.onRequestSent;
    return super.dispatch(opts, sent && !handler.onRequestStart ? new SentWatch(handler, sent) : handler);
  }
}

/** The HTTP tools an org configured for /v1/tools/execute (header secrets in the vault). */
export class ToolRegistry {
  /** Every connection to a tool is checked against the egress policy as it is made. */
  private readonly dispatcher: ToolAgent;

  constructor(
    private readonly store: Store,
    private readonly settings: SettingsRepo,
    private readonly egress: EgressPolicy,
  ) {
    this.dispatcher = new ToolAgent({
      keepAliveTimeout: 10_000,
      connections: 64,
      connect: egress.connector(10_000),
    });
  }

  close(): Promise<void> {
    return this.dispatcher.close();
  }

  list(orgId: string): ToolSettings[] {
    return (this.store.tools.get(orgId) as ToolSettings[] | undefined) ?? [];
  }

  view(orgId: string): unknown[] {
    return this.list(orgId).map((t) => ({
      name: t.name,
      url: t.url,
      method: t.method,
      timeout_ms: t.timeout_ms,
      headers: Object.fromEntries(Object.entries(t.headers).map(([k, v]) => [k, `****${v.last4}`])),
    }));
  }

  /** Replaces the org's tools. Echoing a masked header value keeps the stored secret. */
  async replace(
    orgId: string,
    input: readonly {
      name: string;
      url: string;
      method?: string;
      headers?: Record<string, string>;
      timeout_ms?: number;
    }[],
  ): Promise<void> {
    const current = new Map(this.list(orgId).map((t) => [t.name, t]));
    const next: ToolSettings[] = [];
    const secrets = new Map<string, string>();
    const names = new Set<string>();
    for (const [i, t] of input.entries()) {
      if (names.has(t.name))
        throw new ServiceError('invalid_request', `tool ${t.name} is listed twice`, {
          param: `tools[${i}].name`,
        });
      names.add(t.name);
      const problem = await this.egress.check(t.url);
      if (problem) throw new ServiceError('invalid_request', `url ${problem}`, { param: `tools[${i}].url` });
      const method = (t.method ?? 'POST').toUpperCase();
      if (!['POST', 'PUT', 'PATCH', 'GET'].includes(method))
        throw new ServiceError('invalid_request', 'method must be POST, PUT, PATCH or GET', {
          param: `tools[${i}].method`,
        });
      const headers: Record<string, { ref: string; last4: string }> = {};
      for (const [name, value] of Object.entries(t.headers ?? {})) {
        if (typeof value !== 'string')
          throw new ServiceError('invalid_request', 'header values must be strings', {
            param: `tools[${i}].headers.${name}`,
          });
        const problem = toolHeaderProblem(name, value);
        if (problem)
          throw new ServiceError('invalid_request', problem, { param: `tools[${i}].headers.${name}` });
        // Names are stored lower-case: a second spelling would silently replace the first.
        if (Object.hasOwn(headers, name.toLowerCase()))
          throw new ServiceError('invalid_request', `header ${name} is given twice (names ignore case)`, {
            param: `tools[${i}].headers.${name}`,
          });
        const before = current.get(t.name);
        const prev = before?.headers[name.toLowerCase()];
        const sent = maskedEcho(value, prev?.last4);
        if (sent === 'foreign')
          throw new ServiceError(
            'invalid_request',
            `header ${name} looks like a mask but is not the stored value's; send the value itself, or its mask as GET shows it`,
            { param: `tools[${i}].headers.${name}` },
          );
        if (prev && sent === 'echo') {
          // A secret its caller can only see masked stays with its destination.
          if (before && originOf(before.url) !== originOf(t.url))
            throw new ServiceError('invalid_request', `a new url for ${t.name} needs header ${name} again`, {
              param: `tools[${i}].headers.${name}`,
            });
          headers[name.toLowerCase()] = prev;
        } else {
          const ref = newId('tool_', 16);
          secrets.set(ref, value);
          headers[name.toLowerCase()] = { ref, last4: lastFour(value) };
        }
      }
      next.push({
        name: t.name,
        url: t.url,
        method: method as ToolSettings['method'],
        headers,
        timeout_ms: Math.min(Math.max(t.timeout_ms ?? 10_000, 100), 120_000),
      });
    }
    const kept = new Set(next.flatMap((t) => Object.values(t.headers).map((h) => h.ref)));
    this.store.root.transactionSync(() => {
      assertOrgLive(this.store, orgId);
      for (const [ref, secret] of secrets) this.settings.sealSecret(orgId, ref, secret);
      for (const old of current.values())
        for (const h of Object.values(old.headers))
          if (!kept.has(h.ref)) this.store.vault.removeSync([orgId, h.ref]);
      this.store.tools.putSync(orgId, next);
    });
  }

  /** The org is being deleted: its tool list goes (their header secrets go with its vault slots). Returns how many tools. */
  dropOrg(orgId: string): number {
    const n = this.list(orgId).length;
    if (n > 0) this.store.tools.removeSync(orgId);
    return n;
  }

  /** The org's tool `name`; 404 `tool_not_found` when it has none. */
  require(orgId: string, name: string): ToolSettings {
    const tool = this.list(orgId).find((t) => t.name === name);
    if (!tool)
      throw new ServiceError('tool_not_found', `tool ${name} is not configured for this org`, {
        param: 'name',
      });
    return tool;
  }

  /**
   * Calls `tool` (as `require` gave it) with `args` as the JSON body (none for GET). It is not cancelled from outside:
   * once dispatched, a call runs to its answer or its `timeout_ms`. A call that gets no answer
   * is a ToolCallError saying whether its request was sent.
   */
  async execute(orgId: string, tool: ToolSettings, args: unknown): Promise<ToolResult> {
    const name = tool.name;
    // Checked again (the operator's lists may have changed), and each connection as it is made.
    const problem = await this.egress.check(tool.url);
    if (problem) throw new ServiceError('upstream_error', `tool ${name} url ${problem}`);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    for (const [h, v] of Object.entries(tool.headers)) {
      const secret = this.settings.openSecret(orgId, v.ref);
      if (secret === undefined)
        throw new ServiceError(
          'upstream_error',
          `tool ${name} is missing its secret for ${h}; reconfigure it`,
        );
      headers[h] = secret;
    }
    let sent = false;
    let status: number | undefined;
    try {
      const res = await request(tool.url, {
        method: tool.method,
        headers,
        body: tool.method === 'GET' ? null : JSON.stringify(args ?? {}),
        signal: AbortSignal.timeout(tool.timeout_ms),
        dispatcher: this.dispatcher,
        onRequestSent: () => {
          sent = true;
        },
      } as Parameters<typeof request>[1]);
      status = res.statusCode;
      const text = await firstBytes(res.body, MAX_TOOL_RESPONSE);
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        /* not JSON: returned as text */
      }
      return { status, body };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === EGRESS_FORBIDDEN)
        throw new ToolCallError(
          'upstream_error',
          `tool ${name} url resolves to a forbidden address`,
          false,
          undefined,
          err,
        );
      const timeout = (err as Error).name === 'TimeoutError';
      // An answer was begun: the request got there, whatever the socket's write said.
      sent ||= status !== undefined;
      const why =
        status !== undefined
          ? `answered ${status} but its answer ${timeout ? `did not end within ${tool.timeout_ms} ms` : 'was cut off'}`
          : sent
            ? `did not answer${timeout ? ` within ${tool.timeout_ms} ms` : ''} (the request was sent)`
            : timeout
              ? `was not reached within ${tool.timeout_ms} ms (the request was not sent)`
              : 'is unreachable';
      throw new ToolCallError(
        timeout ? 'upstream_timeout' : 'upstream_error',
        `tool ${name} ${why}`,
        sent,
        status,
        err,
      );
    }
  }
}
