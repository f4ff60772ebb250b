import { createHash, randomBytes } from 'node:crypto';
import { Pool } from 'undici';
import type { SigningKeyDocument, StoredSeal } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import type { ApprovalRef } from '../gateway/blocked.js';
import type { ApprovalRequest } from '../govern/types.js';
import type { SnapshotDoc, SyncState } from '../snapshot/wire.js';

/** A refusal of the control plane: its status and the error code of its body. */
export class ControlError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ControlError';
  }
}

/** How long a sync call may take before it counts as a failure (and is tried again later). */
const SYNC_TIMEOUT_MS = 10_000;

/** Consume ids kept for a retry (ControlClient.consumeApproval); past this the oldest is dropped. */
const MAX_UNANSWERED_CONSUMES = 1024;

/**
 * The sidecar's client of the control plane's sync API (docs/sidecar.md), over one keep-alive
 * pool. The forwarder uses the same pool for the paths the sidecar does not serve.
 */
export class ControlClient {
  readonly pool: Pool;
  /** The path prefix of SERVICE_CONTROL_URL ('' for an origin). */
  readonly prefix: string;
  /** The SHA-256 (hex) of the sidecar token: what is kept of it to tell one token from another. */
  readonly tokenDigest: string;
  /**
   * The control plane's clock minus this one's, from the `Date` of its last answer (ms; second
   * resolution, so up to about a second short; 0 before any answer).
   */
  clockSkewMs = 0;
  readonly #auth: string;
  /** The ids of consumes whose answer never came, by agent and action (consumeApproval). */
  readonly #unanswered = new Map<string, string>();

  /** `ca`: the certificates trusted for an https control plane (undefined: the system's). */
  constructor(controlUrl: string, token: string, ca?: readonly string[]) {
    const url = new URL(controlUrl);
    this.pool = new Pool(url.origin, {
      connections: 16,
      keepAliveTimeout: 30_000,
      ...(ca ? { connect: { ca: [...ca] } } : {}),
    });
    this.prefix = url.pathname.replace(/\/+$/, '');
    this.#auth = `Bearer ${token}`;
    this.tokenDigest = createHash('sha256').update(token).digest('hex');
  }

