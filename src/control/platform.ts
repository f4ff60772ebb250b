import { createHash, timingSafeEqual } from 'node:crypto';
import { ServiceError } from '../core/errors.js';
import type { RouteHandler } from '../http/app.js';
import type { Router } from '../http/router.js';
import { presentedCredential } from '../identity/guard.js';
import type { Metrics } from '../metrics/index.js';
import type { Snapshot } from '../snapshot/types.js';

export interface PlatformDeps {
  readonly version: string;
  readonly region: string;
  readonly baseUrl: string;
  readonly metrics: Metrics;
  readonly metricsToken: string | undefined;
  readonly snapshot: Snapshot;
  /** Readiness checks: name → ok (a check may need a moment, e.g. a probe write). */
  readonly checks: () => Record<string, boolean> | Promise<Record<string, boolean>>;
}

/**
 * The probes, answered during the drain too: liveness stays 200 while the process drains (a
 * failed liveness probe would only get it killed before its drain ends), readiness answers 503.
 */
export const PROBE_ROUTES: readonly string[] = ['/api/health/live', '/api/health/ready'];

export function registerPlatform(router: Router<RouteHandler>, deps: PlatformDeps): void {
  router.add('GET', '/health', (ctx) => {
    ctx.json(200, { status: 'ok', version: deps.version, storage: 'lmdb', region: deps.region });
  });
  router.add('GET', '/api/health/live', (ctx) => ctx.json(200, { status: 'ok' }));
  router.add('GET', '/api/health/ready', async (ctx) => {
    const checks = await deps.checks();
    const ok = Object.values(checks).every(Boolean);
    ctx.json(ok ? 200 : 503, ok ? { status: 'ok' } : { status: 'unavailable', checks });
  });
  router.add('GET', '/api/config', (ctx) => {
    ctx.json(200, {
      version: deps.version,
      region: deps.region,
      api_url: `${deps.baseUrl}/api`,
      gateway_url: `${deps.baseUrl}/v1`,
      openai_base_url: `${deps.baseUrl}/v1`,
      anthropic_base_url: deps.baseUrl,
      jwks_url: `${deps.baseUrl}/.well-known/jwks.json`,
      docs_url: `${deps.baseUrl}/api/config`,
    });
  });
  // Compared as digests in constant time: a plain !== returns sooner the earlier it differs.
  const sha = (s: string): Buffer => createHash('sha256').update(s).digest();
  const metricsDigest = deps.metricsToken === undefined ? undefined : sha(deps.metricsToken);
  router.add('GET', '/api/metrics', async (ctx) => {
    const presented = presentedCredential(ctx.req.headers);
    if (metricsDigest !== undefined && !timingSafeEqual(sha(presented ?? ''), metricsDigest)) {
      throw new ServiceError('unauthenticated', 'metrics need the SERVICE_METRICS_TOKEN bearer token');
    }
    ctx.sendRaw(200, deps.metrics.registry.contentType, await deps.metrics.registry.metrics());
  });
}
