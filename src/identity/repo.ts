import { randomUUID } from 'node:crypto';
import { ServiceError } from '../core/errors.js';
import type { Store } from '../store/db.js';
import { assertOrgLive } from '../store/org-tombstone.js';
import { hashCredential, newAgentKey, newId, newPat } from '../util/ids.js';
import { OrgGenerations } from '../util/org-generations.js';
import { minRole, type Role } from './roles.js';
import type { AgentRecord, CredentialRecord, OrgRecord, Principal, UserRecord } from './types.js';

export interface IssuedCredential {
  /** The secret, returned once and never stored. */
  readonly secret: string;
  readonly record: CredentialRecord;
}

export interface Page<T> {
  readonly data: T[];
  readonly next_cursor: string | null;
}

function nowIso(): string {
  return new Date().toISOString();
}

function expiry(days: number | undefined): string | null {
  return days === undefined ? null : new Date(Date.now() + days * 86_400_000).toISOString();
}

/** The key of a live agent key in the org index (IdentityRepo.indexAgentKeys). */
const agentKeyIndex = (orgId: string, hash: string): string => `ak:${orgId}:${hash}`;
/** Present once the org index of agent keys has been built. */
const AGENT_KEY_INDEX_BUILT = 'meta:agent-key-index';
/** The key of a live credential in the subject index (IdentityRepo.indexSubjects). */
const subjectIndex = (subjectId: string, hash: string): string => `sc:${subjectId}:${hash}`;
const SUBJECT_INDEX_BUILT = 'meta:subject-index';
/** A user's key in the index of addresses: unique per org, in any case. */
const emailKey = (orgId: string, email: string): string[] => ['e', orgId, email.toLowerCase()];
/** An org's key in the index of names (exact). */
const orgNameKey = (name: string): string[] => ['n', name];
const IDENTITY_INDEX_BUILT = ['built'];
const HIGH = '\uffff';
/**
 * Live (unrevoked, unexpired) credentials one user or agent may hold. Far more than rotation
 * needs; it bounds what one caller (any requester can mint its own tokens) can add to the store
 * and to every sidecar snapshot of its org.
 */
export const MAX_LIVE_CREDENTIALS = 100;

/** A stored credential and the hash (of its secret) it is stored under. */
export interface StoredCredential {
  readonly hash: string;
  readonly record: CredentialRecord;
}

/** Whether a credential stopped authenticating at or before `before` (ms): revoked, or expired, by then. */
function endedBy(c: CredentialRecord, before: number): boolean {
  return (
    (c.revoked_at !== null && Date.parse(c.revoked_at) <= before) ||
    (c.expires_at !== null && Date.parse(c.expires_at) <= before)
  );
}

/**
 * Orgs, users, agents and credentials in LMDB. `generation` grows on every change that can alter
 * who a credential resolves to, so caches in front of `authenticate` know when to drop entries.
 */
export class IdentityRepo {
  generation = 0;
  /** Changes per org (`generation` counts them all): see OrgGenerations. */
  readonly orgGenerations = new OrgGenerations();

  constructor(private readonly store: Store) {
    this.indexAgentKeys();
    this.indexSubjects();
    this.indexNames();
  }

  /**
   * The indexes of org names and of users' addresses per org (`identityIndex`), so creating an
   * org or a user, and listing an org's users, read one key or one org's range instead of every
   * record of the deployment inside a write transaction. Built once from the records when a
   * store written before them opens.
   */
  private indexNames(): void {
    const { identityIndex } = this.store;
    if (identityIndex.get(IDENTITY_INDEX_BUILT) !== undefined) return;
    this.store.root.transactionSync(() => {
      for (const { value } of this.store.orgs.getRange()) {
        const o = value as OrgRecord;
        identityIndex.putSync(orgNameKey(o.name), o.org_id);
      }
      for (const { value } of this.store.users.getRange()) {
        const u = value as UserRecord;
        identityIndex.putSync(emailKey(u.org_id, u.email), u.user_id);
      }
      identityIndex.putSync(IDENTITY_INDEX_BUILT, 1);
    });
  }

