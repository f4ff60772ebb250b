import type { AuditEvent, AuditInput, AuditRef, AuditSink, SigningKeyDocument } from '../audit/types.js';
import { VerifyInputError, verifiersFromKeys } from '../audit/verify-file.js';
import { bytesEqual, fromHex, toHex } from '../core/chain/bytes.js';
import { checkpointOrigin, parseCheckpoint } from '../core/chain/checkpoint.js';
import { checkPersonalField } from '../core/chain/commitment.js';
import { GENESIS, hashEventUnchecked } from '../core/chain/event.js';
import { leafHashUnchecked, MerkleBuilder } from '../core/chain/merkle.js';
import { ServiceError } from '../core/errors.js';
import { NoteVerifyPool } from '../crypto/note-verify-pool.js';
import { lastFour } from '../crypto/vault.js';
import { orgDigest } from '../govern/revocation-list.js';
import type { IdentityRepo } from '../identity/repo.js';
import type {
  SnapshotCredential,
  SnapshotDoc,
  SnapshotPolicy,
  SnapshotProvider,
  SyncState,
} from '../snapshot/wire.js';
import type { Store } from '../store/db.js';
import { assertOrgLive } from '../store/org-tombstone.js';
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
  readonly content: Omit<SnapshotDoc, 'sidecar_id' | 'generated_at' | 'issuer'>;
}

/** What the ingest of one batch checked and will append, before anything is written. */
interface Checked {
  readonly inputs: AuditInput[];
  readonly state: LogState;
}

/** A sidecar log's state as kept: the public part, and the compact range of its Merkle tree. */
interface LogState extends SyncState {
  /** The perfect subtree roots over entries 1..index (hex, largest first): roots at later sizes. */
  readonly subtrees: readonly string[];
}

/** A sidecar log's public keys, registered once (`POST /api/sync/log`). */
interface LogRecord {
  readonly keys: ReadonlyArray<{ name: string; alg: string; key_id: string; public_key: string }>;
  readonly registered_at: string;
}

/** A seal of the sidecar log as shipped with its entries (`StoredSeal`'s `size` and `note`). */
interface ShippedSeal {
  readonly size: number;
  readonly note: string;
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
  'govern.decision',
  'govern.execution',
  'govern.execution_refused',
]);

const SIDECAR_KEY = 'sc';
const LOG_KEY = 'log';
const MANDATE_KEY = 'mk';
/** Mandate keys one registration may name (a sidecar's active key and its next one, with room to spare). */
const MAX_MANDATE_KEYS = 8;
/**
 * The body limit of `POST /api/sync/events` for a valid sidecar token (5 MiB for everything
 * else): a batch ends on a seal, and one entry alone can be larger than 5 MiB (a govern call's
 * arguments as large as its request was, tool calls of a provider answer of up to 64 MiB).
 */
export const SYNC_MAX_BODY_BYTES = 96 * 1024 * 1024;
/** A sidecar's mandate key not registered again for this long is no longer published. */
const MANDATE_KEY_TTL_MS = 24 * 3_600_000;
/** A key registered again sooner than this is not written again. */
const MANDATE_KEY_REFRESH_MS = 3_600_000;

interface MandateKeyRecord {
  readonly sidecar_id: string;
  readonly jwk: SidecarMandateJwk;
  readonly seen_at: string;
}
const KID = /^[A-Za-z0-9_-]{1,100}$/;
const ED25519_X = /^[A-Za-z0-9_-]{43}$/;

/** A sidecar's mandate public key as registered and published (an Ed25519 JWK). */
export interface SidecarMandateJwk {
  readonly kty: 'OKP';
  readonly crv: 'Ed25519';
  readonly x: string;
  readonly kid: string;
  readonly alg: 'EdDSA';
  readonly use: 'sig';
  /** As published: the SHA-256 (hex) of the org whose sidecar holds it (its mandates' `org`). */
  readonly org_sha256?: string;
}
const TOKEN_KEY = 'tok';
const STATE_KEY = 'st';
/** How long a revoked sidecar may still ship the log it holds (see `authenticate`). */
export const SHIP_AFTER_REVOKE_MS = 10 * 60_000;
/**
 * ['lo', epoch] → {sidecar_id, org_id}: the sidecar a log was first registered by. A log is kept
 * under that sidecar's id whichever of its org's sidecars ships it next (a token rotated on the
 * same data dir), so each entry is taken in once.
 */
