import type { AuditSink } from '../audit/types.js';
import { ServiceError } from '../core/errors.js';
import { headerSecretProblem, lastFour, maskedEcho } from '../crypto/vault.js';
import { type EgressPolicy, originOf } from '../export/ssrf.js';
import type { RouteHandler } from '../http/app.js';
import { type Ctx, NO_PARAMS } from '../http/context.js';
import type { Router } from '../http/router.js';
import { authenticate, requireRole, targetOrg } from '../identity/guard.js';
import type { IdentityRepo } from '../identity/repo.js';
import { isRole, minRole, ROLES, type Role, roleAtLeast } from '../identity/roles.js';
import type { AgentRecord, Principal } from '../identity/types.js';
import {
  DEFAULT_BASE_URL,
  PROVIDER_NAMES,
  type ProviderName,
  type ProviderSettings,
} from '../providers/types.js';
import type { Snapshot } from '../snapshot/types.js';
import type { SettingsRepo } from '../store/settings.js';
import { newId } from '../util/ids.js';
import { adminEvent as recordAdminEvent, recordedUrl } from './admin-event.js';
import { strictBody } from './body.js';

export interface ProvisioningDeps {
  readonly snapshot: Snapshot;
  readonly identity: IdentityRepo;
  readonly settings: SettingsRepo;
  readonly audit: AuditSink;
  readonly egress: EgressPolicy;
  /** The service's own base URL (known once it listens): a provider may not point at it. */
  readonly baseUrl: string;
}

const AGENT_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const EMAIL_RE = /^[^\s@]+@[^\s@]+$/;
const ORGS_PARAMS: ReadonlySet<string> = new Set(['include_deleted']);

