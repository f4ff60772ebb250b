import { setImmediate as yieldTurn } from 'node:timers/promises';
import { type IntegrityResult, parseNote, toHex } from '../core/chain/index.js';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Ctx } from '../http/context.js';
import type { Router } from '../http/router.js';
import { requireRole, targetOrg } from '../identity/guard.js';
import type { Role } from '../identity/roles.js';
import { roleAtLeast } from '../identity/roles.js';
import type { Snapshot } from '../snapshot/types.js';
import type { ChainLog } from './chain-log.js';
import type { AuditQuery, StoredSeal } from './types.js';

export interface AuditRouteDeps {
  readonly snapshot: Snapshot;
  readonly log: ChainLog;
  readonly orgExists: (id: string) => boolean;
  /** Epoch ms, for the integrity cache (tests move it). */
  readonly clock?: () => number;
  /** An export's client that takes nothing for this long while behind is let go (default 6 s). */
  readonly clientStallMs?: number;
}

/** Spec 8: an integrity result is reused for 5 minutes per org. */
export const INTEGRITY_TTL_MS = 5 * 60_000;
/** Bytes gathered before each write of the export stream. */
const EXPORT_CHUNK = 256 * 1024;
/** An export reads on only while less than this waits unsent for its client. */
const EXPORT_BACKLOG = 4 * EXPORT_CHUNK;

const SEARCH_PARAMS = [
  'agent_id',
  'session_id',
  'task_id',
  'pipeline_id',
  'action',
  'category',
  'q',
  'event_type',
  'since',
  'until',
  'cursor',
] as const;
/** Spec 4.3's names for the filters DESIGN C calls agent_id, session_id, task_id and q. */
const SPEC_NAMES = { agent: 'agent_id', session: 'session_id', task: 'task_id', text: 'q' } as const;
/** Every parameter the search reads; any other is refused, so a misspelt filter never widens it. */
const KNOWN_PARAMS: ReadonlySet<string> = new Set([
  ...SEARCH_PARAMS,
  ...Object.keys(SPEC_NAMES),
  'limit',
  'org_id',
]);
const POSITIVE_INT = /^[1-9][0-9]{0,15}$/;

function param(ctx: Ctx, name: string): string | undefined {
  const v = ctx.query.get(name);
  return v === null || v === '' ? undefined : v;
}

function intParam(ctx: Ctx, name: string, max: number, fallback?: number): number {
  const v = param(ctx, name);
  if (v === undefined) {
    if (fallback !== undefined) return fallback;
    throw new ServiceError('invalid_request', `${name} is required`, { param: name });
  }
  const n = POSITIVE_INT.test(v) ? Number(v) : Number.NaN;
  if (!Number.isSafeInteger(n) || n > max) {
    throw new ServiceError('invalid_request', `${name} must be an integer from 1 to ${max}`, { param: name });
  }
  return n;
}

function range(ctx: Ctx): { since?: string; until?: string } {
  const since = param(ctx, 'since');
  const until = param(ctx, 'until');
  return { ...(since === undefined ? {} : { since }), ...(until === undefined ? {} : { until }) };
}

/**
 * The /api/audit endpoints (spec 4.3, DESIGN C): search and views are auditor+; integrity and
 * the signing key developer+; every read is scoped to the caller's org (a super_admin may name
 * one with `?org_id=`).
 */