  /**
   * The index of live credentials by subject (`sc:<user or agent>:<hash>` → credential id), for
   * the cap on live credentials per subject (MAX_LIVE_CREDENTIALS). Built once from the records
   * when a store written before it opens.
   */
  private indexSubjects(): void {
    const { credentials } = this.store;
    if (credentials.get(SUBJECT_INDEX_BUILT) !== undefined) return;
    this.store.root.transactionSync(() => {
      for (const { key, value } of credentials.getRange()) {
        const c = value as CredentialRecord | string;
        if (typeof c === 'string' || c.revoked_at !== null) continue;
        credentials.putSync(subjectIndex(c.subject_id, key as string), c.credential_id);
      }
      credentials.putSync(SUBJECT_INDEX_BUILT, 'sc');
    });
  }

  /** How many unrevoked, unexpired credentials `subjectId` holds (read inside the issuing transaction). */
  private liveCredentials(subjectId: string, now: number): number {
    const { credentials } = this.store;
    const prefix = subjectIndex(subjectId, '');
    let n = 0;
    for (const key of credentials.getKeys({ start: prefix, end: `${prefix}\uffff` })) {
      const c = credentials.get((key as string).slice(prefix.length)) as CredentialRecord | undefined;
      if (c === undefined || c.subject_id !== subjectId || c.revoked_at !== null) continue;
      if (c.expires_at !== null && Date.parse(c.expires_at) <= now) continue;
      n++;
    }
    return n;
  }

  /**
   * The index of live agent keys by org (`ak:<org>:<hash>` → credential id), so a sidecar
   * snapshot of one org reads that org's keys, not every credential of the deployment (each
   * identity change rebuilt it by a scan of them all, revoked ones included). Built once from the
   * records when a store written before it opens.
   */
  private indexAgentKeys(): void {
    const { credentials } = this.store;
    if (credentials.get(AGENT_KEY_INDEX_BUILT) !== undefined) return;
    this.store.root.transactionSync(() => {
      for (const { key, value } of credentials.getRange()) {
        const c = value as CredentialRecord | string;
        if (typeof c === 'string' || c.kind !== 'agent' || c.revoked_at !== null) continue;
        credentials.putSync(agentKeyIndex(c.org_id, key as string), c.credential_id);
      }
      credentials.putSync(AGENT_KEY_INDEX_BUILT, 'ak');
    });
  }

  private bump(orgId: string): void {
    this.generation++;
    this.orgGenerations.bump(orgId);
  }

  // ---- orgs
  /** The org, unless it does not exist or was deleted (see `orgRecord` for a tombstone). */
  getOrg(orgId: string): OrgRecord | undefined {
    const o = this.store.orgs.get(orgId) as OrgRecord | undefined;
    return o === undefined || o.deleted_at !== undefined ? undefined : o;
  }

  /** The org's record, a deleted org's tombstone included. */
  orgRecord(orgId: string): OrgRecord | undefined {
    return this.store.orgs.get(orgId);
  }

  createOrg(name: string, orgId = `org_${newId('', 16)}`): OrgRecord {
    const record: OrgRecord = { org_id: orgId, name, created_at: nowIso() };
    this.store.root.transactionSync(() => {
      if (this.store.identityIndex.get(orgNameKey(name)) !== undefined)
        throw new ServiceError('conflict', `an org named "${name}" exists`);
      if (this.store.orgs.get(orgId) !== undefined) throw new ServiceError('conflict', `org ${orgId} exists`);
      this.store.orgs.putSync(orgId, record);
      this.store.identityIndex.putSync(orgNameKey(name), orgId);
    });
    return record;
  }

  /** Every org; deleted ones (tombstones) only with `includeDeleted`. */
  listOrgs(includeDeleted = false): OrgRecord[] {
    return [...this.store.orgs.getRange()]
      .map((e) => e.value as OrgRecord)
      .filter((o) => includeDeleted || o.deleted_at === undefined);
  }

