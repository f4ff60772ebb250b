import type { AuditEvent, AuditInput, AuditRef, AuditSink } from '../audit/types.js';
import { checkPersonalField } from '../core/chain/commitment.js';
import { GENESIS, hashEventUnchecked } from '../core/chain/event.js';
import { ServiceError } from '../core/errors.js';
import { lastFour } from '../crypto/vault.js';
import type { IdentityRepo } from '../identity/repo.js';
import type {
  SnapshotCredential,
  SnapshotDoc,
  SnapshotPolicy,
  SnapshotProvider,
  SyncState,
} from '../snapshot/wire.js';
import type { Store } from '../store/db.js';
import type { PolicyRepo } from '../store/policies.js';
import type { SettingsRepo } from '../store/settings.js';
import { hashCredential, newId, newSidecarToken, SIDECAR_TOKEN_PREFIX, sha256Hex } from '../util/ids.js';

export interface SidecarRecord {
  readonly sidecar_id: string;
  readonly org_id: string;
  readonly name: string;
  readonly last4: string;
  readonly created_at: string;
  readonly created_by: string;
  readonly revoked_at: string | null;
}

/** A snapshot's body without its time, and the ETag that names it. */
interface BuiltSnapshot {
  readonly key: string;
  readonly etag: string;
  readonly content: Omit<SnapshotDoc, 'sidecar_id' | 'generated_at'>;
}

/** What the ingest of one batch checked and will append, before anything is written. */
interface Checked {
  readonly inputs: AuditInput[];
  readonly state: SyncState;
}

/**
 * What a sidecar records: the gateway's events. Anything else (an erasure, an admin change) is
 * the control plane's own to write; taking it from a sidecar would let a sidecar token forge the
 * authority for a tombstone.
 */
export const SIDECAR_EVENT_TYPES: ReadonlySet<string> = new Set([
  'llm_call',
  'embedding_call',
  'pii_detected',
  'idempotent_replay',
]);

const SIDECAR_KEY = 'sc';
const TOKEN_KEY = 'tok';
const STATE_KEY = 'st';

/**
 * The control plane's side of the sidecars (DESIGN A.1, B "Sidecar WAL"): their tokens, the
 * snapshot each pulls, and the ingest of their logs into the org chain, where the control plane
 * is the sidecar log's witness: an entry is taken in only when it extends what was taken before
 * (same epoch, next index, linked to the last hash, its hash recomputed), so a rollback, a fork
 * or a gap is refused with 409 and nothing of the batch is written. Ingest is idempotent on
 * (sidecar, epoch, index): the org chain's events and the sidecar's state are written in one
 * transaction, so an entry sent again after a lost answer is skipped, never recorded twice.
 */
export class SidecarDesk {
  readonly #store: Store;
  readonly #identity: IdentityRepo;
  readonly #settings: SettingsRepo;
  readonly #policies: PolicyRepo;
  readonly #audit: AuditSink;
  /** Per org: the last snapshot built and the generations it was built at. */
  readonly #snapshots = new Map<string, BuiltSnapshot>();
  /**
   * Per (sidecar, epoch): the state including batches still committing, so a second batch that
   * arrives meanwhile is checked against the first. Dropped when a commit fails.
   */
  readonly #states = new Map<string, SyncState>();

  constructor(deps: {
    store: Store;
    identity: IdentityRepo;
    settings: SettingsRepo;
    policies: PolicyRepo;
    audit: AuditSink;
  }) {
    this.#store = deps.store;
    this.#identity = deps.identity;
    this.#settings = deps.settings;
    this.#policies = deps.policies;
    this.#audit = deps.audit;
  }

  // ---- tokens