export function registerAuditRoutes(router: Router<RouteHandler>, deps: AuditRouteDeps): void {
  const { snapshot, log } = deps;
  const clock = deps.clock ?? Date.now;
  const stallMs = deps.clientStallMs ?? 6_000;
  const cache = new Map<string, { at: number; result: IntegrityResult }>();
  const running = new Map<string, Promise<IntegrityResult>>();

  const scope = (ctx: Ctx, min: Role): { org: string; role: Role | null } => {
    const p = requireRole(ctx, snapshot, min);
    return { org: targetOrg(ctx, p, undefined, deps.orgExists), role: p.role };
  };

  router.add('GET', '/api/audit', (ctx) => {
    const { org } = scope(ctx, 'auditor');
    ctx.onlyParams(KNOWN_PARAMS, 'a search parameter');
    const q: Record<string, string | number> = { limit: intParam(ctx, 'limit', 1000, 100) };
    for (const name of SEARCH_PARAMS) {
      const v = param(ctx, name);
      if (v !== undefined) q[name] = v;
    }
    for (const [spec, name] of Object.entries(SPEC_NAMES)) {
      const v = param(ctx, spec);
      if (v === undefined) continue;
      if (q[name] !== undefined && q[name] !== v)
        throw new ServiceError(
          'invalid_request',
          `${spec} and ${name} name the same filter with different values`,
          {
            param: spec,
          },
        );
      q[name] = v;
    }
    ctx.json(200, log.search(org, q as AuditQuery));
  });

  const VIEW_PARAMS = new Set(['limit', 'cursor', 'org_id']);
  const view = (path: string, key: 'session_id' | 'task_id' | 'pipeline_id', what: string): void => {
    router.add('GET', path, (ctx) => {
      const { org } = scope(ctx, 'auditor');
      ctx.onlyParams(VIEW_PARAMS, 'a parameter of this view');
      const id = ctx.params.id as string;
      const limit = intParam(ctx, 'limit', 1000, 1000);
      const cursor = param(ctx, 'cursor');
      const page = log.view(org, key, id, limit, cursor);
      if (page.data.length === 0 && cursor === undefined)
        throw new ServiceError('not_found', `${what} ${id} has no audit events`);
      ctx.json(200, { [key]: id, data: page.data, next_cursor: page.next_cursor });
    });
  };
  view('/api/audit/session/:id', 'session_id', 'session');
  view('/api/audit/task/:id', 'task_id', 'task');
  view('/api/audit/pipeline/:id', 'pipeline_id', 'pipeline');

  router.add('GET', '/api/audit/_overview', (ctx) => {
    const { org } = scope(ctx, 'auditor');
    ctx.json(200, log.overview(org, range(ctx)));
  });

  const sealView = (seal: StoredSeal) => {
    const keys = log.publicDocument().keys;
    let signatures: Array<{ name: string; key_id: string; alg: string }> = [];
    try {
      signatures = parseNote(seal.note).signatures.map((s) => {
        const key_id = toHex(s.keyId);
        const known = keys.find((k) => k.name === s.name && k.key_id === key_id);
        return { name: s.name, key_id, alg: known?.alg ?? 'unknown' };
      });
    } catch {
      // a malformed note lists no signatures; integrity reports it
    }
    return { seq: seal.seq, size: seal.size, note: seal.note, signatures };
  };

  router.add('GET', '/api/audit/events/:id', (ctx) => {
    const { org } = scope(ctx, 'auditor');
    const id = ctx.params.id as string;
    const event = log.get(org, id);
    if (event === undefined) throw new ServiceError('not_found', `audit event ${id} not found`);
    const seal = log.sealOf(org, id);
    ctx.json(200, {
      ...event,
      seal: seal ? sealView(seal) : null,
      receipt: seal ? (log.receipt(org, id) ?? null) : null,
    });
  });

  router.add('GET', '/api/audit/events/:id/receipt', (ctx) => {
    const { org } = scope(ctx, 'auditor');
    const id = ctx.params.id as string;
    const receipt = log.receipt(org, id);
    if (receipt === undefined) throw new ServiceError('not_found', `audit event ${id} not found`);
    if (receipt === null) {
      throw new ServiceError(
        'conflict',
        `audit event ${id} is not sealed yet; seals follow within a second`,
        {
          headers: { 'retry-after': '1' },
        },
      );
    }
    ctx.json(200, receipt);
  });

  router.add('GET', '/api/audit/consistency', (ctx) => {
    const { org } = scope(ctx, 'auditor');
    const from = intParam(ctx, 'from', Number.MAX_SAFE_INTEGER);
    const to = intParam(ctx, 'to', Number.MAX_SAFE_INTEGER);
    const proof = log.consistency(org, from, to);
    if (proof === undefined) throw new ServiceError('not_found', `no seal has tree size ${from} or ${to}`);
    ctx.json(200, proof);
  });

  router.add('GET', '/api/audit/integrity', async (ctx) => {
    const { org, role } = scope(ctx, 'developer');
    const refresh = ctx.query.get('refresh') === 'true' && roleAtLeast(role, 'admin');
    const hit = cache.get(org);
    if (!refresh && hit !== undefined && clock() - hit.at < INTEGRITY_TTL_MS) {
      ctx.json(200, hit.result, { 'x-cache': 'hit' });
      return;
    }
    let scan = running.get(org);
    if (scan === undefined) {
      const at = clock();
      scan = log.integrityAsync(org).then((chain) => {
        // Lines the log held that the chain does not (set aside at a start): the chain can be
        // whole while they are evidence of what was answered for and lost (docs/audit.md).
        const diverged = log.divergedFiles(org);
        const result =
          diverged.length === 0 ? chain : Object.assign({}, chain, { log_divergences: diverged });
        cache.set(org, { at, result });
        return result;
      });
      running.set(org, scan);
      const forget = (): void => {
        running.delete(org);
      };
      scan.then(forget, forget);
    }
    ctx.json(200, await scan, { 'x-cache': 'miss' });
  });

  router.add('GET', '/api/audit/export', async (ctx) => {
    const { org } = scope(ctx, 'auditor');
    const format = param(ctx, 'format') ?? 'jsonl';
    if (format !== 'jsonl') {
      throw new ServiceError('invalid_request', 'format must be jsonl', { param: 'format' });
    }
    const lines = log.exportText(org, range(ctx))[Symbol.iterator]();
    ctx.startStream(200, 'application/x-ndjson', {
      'content-disposition': `attachment; filename="audit-${encodeURIComponent(org)}.jsonl"`,
    });
    let chunk = '';
    for (let r = lines.next(); r.done !== true; r = lines.next()) {
      chunk += `${r.value}\n`;
      if (chunk.length < EXPORT_CHUNK) continue;
      if (!ctx.res.write(chunk)) return;
      chunk = '';
      // A client behind by more than the bound is waited for (the chain is not read into the
      // connection's buffers); one that takes nothing for the stall limit is let go.
      if (ctx.res.backlog > EXPORT_BACKLOG) {
        if (!(await ctx.res.drain(stallMs))) {
          if (!ctx.res.aborted) ctx.clientStalled();
          return;
        }
      } else await yieldTurn();
      if (ctx.res.aborted) return;
    }
    ctx.endStream(chunk.length > 0 ? chunk : undefined);
  });

  router.add('GET', '/api/audit/signing-key', (ctx) => {
    scope(ctx, 'developer');
    ctx.json(200, log.publicDocument());
  });
}