  /**
   * The first step of deleting an org, in one transaction: its record becomes a tombstone
   * (`deleted_at`, `deleted_by`; its name is released, its id stays taken), and its users (with
   * their addresses' index entries), agents (with their names) and every credential of the org
   * (agent keys and personal access tokens, revoked ones included, with their index entries) are
   * deleted. From its commit nothing of the org authenticates. A tombstone whose deletion did not
   * complete (no `removed`) is taken again, so a deletion cut short is finished by the next one.
   * 404 when the org does not exist or its deletion completed.
   */
  retireOrg(
    orgId: string,
    deletedBy: string,
  ): {
    record: OrgRecord;
    userIds: string[];
    removed: { users: number; agents: number; agent_keys: number; tokens: number };
  } {
    const { orgs, users, credentials, agents, agentNames, identityIndex } = this.store;
    const removed = { users: 0, agents: 0, agent_keys: 0, tokens: 0 };
    const userIds: string[] = [];
    let record: OrgRecord | undefined;
    this.store.root.transactionSync(() => {
      const found = orgs.get(orgId) as OrgRecord | undefined;
      if (found === undefined || found.removed !== undefined)
        throw new ServiceError('not_found', `org ${orgId} does not exist`);
      record =
        found.deleted_at !== undefined ? found : { ...found, deleted_at: nowIso(), deleted_by: deletedBy };
      orgs.putSync(orgId, record);
      if (identityIndex.get(orgNameKey(found.name)) === orgId)
        identityIndex.removeSync(orgNameKey(found.name));
      for (const { key, value } of identityIndex.getRange({ start: ['e', orgId], end: ['e', orgId, HIGH] })) {
        identityIndex.removeSync(key);
        const u = users.get(value as string) as UserRecord | undefined;
        if (u === undefined || u.org_id !== orgId) continue;
        users.removeSync(u.user_id);
        userIds.push(u.user_id);
        removed.users++;
      }
      for (const { key, value } of credentials.getRange()) {
        const c = value as CredentialRecord | string;
        if (typeof c === 'string' || c.org_id !== orgId) continue;
        credentials.removeSync(key);
        if (credentials.get(`id:${c.credential_id}`) === key) credentials.removeSync(`id:${c.credential_id}`);
        credentials.removeSync(subjectIndex(c.subject_id, key as string));
        if (c.kind === 'agent') {
          credentials.removeSync(agentKeyIndex(orgId, key as string));
          removed.agent_keys++;
        } else removed.tokens++;
      }
      for (const { key, value } of agentNames.getRange({ start: [orgId], end: [orgId, HIGH] })) {
        agentNames.removeSync(key);
        if (agents.removeSync(value as string)) removed.agents++;
      }
    });
    this.bump(orgId);
    return { record: record as OrgRecord, userIds, removed };
  }

  /** The last step of deleting an org: the tombstone records what was removed (the deletion is complete). */
  completeOrgDeletion(orgId: string, removed: Readonly<Record<string, number>>): OrgRecord {
    let record: OrgRecord | undefined;
    this.store.root.transactionSync(() => {
      const found = this.store.orgs.get(orgId) as OrgRecord;
      record = { ...found, removed };
      this.store.orgs.putSync(orgId, record);
    });
    return record as OrgRecord;
  }

  // ---- users
  getUser(userId: string): UserRecord | undefined {
    return this.store.users.get(userId);
  }

  /** The org's users, by address (read through the org's range of the address index). */
  usersOf(orgId: string): UserRecord[] {
    const out: UserRecord[] = [];
    const range = this.store.identityIndex.getRange({ start: ['e', orgId], end: ['e', orgId, HIGH] });
    for (const { value } of range) {
      const u = this.store.users.get(value as string) as UserRecord | undefined;
      if (u !== undefined && u.org_id === orgId) out.push(u);
    }
    return out;
  }

  createUser(orgId: string, email: string, role: Role, userId = newId('usr_', 16)): UserRecord {
    const record: UserRecord = { user_id: userId, org_id: orgId, email, role, created_at: nowIso() };
    this.store.root.transactionSync(() => {
      assertOrgLive(this.store, orgId);
      if (this.store.identityIndex.get(emailKey(orgId, email)) !== undefined)
        throw new ServiceError('conflict', `a user with email ${email} exists in this org`);
      this.store.users.putSync(userId, record);
      this.store.identityIndex.putSync(emailKey(orgId, email), userId);
    });
    this.bump(orgId);
    return record;
  }