  /** Creates a sidecar of the org; its token is returned once and stored as a hash. */
  async create(
    orgId: string,
    name: string,
    actor: string,
  ): Promise<{ record: SidecarRecord; token: string }> {
    const token = newSidecarToken();
    const record: SidecarRecord = {
      sidecar_id: newId('sc_', 16),
      org_id: orgId,
      name,
      last4: lastFour(token),
      created_at: new Date().toISOString(),
      created_by: actor,
      revoked_at: null,
    };
    await this.#store.writer.enqueue(() => {
      this.#store.sidecars.putSync([SIDECAR_KEY, record.sidecar_id], record);
      this.#store.sidecars.putSync([TOKEN_KEY, hashCredential(token)], record.sidecar_id);
    });
    return { record, token };
  }

  get(orgId: string, sidecarId: string): SidecarRecord | undefined {
    const r = this.#store.sidecars.get([SIDECAR_KEY, sidecarId]) as SidecarRecord | undefined;
    return r?.org_id === orgId ? r : undefined;
  }

  /** The org's sidecars, oldest first, each with the state of its newest log. */
  list(orgId: string): Array<SidecarRecord & { sync: SyncState | null }> {
    const out: Array<SidecarRecord & { sync: SyncState | null }> = [];
    for (const { value } of this.#store.sidecars.getRange({
      start: [SIDECAR_KEY],
      end: [SIDECAR_KEY, '\uffff'],
    })) {
      const r = value as SidecarRecord;
      if (r.org_id === orgId) out.push({ ...r, sync: this.#newestState(r.sidecar_id) });
    }
    return out.sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0));
  }

  async revoke(orgId: string, sidecarId: string): Promise<SidecarRecord> {
    const r = this.get(orgId, sidecarId);
    if (r === undefined) throw new ServiceError('not_found', `sidecar ${sidecarId} not found`);
    if (r.revoked_at !== null) return r;
    const revoked = { ...r, revoked_at: new Date().toISOString() };
    await this.#store.writer.enqueue(() => this.#store.sidecars.putSync([SIDECAR_KEY, sidecarId], revoked));
    return revoked;
  }

  /** The sidecar a presented token belongs to; 401 when it is unknown or revoked. */
  authenticate(secret: string | undefined): SidecarRecord {
    if (secret === undefined || !secret.startsWith(SIDECAR_TOKEN_PREFIX))
      throw new ServiceError(
        'unauthenticated',
        'the sync API needs a sidecar token (Authorization: Bearer gk_sc_…)',
        {
          headers: { 'www-authenticate': 'Bearer' },
        },
      );
    const id = this.#store.sidecars.get([TOKEN_KEY, hashCredential(secret)]) as string | undefined;
    const r = id === undefined ? undefined : (this.#store.sidecars.get([SIDECAR_KEY, id]) as SidecarRecord);
    if (r === undefined || r.revoked_at !== null || this.#identity.getOrg(r.org_id) === undefined)
      throw new ServiceError('unauthenticated', 'the sidecar token is not valid (unknown or revoked)', {
        headers: { 'www-authenticate': 'Bearer error="invalid_token"' },
      });
    return r;
  }

  // ---- snapshot

  /** The org's snapshot for `sidecar`, and its ETag (unchanged while nothing in it changed). */
  snapshot(sidecar: SidecarRecord): { etag: string; doc: SnapshotDoc } {
    const org = sidecar.org_id;
    const key = `${this.#identity.generation}:${this.#settings.generation}:${this.#policies.generation}`;
    let built = this.#snapshots.get(org);
    if (built?.key !== key) {
      built = this.#build(org, key);
      this.#snapshots.set(org, built);
    }
    return {
      etag: built.etag,
      doc: { ...built.content, sidecar_id: sidecar.sidecar_id, generated_at: new Date().toISOString() },
    };
  }

  #build(org: string, key: string): BuiltSnapshot {
    const agents = [];
    for (let cursor: string | undefined, first = true; first || cursor !== undefined; first = false) {
      const page = this.#identity.listAgents(org, 1000, cursor);
      agents.push(...page.data);
      cursor = page.next_cursor ?? undefined;
    }
    const credentials: SnapshotCredential[] = [];
    for (const { hash, record } of this.#identity.agentCredentials(org)) {
      credentials.push({
        hash,
        credential_id: record.credential_id,
        agent_uuid: record.subject_id,
        expires_at: record.expires_at,
      });
    }
    const providers: SnapshotProvider[] = this.#settings.providers(org).map((p) => ({
      name: p.name,
      base_url: p.base_url,
      models: p.models,
      api_key: p.key_ref === null ? null : (this.#settings.openSecret(org, p.key_ref) ?? null),
    }));
    const policies: SnapshotPolicy[] = [];
    for (const a of this.#policies.allAssignments(org)) {
      const versionNo = this.#policies.get(org, a.policy_id)?.active_version ?? null;
      if (versionNo === null) continue;
      const v = this.#policies.version(org, a.policy_id, versionNo);
      if (v === undefined) continue;
      policies.push({
        scope_type: a.scope_type,
        scope_id: a.scope_id,
        policy_id: a.policy_id,
        version_no: versionNo,
        rules: v.rules,
      });
    }
    const content = { v: 1 as const, org_id: org, agents, credentials, providers, policies };
    return { key, etag: `"${sha256Hex(JSON.stringify(content))}"`, content };
  }

  // ---- ingest

  state(sidecar: SidecarRecord, epoch: string): SyncState {
    const pending = this.#states.get(`${sidecar.sidecar_id}\0${epoch}`);
    if (pending !== undefined) return pending;
    const stored = this.#store.sidecars.get([STATE_KEY, sidecar.sidecar_id, epoch]) as SyncState | undefined;
    return { epoch, index: stored?.index ?? 0, hash: stored?.hash ?? null };
  }

  #newestState(sidecarId: string): SyncState | null {
    let newest: SyncState | null = null;
    for (const { value } of this.#store.sidecars.getRange({
      start: [STATE_KEY, sidecarId],
      end: [STATE_KEY, sidecarId, '\uffff'],
    })) {
      const s = value as SyncState & { at?: string };
      if (newest === null || (s.at ?? '') > ((newest as { at?: string }).at ?? '')) newest = s;
    }
    return newest;
  }

  /**
   * Takes in a batch of the sidecar log `(sidecar, epoch)`: every entry checked first, then the
   * new ones appended to the org chain with their `origin`, with the state in the same commit.
   */
  async ingest(
    sidecar: SidecarRecord,
    epoch: string,
    entries: readonly unknown[],
  ): Promise<SyncState & { ingested: number }> {
    const stateKey = `${sidecar.sidecar_id}\0${epoch}`;
    const checked = this.#check(sidecar, epoch, entries);
    if (checked.inputs.length === 0) return { ...checked.state, ingested: 0 };
    // Synchronous from here to the state's write: the events and the state share one commit.
    const appends: Promise<AuditRef>[] = [];
    for (const input of checked.inputs) appends.push(this.#audit.append(input));
    const state = checked.state;
    this.#states.set(stateKey, state);
    const at = new Date().toISOString();
    const written = this.#store.writer.enqueue(() =>
      this.#store.sidecars.putSync([STATE_KEY, sidecar.sidecar_id, epoch], { ...state, at }),
    );
    try {
      await Promise.all([...appends, written]);
    } catch (err) {
      this.#states.delete(stateKey);
      throw err;
    }
    if (this.#states.get(stateKey) === state) this.#states.delete(stateKey);
    return { ...state, ingested: checked.inputs.length };
  }

  #check(sidecar: SidecarRecord, epoch: string, entries: readonly unknown[]): Checked {
    const before = this.state(sidecar, epoch);
    let index = before.index;
    let hash = before.hash ?? GENESIS;
    const inputs: AuditInput[] = [];
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i] as AuditEvent;
      const at = `entries[${i}]`;
      if (typeof e !== 'object' || e === null || Array.isArray(e))
        throw new ServiceError('invalid_request', `${at} must be an event object`, { param: at });
      if (e.org_id !== sidecar.org_id)
        throw new ServiceError('forbidden', `${at} belongs to another org than this sidecar's`, {
          param: at,
        });
      if (e._chain_version !== 2 || !Number.isSafeInteger(e.seq) || e.seq < 1 || typeof e.hash !== 'string')
        throw new ServiceError('invalid_request', `${at} is not an event of a sidecar log`, { param: at });
      if (!SIDECAR_EVENT_TYPES.has(e.event_type))
        throw new ServiceError(
          'forbidden',
          `${at}: a sidecar does not record ${String(e.event_type)} events`,
          {
            param: at,
          },
        );
      if (e.seq <= index) {
        // Sent before: only the last one taken in can be compared (its hash is kept).
        if (e.seq === before.index && e.hash !== before.hash && inputs.length === 0)
          throw new ServiceError(
            'conflict',
            `${at}: index ${e.seq} of this sidecar log was taken in with another hash (a fork or a rollback)`,
            { param: at },
          );
        continue;
      }
      if (e.seq !== index + 1)
        throw new ServiceError(
          'conflict',
          `${at}: expected index ${index + 1} of this sidecar log, got ${e.seq}`,
          {
            param: at,
          },
        );
      if (e.prev_hash !== hash)
        throw new ServiceError(
          'conflict',
          `${at}: index ${e.seq} does not link to the entry taken in before it (a fork or a rollback)`,
          { param: at },
        );
      let recomputed: string;
      try {
        recomputed = hashEventUnchecked(e.prev_hash, e);
      } catch {
        recomputed = '';
      }
      if (recomputed !== e.hash)
        throw new ServiceError('invalid_request', `${at}: the entry's hash does not match its content`, {
          param: at,
        });
      const personal: Record<string, unknown> = {};
      const stored = (e.personal ?? {}) as Record<string, { value?: unknown }>;
      for (const path of Object.keys(stored)) {
        if (checkPersonalField(path, stored[path]) === 'mismatch')
          throw new ServiceError(
            'invalid_request',
            `${at}: personal field ${path} does not match its commitment`,
            {
              param: at,
            },
          );
        personal[path] = stored[path]?.value;
      }
      inputs.push({
        org_id: sidecar.org_id,
        event_type: e.event_type,
        agent_id: e.agent_id,
        session_id: e.session_id,
        task_id: e.task_id,
        pipeline_id: e.pipeline_id,
        behavior_type: e.behavior_type,
        outcome: e.outcome,
        reason: e.reason,
        rule_id: e.rule_id,
        provider: e.provider,
        model: e.model,
        usage: e.usage,
        cost: e.cost,
        detections: e.detections,
        details: e.details ?? {},
        personal,
        origin: { sidecar_id: sidecar.sidecar_id, epoch, index: e.seq, hash: e.hash, ts: e.ts },
      });
      index = e.seq;
      hash = e.hash;
    }
    return { inputs, state: { epoch, index, hash: index === 0 ? null : hash } };
  }
}