  async #call(
    method: 'GET' | 'POST',
    path: string,
    body?: string,
    extra?: Record<string, string>,
  ): Promise<{ status: number; headers: Record<string, unknown>; json: unknown }> {
    const headers: Record<string, string> = {
      authorization: this.#auth,
      accept: 'application/json',
      ...extra,
    };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await this.pool.request({
      method,
      path: this.prefix + path,
      headers,
      ...(body === undefined ? {} : { body }),
      signal: AbortSignal.timeout(SYNC_TIMEOUT_MS),
    });
    const date = res.headers.date;
    if (typeof date === 'string') {
      const at = Date.parse(date);
      if (!Number.isNaN(at)) this.clockSkewMs = at - Date.now();
    }
    const text = await res.body.text();
    let json: unknown;
    try {
      json = text === '' ? undefined : JSON.parse(text);
    } catch {
      json = undefined;
    }
    if (res.statusCode >= 400) {
      const err = (json as { error?: { code?: string; message?: string } } | undefined)?.error;
      throw new ControlError(
        res.statusCode,
        err?.code ?? 'unknown',
        `control plane answered ${res.statusCode}: ${err?.message ?? text.slice(0, 200)}`,
      );
    }
    return { status: res.statusCode, headers: res.headers, json };
  }

  /** The org snapshot, or undefined when it is unchanged since `etag`. */
  async snapshot(etag: string | undefined): Promise<{ doc: SnapshotDoc; etag: string } | undefined> {
    const r = await this.#call('GET', '/api/sync/snapshot', undefined, etag ? { 'if-none-match': etag } : {});
    if (r.status === 304) return undefined;
    const tag = r.headers.etag;
    if (typeof tag !== 'string' || typeof r.json !== 'object' || r.json === null)
      throw new ControlError(
        r.status,
        'invalid_snapshot',
        'the control plane sent a snapshot without an ETag',
      );
    return { doc: r.json as SnapshotDoc, etag: tag };
  }

  async state(epoch: string): Promise<SyncState> {
    return (await this.#call('GET', `/api/sync/state?epoch=${encodeURIComponent(epoch)}`)).json as SyncState;
  }

  /** Registers the public keys this sidecar signs mandates with (published in the control plane's JWKS). */
  async registerMandateKeys(keys: readonly unknown[]): Promise<void> {
    await this.#call('POST', '/api/sync/mandate-keys', JSON.stringify({ keys }));
  }

  /** Registers this log's public keys (once per epoch; again is a no-op). */
  async registerLog(epoch: string, keys: SigningKeyDocument): Promise<void> {
    await this.#call('POST', '/api/sync/log', JSON.stringify({ epoch, keys }));
  }

  /**
   * Sends entries (their stored JSON texts, in order) and the seals among them, the last entry's
   * included; returns the state after them.
   */
  async push(epoch: string, texts: readonly string[], seals: readonly StoredSeal[]): Promise<SyncState> {
    const body = `{"epoch":${JSON.stringify(epoch)},"entries":[${texts.join(',')}],"seals":${JSON.stringify(
      seals.map((s) => ({ size: s.size, note: s.note })),
    )}}`;
    return (await this.#call('POST', '/api/sync/events', body)).json as SyncState;
  }

  /**
   * Creates the approval a call asks for, at the control plane, where people decide it. When it
   * cannot be reached the call is refused (503): nothing that needs the control plane is allowed.
   */
  async requestApproval(input: ApprovalRequest): Promise<ApprovalRef> {
    try {
      const body = JSON.stringify({
        agent_uuid: input.agent_uuid,
        fingerprint: input.fingerprint,
        tier: input.tier,
        summary: input.summary.slice(0, 1000),
        ...(input.matched_rule === null ? {} : { matched_rule: input.matched_rule }),
        pipeline_id: input.pipeline_id,
        behavior_type: input.behavior_type,
        ...(input.tool === null ? {} : { tool: input.tool }),
        credential_id: input.credential_id,
      });
      return (await this.#call('POST', '/api/sync/approvals', body)).json as ApprovalRef;
    } catch (err) {
      throw new ServiceError(
        'unavailable',
        'this call needs an approval, and the control plane that keeps approvals cannot be reached; try again later',
        { cause: err, headers: { 'retry-after': '5' } },
      );
    }
  }

  /**
   * Spends an approved approval of this action at the control plane, once; undefined when there
   * is none. When the control plane cannot be heard, the call is refused (503): it may have spent
   * an approval whose answer was lost, so neither "none" nor a new request for one would be true.
   * The consume's id is then kept for the agent's next identical call, which asks with it and gets
   * that approval, if it was spent, rather than finding it gone (ConsumeOptions.consumeId).
   */
  async consumeApproval(
    agentUuid: string,
    fingerprint: string,
    opts: { pipelineId: string | null; minTier: 'standard' | 'signed' },
  ): Promise<{ id: string; decided_by: string | null } | undefined> {
    const action = `${agentUuid}:${fingerprint}`;
    // Taken out while in flight: two identical calls at once must not both claim one approval.
    const consumeId = this.#unanswered.get(action) ?? randomBytes(16).toString('base64url');
    this.#unanswered.delete(action);
    try {
      const body = JSON.stringify({
        agent_uuid: agentUuid,
        fingerprint,
        min_tier: opts.minTier,
        consume_id: consumeId,
        ...(opts.pipelineId === null ? {} : { pipeline_id: opts.pipelineId }),
      });
      const r = (await this.#call('POST', '/api/sync/approvals/consume', body)).json as {
        consumed: { id: string; decided_by: string | null } | null;
      };
      return r.consumed ?? undefined;
    } catch (err) {
      this.#unanswered.set(action, consumeId);
      if (this.#unanswered.size > MAX_UNANSWERED_CONSUMES)
        this.#unanswered.delete(this.#unanswered.keys().next().value as string);
      throw new ServiceError(
        'unavailable',
        'this call needs an approval, and the control plane that keeps approvals cannot be reached; try again later',
        { cause: err, headers: { 'retry-after': '5' } },
      );
    }
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}