export function registerProvisioning(router: Router<RouteHandler>, deps: ProvisioningDeps): void {
  const { snapshot, identity, settings, audit } = deps;
  const orgExists = (id: string): boolean => identity.getOrg(id) !== undefined;

  const adminEvent = (orgId: string, p: Principal, type: string, details: Record<string, unknown>) =>
    recordAdminEvent(audit, orgId, p, type, details);

  const agentInOrg = (ctx: Ctx, orgId: string): AgentRecord => {
    const agent = identity.getAgent(ctx.params.uuid as string);
    // Another org's agent is reported as missing: its existence is not this caller's business.
    if (!agent || agent.org_id !== orgId)
      throw new ServiceError('not_found', `agent ${ctx.params.uuid} not found`);
    return agent;
  };

  router.add('GET', '/api/me', (ctx) => {
    const p = authenticate(ctx, snapshot);
    // Who the caller is depends on no org: an `?org_id=` is refused rather than ignored.
    ctx.onlyParams(NO_PARAMS, 'a parameter of /api/me');
    ctx.json(200, {
      kind: p.kind,
      id: p.id,
      org_id: p.org_id,
      role: p.role,
      ...(p.agent_id ? { agent_id: p.agent_id } : {}),
      ...(p.email ? { email: p.email } : {}),
    });
  });

  router.add('POST', '/api/orgs', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'super_admin');
    const body = strictBody<{ name: string }>(ctx.jsonObject(), {
      name: { type: 'string', required: true, maxLength: 200 },
    });
    const org = identity.createOrg(body.name.trim());
    await audit.append({
      org_id: '_system',
      event_type: 'admin.org_created',
      outcome: 'allow',
      details: { actor: p.id, org_id: org.org_id, name: org.name },
    });
    ctx.json(201, { org_id: org.org_id, name: org.name, created_at: org.created_at });
  });

  // Deleted orgs (tombstones: `deleted_at`, `deleted_by`, `removed`) only with ?include_deleted=true.
  router.add('GET', '/api/orgs', (ctx) => {
    requireRole(ctx, snapshot, 'super_admin');
    ctx.onlyParams(ORGS_PARAMS, 'a parameter of GET /api/orgs');
    const include = ctx.query.get('include_deleted');
    if (include !== null && include !== 'true' && include !== 'false')
      throw new ServiceError('invalid_request', 'include_deleted must be true or false', {
        param: 'include_deleted',
      });
    ctx.json(200, { data: identity.listOrgs(include === 'true'), next_cursor: null });
  });

  router.add('POST', '/api/users', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const body = strictBody<{ email: string; role: Role; org_id?: string }>(ctx.jsonObject(), {
      email: { type: 'string', required: true, maxLength: 320, pattern: EMAIL_RE },
      role: { type: 'string', required: true, enum: ROLES },
      org_id: { type: 'string' },
    });
    const orgId = targetOrg(ctx, p, body.org_id, orgExists);
    if (!roleAtLeast(p.role, body.role))
      throw new ServiceError('forbidden', `you cannot grant a role above your own (${p.role})`, {
        param: 'role',
      });
    const user = identity.createUser(orgId, body.email, body.role);
    await adminEvent(orgId, p, 'user_created', { user_id: user.user_id, role: user.role });
    ctx.json(201, {
      user_id: user.user_id,
      org_id: user.org_id,
      email: user.email,
      role: user.role,
      created_at: user.created_at,
    });
  });

  router.add('POST', '/api/tokens', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const body = strictBody<{ name?: string; user_id?: string; role?: string; expires_days?: number }>(
      ctx.jsonObject(),
      {
        name: { type: 'string', maxLength: 200 },
        user_id: { type: 'string' },
        role: { type: 'string', enum: ROLES },
        expires_days: { type: 'integer', min: 1, max: 3650 },
      },
    );
    const userId = body.user_id ?? p.id;
    const user = identity.getUser(userId);
    if (!user || (user.org_id !== p.org_id && p.role !== 'super_admin'))
      throw new ServiceError('not_found', `user ${userId} not found`, { param: 'user_id' });
    if (userId !== p.id && !roleAtLeast(p.role, 'org_admin')) {
      throw new ServiceError('forbidden', 'only an org_admin or higher can issue tokens for another user', {
        param: 'user_id',
      });
    }
    // A token names its user: it acts, is recorded and revokes as that user. One for a user
    // ranked above the caller, even narrowed to the caller's role, would be an impersonation.
    if (userId !== p.id && !roleAtLeast(p.role, user.role)) {
      throw new ServiceError(
        'forbidden',
        `you cannot issue a token for a user whose role (${user.role}) is above your own (${p.role})`,
        { param: 'user_id' },
      );
    }
    if (body.role !== undefined && isRole(body.role) && !roleAtLeast(user.role, body.role)) {
      throw new ServiceError(
        'invalid_request',
        `a token cannot carry a role above its user's (${user.role})`,
        { param: 'role' },
      );
    }
    // Nor above the credential that issues it: a token narrowed to a role, or to a lifetime,
    // would otherwise mint its user's full role without an end (`role` left out takes the lower
    // of the two; the expiry is at most the issuing token's).
    const caller = p.role as Role;
    if (body.role !== undefined && isRole(body.role) && !roleAtLeast(caller, body.role)) {
      throw new ServiceError(
        'forbidden',
        `a token cannot carry a role above the credential that issues it (${caller})`,
        { param: 'role' },
      );
    }
    const issued = identity.createPat(user, {
      name: body.name,
      role: isRole(body.role) ? body.role : minRole(user.role, caller),
      expiresDays: body.expires_days,
      notAfter: identity.getCredential(p.credential_id)?.expires_at,
    });
    await adminEvent(user.org_id, p, 'token_created', {
      token_id: issued.record.credential_id,
      user_id: user.user_id,
    });
    ctx.json(201, {
      token: issued.secret,
      token_id: issued.record.credential_id,
      last4: issued.record.last4,
      role: issued.record.role,
      expires_at: issued.record.expires_at,
    });
  });

  router.add('DELETE', '/api/tokens/:token_id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'requester');
    const cred = identity.getCredential(ctx.params.token_id as string);
    const owner = cred?.kind === 'pat' ? identity.getUser(cred.subject_id) : undefined;
    // Nobody revokes a token acting above their own role, not even one of their own: a narrowed
    // token cannot disable its user's broader ones.
    const allowed =
      cred?.kind === 'pat' &&
      owner !== undefined &&
      roleAtLeast(p.role, cred.role ?? owner.role) &&
      (cred.subject_id === p.id ||
        p.role === 'super_admin' ||
        (cred.org_id === p.org_id && roleAtLeast(p.role, 'org_admin')));
    if (!cred || !allowed) throw new ServiceError('not_found', `token ${ctx.params.token_id} not found`);
    identity.revokeCredential(cred.credential_id);
    await adminEvent(cred.org_id, p, 'token_revoked', { token_id: cred.credential_id });
    ctx.json(200, { token_id: cred.credential_id, revoked: true });
  });

  router.add('POST', '/api/agents/onboard', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const body = strictBody<{
      agent_id: string;
      owner_email?: string;
      description?: string;
      framework?: string;
      intended_use?: string;
      org_id?: string;
    }>(ctx.jsonObject(), {
      agent_id: { type: 'string', required: true, pattern: AGENT_ID_RE },
      owner_email: { type: 'string', maxLength: 320, pattern: EMAIL_RE },
      description: { type: 'string', maxLength: 2000 },
      framework: { type: 'string', maxLength: 100 },
      intended_use: { type: 'string', maxLength: 2000 },
      org_id: { type: 'string' },
    });
    const orgId = targetOrg(ctx, p, body.org_id, orgExists);
    const agent = identity.onboardAgent(orgId, body);
    const key = identity.createAgentKey(agent, { name: 'default' });
    await adminEvent(orgId, p, 'agent_onboarded', {
      agent_uuid: agent.agent_uuid,
      agent_id: agent.agent_id,
      key_id: key.record.credential_id,
    });
    ctx.json(201, {
      agent_uuid: agent.agent_uuid,
      agent_id: agent.agent_id,
      org_id: agent.org_id,
      api_key: { api_key: key.secret, key_id: key.record.credential_id, last4: key.record.last4 },
    });
  });

  router.add('GET', '/api/agents', (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    const orgId = targetOrg(ctx, p, undefined, orgExists);
    const limitRaw = ctx.query.get('limit');
    const limit = limitRaw === null ? 100 : Number(limitRaw);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
      throw new ServiceError('invalid_request', 'limit must be an integer from 1 to 1000', {
        param: 'limit',
      });
    const page = identity.listAgents(orgId, limit, ctx.query.get('cursor') ?? undefined);
    ctx.json(200, { data: page.data, next_cursor: page.next_cursor });
  });

  router.add('GET', '/api/agents/:uuid', (ctx) => {
    const p = requireRole(ctx, snapshot, 'auditor');
    ctx.json(200, agentInOrg(ctx, targetOrg(ctx, p, undefined, orgExists)));
  });

  router.add('POST', '/api/agents/:uuid/keys', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const agent = agentInOrg(ctx, targetOrg(ctx, p, undefined, orgExists));
    const body = strictBody<{ name?: string; expires_days?: number }>(
      ctx.req.body.length === 0 ? {} : ctx.jsonObject(),
      {
        name: { type: 'string', maxLength: 200 },
        expires_days: { type: 'integer', min: 1, max: 3650 },
      },
    );
    const key = identity.createAgentKey(agent, { name: body.name, expiresDays: body.expires_days });
    await adminEvent(agent.org_id, p, 'agent_key_created', {
      agent_uuid: agent.agent_uuid,
      key_id: key.record.credential_id,
    });
    ctx.json(201, {
      api_key: key.secret,
      key_id: key.record.credential_id,
      last4: key.record.last4,
      expires_at: key.record.expires_at,
    });
  });

  router.add('DELETE', '/api/agents/:uuid/keys/:key_id', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'developer');
    const agent = agentInOrg(ctx, targetOrg(ctx, p, undefined, orgExists));
    const cred = identity.getCredential(ctx.params.key_id as string);
    if (cred?.kind !== 'agent' || cred.subject_id !== agent.agent_uuid)
      throw new ServiceError('not_found', `key ${ctx.params.key_id} not found`);
    identity.revokeCredential(cred.credential_id);
    await adminEvent(agent.org_id, p, 'agent_key_revoked', {
      agent_uuid: agent.agent_uuid,
      key_id: cred.credential_id,
    });
    ctx.json(200, { key_id: cred.credential_id, revoked: true });
  });

  /** Where a provider's key is sent: the origin of its base URL (its default when unset). */
  const destination = (baseUrl: string | null, name: ProviderName): string | null => {
    const url = baseUrl ?? DEFAULT_BASE_URL[name];
    return url === null ? null : originOf(url);
  };

  const providersView = (orgId: string): unknown => ({
    providers: settings.providers(orgId).map((e) => ({
      name: e.name,
      base_url: e.base_url ?? DEFAULT_BASE_URL[e.name],
      models: e.models,
      api_key: e.key_last4 === null ? null : `****${e.key_last4}`,
    })),
  });

  router.add('GET', '/api/settings/providers', (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    ctx.json(200, providersView(targetOrg(ctx, p, undefined, orgExists)));
  });

  router.add('PUT', '/api/settings/providers', async (ctx) => {
    const p = requireRole(ctx, snapshot, 'org_admin');
    const body = strictBody<{ providers: unknown[]; org_id?: string }>(ctx.jsonObject(), {
      providers: { type: 'array', required: true },
      org_id: { type: 'string' },
    });
    const orgId = targetOrg(ctx, p, body.org_id, orgExists);
    const current = new Map(settings.providers(orgId).map((e) => [e.name, e]));
    const entries: ProviderSettings[] = [];
    const secrets = new Map<string, string>();
    const seen = new Set<string>();
    for (const [i, raw] of body.providers.entries()) {
      if (raw === null || typeof raw !== 'object' || Array.isArray(raw))
        throw new ServiceError('invalid_request', `providers[${i}] must be an object`, {
          param: `providers[${i}]`,
        });
      const e = strictBody<{ name: ProviderName; api_key?: string; base_url?: string; models?: unknown[] }>(
        raw as Record<string, unknown>,
        {
          name: { type: 'string', required: true, enum: PROVIDER_NAMES },
          api_key: { type: 'string', maxLength: 1000 },
          base_url: { type: 'string', maxLength: 2000 },
          models: { type: 'array' },
        },
      );
      if (seen.has(e.name))
        throw new ServiceError('invalid_request', `provider ${e.name} is listed twice`, {
          param: `providers[${i}].name`,
        });
      seen.add(e.name);
      const models = (e.models ?? []).map((m, j) => {
        if (typeof m !== 'string' || m === '' || m.length > 200)
          throw new ServiceError('invalid_request', 'models must be non-empty strings', {
            param: `providers[${i}].models[${j}]`,
          });
        return m;
      });
      let keyRef: string | null = null;
      let last4: string | null = null;
      if (e.name !== 'mock') {
        const prev = current.get(e.name);
        const sent = e.api_key === undefined ? 'echo' : maskedEcho(e.api_key, prev?.key_last4);
        const keyProblem = sent === 'new' ? headerSecretProblem(e.api_key as string) : undefined;
        if (keyProblem !== undefined)
          throw new ServiceError('invalid_request', `api_key ${keyProblem}`, {
            param: `providers[${i}].api_key`,
          });
        if (sent === 'foreign')
          throw new ServiceError(
            'invalid_request',
            `api_key looks like a mask but is not the stored ${e.name} key's; send the key itself, or its mask as GET shows it`,
            { param: `providers[${i}].api_key` },
          );
        if (sent === 'echo') {
          if (!prev?.key_ref)
            throw new ServiceError('invalid_request', `provider ${e.name} needs api_key`, {
              param: `providers[${i}].api_key`,
            });
          // A key its caller can only see masked stays with its destination: sent elsewhere, it
          // would reach whoever runs that server in clear.
          if (destination(e.base_url ?? null, e.name) !== destination(prev.base_url, e.name))
            throw new ServiceError(
              'invalid_request',
              `a new base_url for ${e.name} needs its api_key again`,
              {
                param: `providers[${i}].api_key`,
              },
            );
          keyRef = prev.key_ref;
          last4 = prev.key_last4;
        } else {
          keyRef = newId('prov_', 16);
          last4 = lastFour(e.api_key as string);
          secrets.set(keyRef, e.api_key as string);
        }
        if (e.base_url !== undefined) {
          // Caught here when it is plain; any other way back to govgate (another name, a relay)
          // is refused at the hop by x-govgate-hop.
          if (deps.baseUrl !== '' && originOf(e.base_url) === originOf(deps.baseUrl))
            throw new ServiceError(
              'invalid_request',
              `base_url ${originOf(e.base_url)} is govgate's own address: its calls would come back to govgate`,
              { param: `providers[${i}].base_url` },
            );
          const problem = await deps.egress.check(e.base_url);
          if (problem)
            throw new ServiceError('invalid_request', `base_url ${problem}`, {
              param: `providers[${i}].base_url`,
            });
        }
      } else if (e.api_key !== undefined || e.base_url !== undefined) {
        throw new ServiceError('invalid_request', 'the mock provider takes no api_key or base_url', {
          param: `providers[${i}]`,
        });
      }
      entries.push({
        name: e.name,
        base_url: e.base_url?.replace(/\/+$/, '') ?? null,
        models,
        key_ref: keyRef,
        key_last4: last4,
      });
    }
    settings.setProviders(orgId, entries, secrets);
    // Where each provider now sends calls (never its key): a redirect shows in the chain.
    await adminEvent(orgId, p, 'providers_updated', {
      providers: entries.map((e) =>
        Object.assign({ name: e.name }, recordedUrl(e.base_url), { models: e.models }),
      ),
    });
    ctx.json(200, providersView(orgId));
  });
}