  // ---- credentials
  private issue(
    kind: CredentialRecord['kind'],
    orgId: string,
    subjectId: string,
    opts: {
      name?: string | undefined;
      role?: Role | null;
      expiresDays?: number | undefined;
      /** The latest expiry allowed (the issuing credential's own), whatever `expiresDays` says. */
      notAfter?: string | null | undefined;
      secret?: string;
    },
  ): IssuedCredential {
    const secret = opts.secret ?? (kind === 'pat' ? newPat() : newAgentKey());
    let expiresAt = expiry(opts.expiresDays);
    const notAfter = opts.notAfter ?? null;
    if (notAfter !== null && (expiresAt === null || Date.parse(expiresAt) > Date.parse(notAfter)))
      expiresAt = notAfter;
    const record: CredentialRecord = {
      kind,
      credential_id: newId(kind === 'pat' ? 'tok_' : 'key_', 16),
      org_id: orgId,
      subject_id: subjectId,
      name: opts.name ?? null,
      role: opts.role ?? null,
      last4: secret.slice(-4),
      created_at: nowIso(),
      expires_at: expiresAt,
      revoked_at: null,
    };
    const hash = hashCredential(secret);
    this.store.root.transactionSync(() => {
      assertOrgLive(this.store, orgId);
      if (this.liveCredentials(subjectId, Date.now()) >= MAX_LIVE_CREDENTIALS)
        throw new ServiceError(
          'conflict',
          `${kind === 'pat' ? 'user' : 'agent'} ${subjectId} already holds ${MAX_LIVE_CREDENTIALS} live ${kind === 'pat' ? 'tokens' : 'keys'}: revoke one to issue another`,
        );
      this.store.credentials.putSync(hash, record);
      this.store.credentials.putSync(`id:${record.credential_id}`, hash);
      this.store.credentials.putSync(subjectIndex(subjectId, hash), record.credential_id);
      if (kind === 'agent') this.store.credentials.putSync(agentKeyIndex(orgId, hash), record.credential_id);
    });
    this.bump(orgId);
    return { secret, record };
  }

  createPat(
    user: UserRecord,
    opts: {
      name?: string | undefined;
      role?: Role | undefined;
      expiresDays?: number | undefined;
      notAfter?: string | null | undefined;
      secret?: string;
    },
  ): IssuedCredential {
    const role = opts.role === undefined ? user.role : minRole(user.role, opts.role);
    return this.issue('pat', user.org_id, user.user_id, { ...opts, role });
  }

  createAgentKey(
    agent: AgentRecord,
    opts: { name?: string | undefined; expiresDays?: number | undefined },
  ): IssuedCredential {
    return this.issue('agent', agent.org_id, agent.agent_uuid, opts);
  }

  getCredential(credentialId: string): CredentialRecord | undefined {
    const hash = this.store.credentials.get(`id:${credentialId}`) as string | undefined;
    return hash === undefined ? undefined : this.store.credentials.get(hash);
  }

  revokeCredential(credentialId: string): CredentialRecord | undefined {
    const hash = this.store.credentials.get(`id:${credentialId}`) as string | undefined;
    if (hash === undefined) return undefined;
    const current = this.store.credentials.get(hash) as CredentialRecord | undefined;
    if (!current) return undefined;
    const revoked: CredentialRecord = { ...current, revoked_at: current.revoked_at ?? nowIso() };
    this.store.root.transactionSync(() => {
      this.store.credentials.putSync(hash, revoked);
      this.store.credentials.removeSync(subjectIndex(current.subject_id, hash));
      if (current.kind === 'agent') this.store.credentials.removeSync(agentKeyIndex(current.org_id, hash));
    });
    this.bump(current.org_id);
    return revoked;
  }

  /**
   * One page of the scan for credentials that stopped authenticating (revoked, or expired) at or
   * before `before`: the `batch` keys of the credentials table after `after` (every key the first
   * time), what they hold that ended, and the key to go on after (undefined at the end).
   */
  endedCredentials(
    before: number,
    after: string | undefined,
    batch: number,
  ): { found: StoredCredential[]; next: string | undefined } {
    const found: StoredCredential[] = [];
    let last: string | undefined;
    let n = 0;
    const range = after === undefined ? { limit: batch } : { start: after, limit: batch + 1 }; // start is inclusive
    for (const { key, value } of this.store.credentials.getRange(range)) {
      if (key === after) continue;
      last = key as string;
      n++;
      const c = value as CredentialRecord | string;
      // Index entries and marks hold strings; a record is an object.
      if (typeof c !== 'string' && endedBy(c, before)) found.push({ hash: key as string, record: c });
    }
    return { found, next: n < batch ? undefined : last };
  }

