import { ServiceError } from '../core/errors.js';
import { globMatcher } from '../util/glob.js';
import { anthropicProvider } from './anthropic.js';
import { mockProvider } from './mock.js';
import { openaiProvider } from './openai.js';
import { DEFAULT_BASE_URL, DEFAULT_MODELS, type Provider, type ProviderSettings } from './types.js';
import type { PoolSource } from './upstream.js';

interface Route {
  readonly provider: Provider;
  readonly matches: (model: string) => boolean;
  /** Model names listed without wildcards. */
  readonly named: readonly string[];
  readonly hasGlobs: boolean;
}

/** One org's configured providers, ready to call. A model goes to the first provider that matches. */
export class OrgProviders {
  private readonly routes: Route[];

  constructor(routes: Route[]) {
    this.routes = routes;
  }

  get isEmpty(): boolean {
    return this.routes.length === 0;
  }

  resolve(model: string): Provider {
    for (const r of this.routes) if (r.matches(model)) return r.provider;
    throw new ServiceError(
      'model_not_found',
      `model ${model} is not offered by any provider configured for this org`,
      {
        param: 'model',
      },
    );
  }

  /** The org's models: named ones as configured, glob ones as the upstream lists them. */
  /**
   * The models the org may call. A provider whose list cannot be fetched contributes its named
   * models only, and is reported to `unavailable`: an unreachable upstream must not break the
   * listing, but a wrong key must not look like a provider with no models either.
   */
  async listModels(
    signal: AbortSignal,
    unavailable?: (provider: string, err: unknown) => void,
  ): Promise<{ id: string; owned_by: string }[]> {
    const out: { id: string; owned_by: string }[] = [];
    const seen = new Set<string>();
    for (const r of this.routes) {
      let ids: readonly string[] = r.named;
      if (r.hasGlobs) {
        try {
          ids = [...r.named, ...(await r.provider.listModels(signal)).filter((id) => r.matches(id))];
        } catch (err) {
          unavailable?.(r.provider.name, err);
        }
      }
      for (const id of ids) {
        if (seen.has(id)) continue;
        seen.add(id);
        out.push({ id, owned_by: r.provider.name });
      }
    }
    return out;
  }
}

export function buildOrgProviders(
  entries: readonly ProviderSettings[],
  openKey: (ref: string) => string | undefined,
  pools: PoolSource,
): OrgProviders {
  const routes: Route[] = [];
  for (const e of entries) {
    const models = e.models.length > 0 ? e.models : DEFAULT_MODELS[e.name];
    const matchers = models.map(globMatcher);
    const named = models.filter((m) => !m.includes('*'));
    let provider: Provider;
    if (e.name === 'mock') provider = mockProvider();
    else {
      const key = e.key_ref === null ? undefined : openKey(e.key_ref);
      if (key === undefined) continue; // a provider without its key is skipped, never called unauthenticated
      const base = e.base_url ?? (DEFAULT_BASE_URL[e.name] as string);
      provider = e.name === 'openai' ? openaiProvider(pools, base, key) : anthropicProvider(pools, base, key);
    }
    routes.push({
      provider,
      matches: (m) => matchers.some((f) => f(m)),
      named: e.name === 'mock' && named.length === 0 ? ['mock-echo', 'mock-tools'] : named,
      hasGlobs: e.name !== 'mock' && named.length < models.length,
    });
  }
  return new OrgProviders(routes);
}
