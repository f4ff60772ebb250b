import { ServiceError } from '../core/errors.js';
import { compilePolicy, DEFAULT_POLICY } from '../core/policy/index.js';
import type { AgentRecord, Principal } from '../identity/types.js';
import { buildOrgProviders, type OrgProviders } from '../providers/registry.js';
import { DEFAULT_BASE_URL, type ProviderSettings } from '../providers/types.js';
import type { PoolSource, UpstreamPools } from '../providers/upstream.js';
import type { EffectivePolicy, Snapshot } from '../snapshot/types.js';
import type { SnapshotDoc } from '../snapshot/wire.js';
import { hashCredential } from '../util/ids.js';
import type { ProviderHost } from './proxy.js';

const NO_HOSTS: ReadonlyMap<string, ProviderHost> = new Map();

/**
 * The hosts an agent's SDK calls the org's providers at, for the forward proxy: each provider's
 * public host, and the host of its configured `base_url` with the path its SDK puts before the API
 * (`/v1` for OpenAI-style URLs, none for Anthropic's) as a prefix to cut. One host may serve
 * several providers under different prefixes (a company's LLM gateway at `https://h/openai/v1`
 * and `https://h/anthropic`): each host keeps all of them, longest first, so the proxy cuts the
 * longest one a request's path is under.
 */
function hostsOf(providers: SnapshotDoc['providers']): Map<string, ProviderHost> {
  const prefixes = new Map<string, Set<string>>();
  const add = (url: string | null, openaiStyle: boolean): void => {
    if (url === null) return;
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      return;
    }
    let prefix = u.pathname.replace(/\/+$/, '');
    if (openaiStyle) prefix = prefix.replace(/\/v1$/, '');
    const host = u.hostname.toLowerCase().replace(/^\[|\]$/g, '');
    let known = prefixes.get(host);
    if (known === undefined) prefixes.set(host, (known = new Set()));
    known.add(prefix);
  };
  for (const p of providers) {
    if (p.name === 'mock') continue;
    add(DEFAULT_BASE_URL[p.name], p.name === 'openai');
    add(p.base_url, p.name === 'openai');
  }
  const out = new Map<string, ProviderHost>();
  for (const [host, known] of prefixes)
    out.set(host, { host, prefixes: [...known].sort((a, b) => b.length - a.length) });
  return out;
}

const DEFAULT_EFFECTIVE: EffectivePolicy = { policy: DEFAULT_POLICY, policy_id: null, version_no: null };
const MAX_CACHED_CREDENTIALS = 10_000;
const EMPTY = buildOrgProviders([], () => undefined, { get: () => undefined } as unknown as PoolSource);

/** Everything of one snapshot, compiled and indexed for the request path. */
interface Compiled {
  readonly doc: SnapshotDoc;
  readonly etag: string;
  readonly receivedAt: number;
  readonly credentials: ReadonlyMap<string, { principal: Principal; expiresMs: number }>;
  readonly agentsByName: ReadonlyMap<string, AgentRecord>;
  readonly providers: OrgProviders;
  readonly orgPolicy: EffectivePolicy;
  readonly agentPolicies: ReadonlyMap<string, EffectivePolicy>;
  readonly providerHosts: ReadonlyMap<string, ProviderHost>;
}

/**
 * The sidecar's `Snapshot`: what it pulled from the control plane, compiled once per version
 * (docs/sidecar.md). The request path reads only memory. Until the first snapshot arrives, or
 * after the control plane refused this sidecar's token, every call is refused with 503: the
 * sidecar never decides without a policy (it fails closed).
 */
export class RemoteSnapshot implements Snapshot {
  #current: Compiled | undefined;
  /** Presented secret → its principal, so the hash is taken once per key, not per call. */
  readonly #seen = new Map<string, { principal: Principal; expiresMs: number }>();

  constructor(private readonly pools: UpstreamPools) {}

  get loaded(): boolean {
    return this.#current !== undefined;
  }

  get orgId(): string | undefined {
    return this.#current?.doc.org_id;
  }

  /** The control plane's base URL, the `iss` of the mandates this sidecar signs ('' without a snapshot). */
  get issuer(): string {
    return this.#current?.doc.issuer ?? '';
  }

  get etag(): string | undefined {
    return this.#current?.etag;
  }

  #confirmedAt = 0;

  /** When the control plane last confirmed the snapshot in force (ms since the epoch), or undefined. */
  get confirmedAt(): number | undefined {
    return this.#current === undefined ? undefined : Math.max(this.#current.receivedAt, this.#confirmedAt);
  }

  /** The control plane answered that the snapshot in force is current. */
  touch(now = Date.now()): void {
    this.#confirmedAt = now;
  }