  /**
   * Deletes credentials (found by endedCredentials) that ended at or before `before`, each with
   * its `id:`, subject (`sc:`) and org (`ak:`) index entries, in one transaction. Each is read
   * again first: only one still stored and still ended goes. Returns what was deleted. A deleted
   * credential authenticates nothing: its hash no longer resolves.
   */
  purgeCredentials(found: readonly StoredCredential[], before: number): StoredCredential[] {
    const { credentials } = this.store;
    const purged: StoredCredential[] = [];
    this.store.root.transactionSync(() => {
      for (const { hash } of found) {
        const c = credentials.get(hash) as CredentialRecord | string | undefined;
        if (c === undefined || typeof c === 'string' || !endedBy(c, before)) continue;
        credentials.removeSync(hash);
        if (credentials.get(`id:${c.credential_id}`) === hash)
          credentials.removeSync(`id:${c.credential_id}`);
        credentials.removeSync(subjectIndex(c.subject_id, hash));
        if (c.kind === 'agent') credentials.removeSync(agentKeyIndex(c.org_id, hash));
        purged.push({ hash, record: c });
      }
    });
    for (const org of new Set(purged.map((p) => p.record.org_id))) this.bump(org);
    return purged;
  }

  /** The org's agent keys that are neither revoked nor expired, with the hashes they are stored under. */
  *agentCredentials(orgId: string): Generator<{ hash: string; record: CredentialRecord }> {
    const { credentials } = this.store;
    const prefix = agentKeyIndex(orgId, '');
    for (const key of credentials.getKeys({ start: prefix, end: `${prefix}\uffff` })) {
      const hash = (key as string).slice(prefix.length);
      const c = credentials.get(hash) as CredentialRecord | undefined;
      if (c === undefined || c.kind !== 'agent' || c.org_id !== orgId || c.revoked_at !== null) continue;
      // An expired key authenticates nothing: not sent to sidecars either.
      if (c.expires_at !== null && Date.parse(c.expires_at) <= Date.now()) continue;
      yield { hash, record: c };
    }
  }

  /** Resolves a presented secret to a principal, or undefined (unknown, revoked, expired). */
  authenticate(secret: string, now = Date.now()): Principal | undefined {
    const record = this.store.credentials.get(hashCredential(secret)) as CredentialRecord | undefined;
    if (!record || record.revoked_at !== null) return undefined;
    if (record.expires_at !== null && Date.parse(record.expires_at) <= now) return undefined;
    if (record.kind === 'agent') {
      const agent = this.getAgent(record.subject_id);
      if (!agent) return undefined;
      return {
        kind: 'agent',
        id: agent.agent_uuid,
        org_id: agent.org_id,
        role: null,
        agent_id: agent.agent_id,
        credential_id: record.credential_id,
        email: null,
      };
    }
    const user = this.getUser(record.subject_id);
    if (!user) return undefined;
    return {
      kind: 'user',
      id: user.user_id,
      org_id: user.org_id,
      role: record.role === null ? user.role : minRole(user.role, record.role),
      agent_id: null,
      credential_id: record.credential_id,
      email: user.email,
    };
  }

  /**
   * What the org's records hold of a person besides their user record (a DSAR's): their personal
   * access tokens, revoked ones included (no secret: name, role, dates, last four), and the agents
   * whose `owner_email` is one of `emails` (lower-cased; matched in any case). What
   * `eraseSubject` erases.
   */
  subjectRecords(
    orgId: string,
    userIds: ReadonlySet<string>,
    emails: readonly string[],
  ): { tokens: CredentialRecord[]; agents: AgentRecord[] } {
    const tokens: CredentialRecord[] = [];
    const agents: AgentRecord[] = [];
    if (userIds.size > 0)
      for (const { value } of this.store.credentials.getRange()) {
        const c = value as CredentialRecord | string;
        if (typeof c !== 'string' && c.kind === 'pat' && c.org_id === orgId && userIds.has(c.subject_id))
          tokens.push(c);
      }
    const owners = new Set(emails);
    if (owners.size > 0)
      for (const { value } of this.store.agents.getRange()) {
        const a = value as AgentRecord;
        if (a.org_id === orgId && a.owner_email !== null && owners.has(a.owner_email.toLowerCase()))
          agents.push(a);
      }
    return { tokens, agents };
  }