const LOG_OWNER_KEY = 'lo';

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
  /** Snapshots built (for tests: one org's change must not rebuild another's). */
  snapshotBuilds = 0;
  /**
   * Per (sidecar, epoch): the state including batches still committing, so a second batch that
   * arrives meanwhile is checked against the first. Dropped when a commit fails.
   */
  readonly #states = new Map<string, LogState>();
  /** Checks the seals' signatures off the event loop. */
  readonly #notes = new NoteVerifyPool();

  readonly #issuer: () => string;
  #generation = 0;
  #mandateJwks: SidecarMandateJwk[] | undefined;
  #mandateKeyOrgs = new Map<string, string>();
  #mandateJwksAt = 0;

  constructor(deps: {
    store: Store;
    identity: IdentityRepo;
    settings: SettingsRepo;
    policies: PolicyRepo;
    audit: AuditSink;
    /** The control plane's base URL: the `iss` of every mandate, a sidecar's included. */
    issuer: () => string;
  }) {
    this.#issuer = deps.issuer;
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
      assertOrgLive(this.#store, orgId);
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
    // Its mandate keys leave the published set at once: what it signed no longer verifies.
    this.#mandateJwks = undefined;
    this.#generation++;
    return revoked;
  }

  /**
   * The org is being deleted: each of its sidecars not yet revoked is revoked (its record stays:
   * it names the logs it shipped into the org chain), and the token of every one of them is
   * deleted, in one transaction. Its mandate keys leave the published set at once. A sidecar of a
   * deleted org is refused already (`authenticate`: its org is gone); it learns so at its next
   * snapshot poll, forgets its snapshot and decides nothing more. Returns how many were revoked
   * and how many tokens went.
   */
  async retireOrg(orgId: string): Promise<{ revoked: number; tokens: number }> {
    const n = { revoked: 0, tokens: 0 };
    const now = new Date().toISOString();
    await this.#store.writer.enqueue(() => {
      const { sidecars } = this.#store;
      const ids = new Set<string>();
      for (const { value } of sidecars.getRange({ start: [SIDECAR_KEY], end: [SIDECAR_KEY, '\uffff'] })) {
        const r = value as SidecarRecord;
        if (r.org_id !== orgId) continue;
        ids.add(r.sidecar_id);
        if (r.revoked_at === null) {
          sidecars.putSync([SIDECAR_KEY, r.sidecar_id], { ...r, revoked_at: now });
          n.revoked++;
        }
      }
      for (const { key, value } of sidecars.getRange({ start: [TOKEN_KEY], end: [TOKEN_KEY, '\uffff'] }))
        if (ids.has(value as string)) {
          sidecars.removeSync(key);
          n.tokens++;
        }
    });
    this.#snapshots.delete(orgId);
    this.#mandateJwks = undefined;
    this.#generation++;
    return n;
  }

  /**
   * The tokens of sidecars revoked at or before `before` (ms), at most `limit`: each token's hash
   * and its sidecar. One token per sidecar, read in one pass of the token entries.
   */
  revokedTokens(before: number, limit: number): { hash: string; record: SidecarRecord }[] {
    const out: { hash: string; record: SidecarRecord }[] = [];
    for (const { key, value } of this.#store.sidecars.getRange({
      start: [TOKEN_KEY],
      end: [TOKEN_KEY, '\uffff'],
    })) {
      if (out.length >= limit) break;
      const r = this.#store.sidecars.get([SIDECAR_KEY, value as string]) as SidecarRecord | undefined;
      if (r?.revoked_at != null && Date.parse(r.revoked_at) <= before)
        out.push({ hash: (key as [string, string])[1], record: r });
    }
    return out;
  }

  /**
   * Deletes the tokens (from revokedTokens) whose sidecar is still revoked since `before` or
   * earlier; returns the sidecars whose token went. The sidecar's record stays: it names the
   * logs it shipped into the org chain (their witness state), and is listed as revoked.
   */
  async purgeTokens(
    found: readonly { hash: string; record: SidecarRecord }[],
    before: number,
  ): Promise<SidecarRecord[]> {
    const purged: SidecarRecord[] = [];
    await this.#store.writer.enqueue(() => {
      for (const { hash } of found) {
        const id = this.#store.sidecars.get([TOKEN_KEY, hash]) as string | undefined;
        const r =
          id === undefined ? undefined : (this.#store.sidecars.get([SIDECAR_KEY, id]) as SidecarRecord);
        if (r?.revoked_at == null || Date.parse(r.revoked_at) > before) continue;
        this.#store.sidecars.removeSync([TOKEN_KEY, hash]);
        purged.push(r);
      }
    });
    return purged;
  }

  /** Whether `secret` is a valid sidecar token (before its request's body is read). */
  accepts(secret: string | undefined): boolean {
    try {
      this.authenticate(secret, { shipping: true });
      return true;
    } catch {
      return false;
    }
  }

  /** The sidecar a presented token belongs to; 401 when it is unknown or revoked. */
  /**
   * The sidecar a token is, refused when unknown or revoked (401). With `shipping` (reading its
   * log's state, sending its entries), a token revoked less than SHIP_AFTER_REVOKE_MS ago is still
   * taken: what the sidecar recorded before it learned of the revocation (about a second, its
   * snapshot poll) or had not shipped yet reaches the org chain instead of staying in its log for
   * good. Its entries still need seals its registered log keys signed; it decides nothing more.
   */
  authenticate(secret: string | undefined, opts: { shipping?: boolean } = {}): SidecarRecord {
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
    const revokedLongAgo =
      r?.revoked_at != null &&
      !(opts.shipping === true && Date.now() - Date.parse(r.revoked_at) < SHIP_AFTER_REVOKE_MS);
    if (r === undefined || revokedLongAgo || this.#identity.getOrg(r.org_id) === undefined)
      throw new ServiceError('unauthenticated', 'the sidecar token is not valid (unknown or revoked)', {
        headers: { 'www-authenticate': 'Bearer error="invalid_token"' },
      });
    return r;
  }

  // ---- snapshot

  /** The org's snapshot for `sidecar`, and its ETag (unchanged while nothing in it changed). */
  snapshot(sidecar: SidecarRecord): { etag: string; doc: SnapshotDoc } {
    const org = sidecar.org_id;
    // Rebuilt when this org's identities, settings or policies changed, not another org's.
    const key = `${this.#identity.orgGenerations.of(org)}:${this.#settings.orgGenerations.of(org)}:${this.#policies.orgGenerations.of(org)}`;
    let built = this.#snapshots.get(org);
    if (built?.key !== key) {
      built = this.#build(org, key);
      this.#snapshots.set(org, built);
    }
    return {
      etag: built.etag,
      doc: {
        ...built.content,
        sidecar_id: sidecar.sidecar_id,
        issuer: this.#issuer(),
        generated_at: new Date().toISOString(),
      },
    };
  }

  #build(org: string, key: string): BuiltSnapshot {
    this.snapshotBuilds++;
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

  // ---- mandate keys

  /**
   * Registers a sidecar's mandate public keys (Ed25519 JWKs): from then on the control plane
   * publishes them in `/.well-known/jwks.json` and verifies the mandates they sign, whose `iss` is
   * the control plane's. Keys are added, one record per key id: the replicas of a Deployment share
   * one sidecar token and each has its own key. A sidecar registers its keys again every few
   * minutes (a no-op but for the time it was last seen); a key not seen for MANDATE_KEY_TTL_MS is
   * no longer published (its sidecar is gone; a mandate lives 60 s). New keys are a
   * `sidecar.mandate_keys_registered` event of the org chain. A key id the control plane or
   * another sidecar uses is refused (409), but for the same public key held by a revoked sidecar
   * of the same org (a token rotated on the same keys dir): that key moves to this sidecar, a
   * `sidecar.mandate_keys_rebound` event (#mayRebind). A revoked sidecar's keys are not published.
   */
  async registerMandateKeys(
    sidecar: SidecarRecord,
    keys: unknown,
    taken: (kid: string) => boolean,
  ): Promise<{ kids: string[]; registered: boolean }> {
    if (!Array.isArray(keys) || keys.length === 0 || keys.length > MAX_MANDATE_KEYS)
      throw new ServiceError('invalid_request', `keys must be an array of 1 to ${MAX_MANDATE_KEYS} JWKs`, {
        param: 'keys',
      });
    const jwks: SidecarMandateJwk[] = keys.map((k: unknown, i) => {
      const j = k as Record<string, unknown> | null;
      if (
        j === null ||
        typeof j !== 'object' ||
        j.kty !== 'OKP' ||
        j.crv !== 'Ed25519' ||
        typeof j.x !== 'string' ||
        !ED25519_X.test(j.x) ||
        typeof j.kid !== 'string' ||
        !KID.test(j.kid) ||
        'd' in j
      )
        throw new ServiceError('invalid_request', `keys[${i}] must be a public Ed25519 JWK with a kid`, {
          param: `keys[${i}]`,
        });
      return { kty: 'OKP', crv: 'Ed25519', x: j.x, kid: j.kid, alg: 'EdDSA', use: 'sig' };
    });
    const now = Date.now();
    const fresh: SidecarMandateJwk[] = [];
    const seen: SidecarMandateJwk[] = [];
    const rebound: Array<{ key: SidecarMandateJwk; from: string }> = [];
    for (const k of jwks) {
      const had = this.#store.sidecars.get([MANDATE_KEY, k.kid]) as MandateKeyRecord | undefined;
      if (taken(k.kid) || (had !== undefined && had.jwk.x !== k.x))
        throw new ServiceError('conflict', `mandate key id ${k.kid} is in use by another key`, {
          param: 'keys',
        });
      if (had === undefined) fresh.push(k);
      else if (had.sidecar_id !== sidecar.sidecar_id) {
        this.#mayRebind(sidecar, k.kid, had.sidecar_id);
        rebound.push({ key: k, from: had.sidecar_id });
      } else if (now - Date.parse(had.seen_at) >= MANDATE_KEY_REFRESH_MS) seen.push(k);
    }
    const kids = jwks.map((k) => k.kid).sort();
    if (fresh.length === 0 && seen.length === 0 && rebound.length === 0) return { kids, registered: false };
    const at = new Date(now).toISOString();
    const events: Array<Promise<unknown>> = [];
    if (fresh.length > 0)
      events.push(
        this.#audit.append({
          org_id: sidecar.org_id,
          event_type: 'sidecar.mandate_keys_registered',
          outcome: 'allow',
          details: { sidecar_id: sidecar.sidecar_id, keys: fresh.map((k) => ({ kid: k.kid, x: k.x })) },
        }),
      );
    // A key that moves from one sidecar to another is its own event: who could sign for the org
    // with it changed, and an auditor looking for that should not have to diff registrations.
    if (rebound.length > 0)
      events.push(
        this.#audit.append({
          org_id: sidecar.org_id,
          event_type: 'sidecar.mandate_keys_rebound',
          outcome: 'allow',
          details: {
            sidecar_id: sidecar.sidecar_id,
            keys: rebound.map(({ key, from }) => ({ kid: key.kid, x: key.x, from_sidecar_id: from })),
          },
        }),
      );
    const written = this.#store.writer.enqueue(() => {
      for (const k of [...fresh, ...seen, ...rebound.map((r) => r.key)])
        this.#store.sidecars.putSync([MANDATE_KEY, k.kid], {
          sidecar_id: sidecar.sidecar_id,
          jwk: k,
          seen_at: at,
        });
    });
    await Promise.all([...events, written]);
    this.#mandateJwks = undefined;
    this.#generation++;
    return { kids, registered: fresh.length > 0 || rebound.length > 0 };
  }

  /**
   * Refuses (409) unless mandate key `kid`, bound to sidecar `holderId`, may move to `sidecar`
   * (which presents the same public key): only from a revoked sidecar of the same org. That is a
   * token rotated on the same keys dir (docs/sidecar.md, "Tokens"), and it gives the new token
   * nothing it did not have: any sidecar token of the org may register keys that sign for the
   * org. While the holder is live the key stays its own: the registration proves no possession of the private
   * key, so moving it then would let any sidecar of the org take another's key (its mandates
   * recorded as the taker's, a revocation of the taker silencing the holder), and two live
   * sidecars presenting one key (a copied keys dir, a rotation not finished) would move it back
   * and forth. Another org's sidecar never takes it, and is not told whose it is.
   */
  #mayRebind(sidecar: SidecarRecord, kid: string, holderId: string): void {
    const holder = this.#store.sidecars.get([SIDECAR_KEY, holderId]) as SidecarRecord | undefined;
    if (holder?.org_id !== sidecar.org_id)
      throw new ServiceError('conflict', `mandate key id ${kid} is in use by another key`, { param: 'keys' });
    if (holder.revoked_at === null)
      throw new ServiceError(
        'conflict',
        `mandate key ${kid} is bound to sidecar ${holderId} of this org, which is not revoked: a key moves to a new sidecar token once the one that holds it is revoked (DELETE /api/sidecars/${holderId})`,
        { param: 'keys' },
      );
  }

  /**
   * Grows when the published sidecar mandate keys may have changed: a registration, a revocation,
   * and once a minute (keys not seen for a day leave the set).
   */
  get generation(): number {
    return this.#generation * 1_000_000 + Math.floor(Date.now() / 60_000);
  }

  /** The mandate keys of every sidecar that is not revoked and was seen lately (published in the JWKS). */
  mandateJwks(): SidecarMandateJwk[] {
    this.#loadMandateKeys();
    return (this.#mandateJwks ?? []).slice();
  }

  /**
   * The org whose sidecar registered mandate key `kid` (live, not revoked); undefined for any
   * other kid. A mandate signed with a sidecar's key is good for that sidecar's org only.
   */
  mandateKeyOrg(kid: string): string | undefined {
    this.#loadMandateKeys();
    return this.#mandateKeyOrgs.get(kid);
  }

  #loadMandateKeys(): void {
    const now = Date.now();
    if (this.#mandateJwks === undefined || now - this.#mandateJwksAt >= 60_000) {
      const out: SidecarMandateJwk[] = [];
      const orgs = new Map<string, string>();
      for (const { value } of this.#store.sidecars.getRange({
        start: [MANDATE_KEY],
        end: [MANDATE_KEY, '\uffff'],
      })) {
        const rec = value as MandateKeyRecord;
        if (now - Date.parse(rec.seen_at) > MANDATE_KEY_TTL_MS) continue;
        const r = this.#store.sidecars.get([SIDECAR_KEY, rec.sidecar_id]) as SidecarRecord | undefined;
        if (r === undefined || r.revoked_at !== null) continue;
        // Published with its org's digest: an offline verifier binds the key to that org too.
        out.push({ ...rec.jwk, org_sha256: orgDigest(r.org_id) });
        orgs.set(rec.jwk.kid, r.org_id);
      }
      this.#mandateJwks = out;
      this.#mandateKeyOrgs = orgs;
      this.#mandateJwksAt = now;
    }
  }

  // ---- ingest

  state(sidecar: SidecarRecord, epoch: string): SyncState {
    const { index, hash } = this.#state(sidecar, epoch);
    return { epoch, index, hash };
  }

  /**
   * The sidecar id a log is kept under: the sidecar that registered it first (LOG_OWNER_KEY), for
   * any sidecar of the same org; another org's sidecar naming it is refused. Logs registered before
   * owners were recorded are found by a scan of the log records (rare: at registration).
   */
  #logId(sidecar: SidecarRecord, epoch: string): string {
    const owner = this.#store.sidecars.get([LOG_OWNER_KEY, epoch]) as
      | { sidecar_id: string; org_id: string }
      | undefined;
    if (owner !== undefined) {
      if (owner.org_id !== sidecar.org_id)
        throw new ServiceError('conflict', `sidecar log ${epoch} is another org's`, { param: 'epoch' });
      return owner.sidecar_id;
    }
    return sidecar.sidecar_id;
  }

  /** A log registered before owners were recorded, by another sidecar of the org, if any. */
  #unrecordedOwner(sidecar: SidecarRecord, epoch: string): string | undefined {
    for (const { key } of this.#store.sidecars.getRange({ start: [LOG_KEY], end: [LOG_KEY, '\uffff'] })) {
      const [, sidecarId, e] = key as [string, string, string];
      if (e !== epoch || sidecarId === sidecar.sidecar_id) continue;
      const other = this.#store.sidecars.get([SIDECAR_KEY, sidecarId]) as SidecarRecord | undefined;
      if (other?.org_id !== sidecar.org_id)
        throw new ServiceError('conflict', `sidecar log ${epoch} is another org's`, { param: 'epoch' });
      return sidecarId;
    }
    return undefined;
  }

  #state(sidecar: SidecarRecord, epoch: string): LogState {
    const id = this.#logId(sidecar, epoch);
    const pending = this.#states.get(`${id}\0${epoch}`);
    if (pending !== undefined) return pending;
    const stored = this.#store.sidecars.get([STATE_KEY, id, epoch]) as LogState | undefined;
    return { epoch, index: stored?.index ?? 0, hash: stored?.hash ?? null, subtrees: stored?.subtrees ?? [] };
  }

  /**
   * Registers the public keys of the sidecar log `(sidecar, epoch)`: its seals must verify with
   * them. Once only: a sidecar with other keys starts another log (a new data dir is a new
   * epoch). The registration is a `sidecar.log_registered` event of the org chain, in the same
   * commit as the record, so the keys every ingested seal was checked with are in the trail.
   */
  async registerLog(
    sidecar: SidecarRecord,
    epoch: string,
    doc: unknown,
  ): Promise<{ epoch: string; key_ids: string[]; registered: boolean }> {
    try {
      verifiersFromKeys(doc);
    } catch (err) {
      if (err instanceof VerifyInputError)
        throw new ServiceError('invalid_request', `keys: ${err.message}`, { param: 'keys' });
      throw err;
    }
    const keys = (doc as SigningKeyDocument).keys.map((k) => ({
      name: k.name,
      alg: k.alg,
      key_id: k.key_id,
      public_key: k.public_key,
    }));
    const ids = keys.map((k) => k.key_id).sort();
    let existing = this.#logRecord(sidecar, epoch);
    if (existing === undefined && this.#store.sidecars.get([LOG_OWNER_KEY, epoch]) === undefined) {
      // Registered (by another sidecar of the org) before owners were recorded: adopted as such.
      const earlier = this.#unrecordedOwner(sidecar, epoch);
      if (earlier !== undefined) {
        const owner = { sidecar_id: earlier, org_id: sidecar.org_id };
        await this.#store.writer.enqueue(() => this.#store.sidecars.putSync([LOG_OWNER_KEY, epoch], owner));
        existing = this.#logRecord(sidecar, epoch);
      }
    }
    if (existing !== undefined) {
      const had = existing.keys.map((k) => k.key_id).sort();
      const same =
        had.length === ids.length &&
        had.every((id, i) => id === ids[i]) &&
        existing.keys.every((k) => keys.some((n) => n.key_id === k.key_id && n.public_key === k.public_key));
      if (!same)
        throw new ServiceError(
          'conflict',
          `sidecar log ${epoch} is registered with other keys; a sidecar with new keys starts a new log (a new data dir)`,
          { param: 'keys' },
        );
      return { epoch, key_ids: ids, registered: false };
    }
    const record: LogRecord = { keys, registered_at: new Date().toISOString() };
    const event = this.#audit.append({
      org_id: sidecar.org_id,
      event_type: 'sidecar.log_registered',
      outcome: 'allow',
      details: { sidecar_id: sidecar.sidecar_id, epoch, keys },
    });
    const owner = { sidecar_id: sidecar.sidecar_id, org_id: sidecar.org_id };
    const written = this.#store.writer.enqueue(() => {
      this.#store.sidecars.putSync([LOG_KEY, sidecar.sidecar_id, epoch], record);
      this.#store.sidecars.putSync([LOG_OWNER_KEY, epoch], owner);
    });
    await Promise.all([event, written]);
    return { epoch, key_ids: ids, registered: true };
  }

  #logRecord(sidecar: SidecarRecord, epoch: string): LogRecord | undefined {
    return this.#store.sidecars.get([LOG_KEY, this.#logId(sidecar, epoch), epoch]) as LogRecord | undefined;
  }

  /**
   * The seals of a batch, their signatures checked (off the event loop) with the log's
   * registered keys, Ed25519 and ML-DSA-65 both: size → the signed checkpoint text.
   */
  async #verifySeals(
    sidecar: SidecarRecord,
    epoch: string,
    seals: readonly unknown[],
  ): Promise<Map<number, string>> {
    const record = this.#logRecord(sidecar, epoch);
    if (record === undefined)
      throw new ServiceError(
        'conflict',
        `sidecar log ${epoch} is not registered: register its keys first (POST /api/sync/log)`,
        { param: 'epoch' },
      );
    const shipped: ShippedSeal[] = [];
    for (let i = 0; i < seals.length; i++) {
      const seal = seals[i] as ShippedSeal;
      if (
        typeof seal !== 'object' ||
        seal === null ||
        !Number.isSafeInteger(seal.size) ||
        seal.size < 1 ||
        typeof seal.note !== 'string'
      )
        throw new ServiceError('invalid_request', `seals[${i}] must be a seal {size, note}`, {
          param: `seals[${i}]`,
        });
      shipped.push(seal);
    }
    const keys = record.keys as Parameters<NoteVerifyPool['verify']>[1];
    const checks = await Promise.all(shipped.map((x) => this.#notes.verify(x.note, keys)));
    const out = new Map<number, string>();
    for (let i = 0; i < checks.length; i++) {
      const c = checks[i] as Awaited<ReturnType<NoteVerifyPool['verify']>>;
      const size = (shipped[i] as ShippedSeal).size;
      if (!c.ok)
        throw new ServiceError(
          'invalid_request',
          `seals[${i}] (index ${size}) does not verify with the log's keys: ${c.message}`,
          { param: 'seals' },
        );
      out.set(size, c.body);
    }
    return out;
  }

  close(): Promise<void> {
    return this.#notes.close();
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
    seals: readonly unknown[] = [],
  ): Promise<SyncState & { ingested: number }> {
    const logId = this.#logId(sidecar, epoch);
    const stateKey = `${logId}\0${epoch}`;
    const verified = await this.#verifySeals(sidecar, epoch, seals);
    // Synchronous from the check to the state's write: batches in flight together see each other.
    const checked = this.#check(sidecar, epoch, entries, verified);
    const out = { epoch, index: checked.state.index, hash: checked.state.hash };
    if (checked.inputs.length === 0) return { ...out, ingested: 0 };
    // Synchronous from here to the state's write: the events and the state share one commit.
    const appends: Promise<AuditRef>[] = [];
    for (const input of checked.inputs) appends.push(this.#audit.append(input));
    const state = checked.state;
    this.#states.set(stateKey, state);
    const at = new Date().toISOString();
    const written = this.#store.writer.enqueue(() =>
      this.#store.sidecars.putSync([STATE_KEY, logId, epoch], { ...state, at }),
    );
    try {
      await Promise.all([...appends, written]);
    } catch (err) {
      this.#states.delete(stateKey);
      throw err;
    }
    if (this.#states.get(stateKey) === state) this.#states.delete(stateKey);
    return { ...out, ingested: checked.inputs.length };
  }

  #check(
    sidecar: SidecarRecord,
    epoch: string,
    entries: readonly unknown[],
    sealAt: ReadonlyMap<number, string>,
  ): Checked {
    const before = this.#state(sidecar, epoch);
    let index = before.index;
    let hash = before.hash ?? GENESIS;
    const inputs: AuditInput[] = [];
    const tree = MerkleBuilder.fromSubtrees(
      before.index,
      before.subtrees.map((h) => fromHex(h) as Uint8Array),
    );
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
      tree.push(leafHashUnchecked(e.hash));
      const body = sealAt.get(e.seq);
      if (body !== undefined) this.#checkSeal(sidecar, body, e.seq, tree.root(), e.hash, at);
    }
    if (inputs.length > 0 && !sealAt.has(index))
      throw new ServiceError(
        'invalid_request',
        `a batch ends on a seal: the seal of index ${index} of this sidecar log is missing`,
        { param: 'seals' },
      );
    return {
      inputs,
      state: { epoch, index, hash: index === 0 ? null : hash, subtrees: tree.subtrees().map(toHex) },
    };
  }

  /**
   * A verified seal of the sidecar log: for the org's origin and its size, naming the root and
   * the head this control plane computed from the entries it took in. A seal that is signed but
   * names another root is a fork: 409.
   */
  #checkSeal(
    sidecar: SidecarRecord,
    body: string,
    size: number,
    root: Uint8Array,
    head: string,
    at: string,
  ): void {
    let cp: ReturnType<typeof parseCheckpoint>;
    try {
      cp = parseCheckpoint(body);
    } catch (err) {
      throw new ServiceError(
        'invalid_request',
        `${at}: its seal is not a checkpoint: ${(err as Error).message}`,
        {
          param: 'seals',
        },
      );
    }
    if (cp.origin !== checkpointOrigin(sidecar.org_id) || cp.size !== size)
      throw new ServiceError('invalid_request', `${at}: its seal names another log or size`, {
        param: 'seals',
      });
    if (!bytesEqual(cp.rootHash, root) || cp.head !== head)
      throw new ServiceError(
        'conflict',
        `${at}: its signed seal names another tree than the entries sent (a fork of this sidecar log)`,
        { param: 'seals' },
      );
  }
}