  /**
   * Puts `doc` in force. Everything is checked and compiled first: a snapshot of another format or
   * another org, or one that does not compile, throws and leaves the one in force unchanged.
   */
  apply(doc: SnapshotDoc, etag: string, receivedAt = Date.now()): void {
    // One this sidecar reads, of its own org (a token is one org's): anything else is a control
    // plane mix-up, refused, and the snapshot in force kept.
    if (doc.v !== 1) throw new Error(`snapshot format v${String(doc.v)} is not one this sidecar reads`);
    const inForce = this.#current?.doc.org_id;
    if (inForce !== undefined && doc.org_id !== inForce)
      throw new Error(`the control plane sent org ${doc.org_id}'s snapshot to a sidecar of org ${inForce}`);
    const org = doc.org_id;
    const agentsByUuid = new Map<string, AgentRecord>();
    const agentsByName = new Map<string, AgentRecord>();
    for (const a of doc.agents) {
      if (a.org_id !== org) continue;
      agentsByUuid.set(a.agent_uuid, a);
      agentsByName.set(a.agent_id, a);
    }
    const credentials = new Map<string, { principal: Principal; expiresMs: number }>();
    for (const c of doc.credentials) {
      const agent = agentsByUuid.get(c.agent_uuid);
      if (agent === undefined) continue;
      credentials.set(c.hash, {
        principal: {
          kind: 'agent',
          id: agent.agent_uuid,
          org_id: org,
          role: null,
          agent_id: agent.agent_id,
          credential_id: c.credential_id,
          email: null,
        },
        expiresMs: c.expires_at === null ? Number.POSITIVE_INFINITY : Date.parse(c.expires_at),
      });
    }
    const keys = new Map<string, string>();
    const settings: ProviderSettings[] = doc.providers.map((p) => {
      if (p.api_key !== null) keys.set(p.name, p.api_key);
      return {
        name: p.name,
        base_url: p.base_url,
        models: p.models,
        key_ref: p.api_key === null ? null : p.name,
        key_last4: null,
      };
    });
    const providers = buildOrgProviders(settings, (ref) => keys.get(ref), this.pools.forOrg(org));
    let orgPolicy = DEFAULT_EFFECTIVE;
    const agentPolicies = new Map<string, EffectivePolicy>();
    for (const p of doc.policies) {
      const c = compilePolicy(p.rules, { stored: true });
      if (!c.ok)
        throw new Error(`policy ${p.policy_id} version ${p.version_no} of the snapshot does not compile`);
      const effective = { policy: c.policy, policy_id: p.policy_id, version_no: p.version_no };
      if (p.scope_type === 'org' && p.scope_id === org) orgPolicy = effective;
      else if (p.scope_type === 'agent') agentPolicies.set(p.scope_id, effective);
    }
    this.#current = {
      doc,
      etag,
      receivedAt,
      credentials,
      agentsByName,
      providers,
      orgPolicy,
      agentPolicies,
      providerHosts: hostsOf(doc.providers),
    };
    this.#seen.clear();
  }

  /** Forgets the snapshot (the control plane refused this sidecar): calls are refused until the next one. */
  clear(): void {
    this.#current = undefined;
    this.#seen.clear();
  }

  #now(): Compiled {
    const c = this.#current;
    if (c === undefined)
      throw new ServiceError(
        'unavailable',
        'this sidecar has no policy snapshot from the control plane (yet); it decides nothing without one',
        { headers: { 'retry-after': '1' } },
      );
    return c;
  }

  authenticate(secret: string): Principal | undefined {
    const c = this.#now();
    let hit = this.#seen.get(secret);
    if (hit === undefined) {
      hit = c.credentials.get(hashCredential(secret));
      if (hit === undefined) return undefined;
      if (this.#seen.size >= MAX_CACHED_CREDENTIALS) this.#seen.clear();
      this.#seen.set(secret, hit);
    }
    return hit.expiresMs > Date.now() ? hit.principal : undefined;
  }

  /** The org's provider hosts, for the forward proxy (none without a snapshot). */
  providerHosts(): ReadonlyMap<string, ProviderHost> {
    return this.#current?.providerHosts ?? NO_HOSTS;
  }

  agentByName(orgId: string, agentId: string): AgentRecord | undefined {
    const c = this.#now();
    return orgId === c.doc.org_id ? c.agentsByName.get(agentId) : undefined;
  }

  providers(orgId: string): OrgProviders {
    const c = this.#now();
    return orgId === c.doc.org_id ? c.providers : EMPTY;
  }

  policy(orgId: string, agentUuid: string): EffectivePolicy {
    const c = this.#now();
    if (orgId !== c.doc.org_id) return DEFAULT_EFFECTIVE;
    return c.agentPolicies.get(agentUuid) ?? c.orgPolicy;
  }
}