  /**
   * Erases what the org's records hold of a person (GDPR erasure): `users` are deleted with
   * their personal access tokens, and agents whose `owner_email` is one of `emails` (lower-cased;
   * matched in any case) lose it. One transaction; returns what it erased.
   */
  eraseSubject(
    orgId: string,
    users: readonly UserRecord[],
    emails: readonly string[],
  ): { users: number; agents: number; tokens: number } {
    const ids = new Set(users.filter((u) => u.org_id === orgId).map((u) => u.user_id));
    const owners = new Set(emails);
    const erased = { users: 0, agents: 0, tokens: 0 };
    this.store.root.transactionSync(() => {
      for (const u of users) {
        if (u.org_id !== orgId || !this.store.users.removeSync(u.user_id)) continue;
        this.store.identityIndex.removeSync(emailKey(orgId, u.email));
        erased.users++;
      }
      for (const { key, value } of this.store.credentials.getRange()) {
        const c = value as CredentialRecord | string;
        if (typeof c === 'string' || c.kind !== 'pat' || c.org_id !== orgId || !ids.has(c.subject_id))
          continue;
        this.store.credentials.removeSync(key);
        this.store.credentials.removeSync(`id:${c.credential_id}`);
        this.store.credentials.removeSync(subjectIndex(c.subject_id, key as string));
        erased.tokens++;
      }
      if (owners.size > 0)
        for (const { key, value } of this.store.agents.getRange()) {
          const a = value as AgentRecord;
          if (a.org_id !== orgId || a.owner_email === null || !owners.has(a.owner_email.toLowerCase()))
            continue;
          this.store.agents.putSync(key, { ...a, owner_email: null });
          erased.agents++;
        }
    });
    this.bump(orgId);
    return erased;
  }

  // ---- agents
  getAgent(agentUuid: string): AgentRecord | undefined {
    return this.store.agents.get(agentUuid);
  }

  getAgentByName(orgId: string, agentId: string): AgentRecord | undefined {
    const uuid = this.store.agentNames.get([orgId, agentId]) as string | undefined;
    return uuid === undefined ? undefined : this.getAgent(uuid);
  }

  onboardAgent(
    orgId: string,
    input: {
      agent_id: string;
      owner_email?: string | undefined;
      description?: string | undefined;
      framework?: string | undefined;
      intended_use?: string | undefined;
    },
  ): AgentRecord {
    const record: AgentRecord = {
      agent_uuid: randomUUID(),
      agent_id: input.agent_id,
      org_id: orgId,
      owner_email: input.owner_email ?? null,
      description: input.description ?? null,
      framework: input.framework ?? null,
      intended_use: input.intended_use ?? null,
      created_at: nowIso(),
    };
    this.store.root.transactionSync(() => {
      assertOrgLive(this.store, orgId);
      if (this.store.agentNames.get([orgId, input.agent_id]) !== undefined) {
        throw new ServiceError('conflict', `agent "${input.agent_id}" already exists in this org`, {
          param: 'agent_id',
        });
      }
      this.store.agents.putSync(record.agent_uuid, record);
      this.store.agentNames.putSync([orgId, input.agent_id], record.agent_uuid);
    });
    this.bump(orgId);
    return record;
  }

  /** The org's agents ordered by agent_id; the cursor is the last agent_id of the previous page. */
  listAgents(orgId: string, limit: number, cursor: string | undefined): Page<AgentRecord> {
    const data: AgentRecord[] = [];
    const range = this.store.agentNames.getRange({
      start: cursor === undefined ? [orgId] : [orgId, cursor],
      end: [orgId, '\uffff'],
    });
    for (const { key, value } of range) {
      const name = (key as [string, string])[1];
      if (cursor !== undefined && name === cursor) continue;
      const agent = this.getAgent(value as string);
      if (agent) data.push(agent);
      if (data.length > limit) break;
    }
    const more = data.length > limit;
    if (more) data.length = limit;
    return { data, next_cursor: more ? (data[data.length - 1]?.agent_id ?? null) : null };
  }
}
