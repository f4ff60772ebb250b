/**
 * A small method + path router. Static paths are one Map lookup; paths with `:params` are matched
 * segment by segment among the patterns with the same number of segments.
 */
export interface RouteMatch<H> {
  readonly handler: H;
  readonly params: Readonly<Record<string, string>>;
  readonly route: string;
}

export type RouteLookup<H> = RouteMatch<H> | { readonly allowed: readonly string[] } | undefined;

interface Pattern<H> {
  readonly route: string;
  readonly segments: readonly string[];
  readonly methods: Map<string, H>;
}

const NO_PARAMS: Readonly<Record<string, string>> = Object.freeze({});

export class Router<H> {
  private readonly statics = new Map<string, Map<string, H>>();
  private readonly patterns = new Map<number, Pattern<H>[]>();

  add(method: string, route: string, handler: H): this {
    const segments = route.split('/').slice(1);
    if (!segments.some((s) => s.startsWith(':'))) {
      let methods = this.statics.get(route);
      if (!methods) this.statics.set(route, (methods = new Map()));
      if (methods.has(method)) throw new Error(`route ${method} ${route} registered twice`);
      methods.set(method, handler);
      return this;
    }
    let list = this.patterns.get(segments.length);
    if (!list) this.patterns.set(segments.length, (list = []));
    let pattern = list.find((p) => p.route === route);
    if (!pattern) {
      pattern = { route, segments, methods: new Map() };
      list.push(pattern);
      // Patterns with more literal segments win over more general ones.
      list.sort((a, b) => literalCount(b.segments) - literalCount(a.segments));
    }
    if (pattern.methods.has(method)) throw new Error(`route ${method} ${route} registered twice`);
    pattern.methods.set(method, handler);
    return this;
  }

  find(method: string, path: string): RouteLookup<H> {
    const methods = this.statics.get(path);
    if (methods) {
      const handler = methods.get(method) ?? (method === 'HEAD' ? methods.get('GET') : undefined);
      return handler ? { handler, params: NO_PARAMS, route: path } : { allowed: [...methods.keys()] };
    }
    const segments = path.split('/').slice(1);
    const list = this.patterns.get(segments.length);
    if (!list) return undefined;
    let allowed: string[] | undefined;
    for (const p of list) {
      const params = match(p.segments, segments);
      if (!params) continue;
      const handler = p.methods.get(method) ?? (method === 'HEAD' ? p.methods.get('GET') : undefined);
      if (handler) return { handler, params, route: p.route };
      allowed ??= [...p.methods.keys()];
    }
    return allowed ? { allowed } : undefined;
  }
}

function literalCount(segments: readonly string[]): number {
  let n = 0;
  for (const s of segments) if (!s.startsWith(':')) n++;
  return n;
}

function match(pattern: readonly string[], segments: readonly string[]): Record<string, string> | undefined {
  let params: Record<string, string> | undefined;
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i] as string;
    const s = segments[i] as string;
    if (p.startsWith(':')) {
      if (s.length === 0) return undefined;
      let value: string;
      try {
        value = decodeURIComponent(s);
      } catch {
        return undefined;
      }
      (params ??= {})[p.slice(1)] = value;
    } else if (p !== s) {
      return undefined;
    }
  }
  return params ?? {};
}
