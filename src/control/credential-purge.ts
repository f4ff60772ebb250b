import { setImmediate as nextTurn } from 'node:timers/promises';
import type { AuditSink } from '../audit/types.js';
import type { IdentityRepo, StoredCredential } from '../identity/repo.js';
import type { SidecarDesk, SidecarRecord } from './sidecars.js';

const DAY_MS = 86_400_000;

/**
 * Days a revoked or expired credential (agent key, personal access token, sidecar token) is kept
 * after it stopped authenticating before it is purged: long enough for an operator to see in
 * `GET /api/sidecars` or the trail which credential was revoked, and for a late investigation to
 * find the record; the trail keeps its creation, revocation and purge events for good.
 */
export const CREDENTIAL_PURGE_GRACE_DAYS = 30;
/** Credentials purged by one run at most (the rest go on the next, an hour later): bounds its event and its work. */
const MAX_PURGED_PER_RUN = 1_000;
/** Keys of the credentials table read per turn of the event loop. */
const SCAN_BATCH = 1_000;

/** A credential as a purge event names it. */
interface Named {
  readonly kind: 'agent' | 'pat' | 'sidecar';
  readonly credential_id: string;
  readonly subject_id: string | null;
  readonly revoked_at: string | null;
  readonly expires_at: string | null;
}

/**
 * Purges credentials that stopped authenticating (revoked, or expired) more than
 * CREDENTIAL_PURGE_GRACE_DAYS ago: agent keys and PATs with their index entries, and the tokens
 * of revoked sidecars. Run at the start and every hour. Each org's purge is first an
 * `admin.credentials_purged` event of its chain naming every credential, then the deletion: a
 * purge is never unrecorded (a deletion that fails is recorded again by the next run).
 */
export class CredentialPurge {
  #running: Promise<{ purged: number }> | undefined;

  constructor(
    private readonly deps: {
      readonly identity: IdentityRepo;
      readonly sidecars: Pick<SidecarDesk, 'revokedTokens' | 'purgeTokens'>;
      readonly audit: AuditSink;
    },
  ) {}

  /** One run, at `now` (ms); a call while one runs gets that run. */
  run(now = Date.now()): Promise<{ purged: number }> {
    this.#running ??= this.#run(now).finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  /** Resolves once no run is under way (whatever its result). */
  settled(): Promise<void> {
    return (this.#running ?? Promise.resolve()).then(
      () => undefined,
      () => undefined,
    );
  }

  async #run(now: number): Promise<{ purged: number }> {
    const before = now - CREDENTIAL_PURGE_GRACE_DAYS * DAY_MS;
    const { identity, sidecars, audit } = this.deps;
    const credentials: StoredCredential[] = [];
    let after: string | undefined;
    do {
      const page = identity.endedCredentials(before, after, SCAN_BATCH);
      credentials.push(...page.found.slice(0, MAX_PURGED_PER_RUN - credentials.length));
      after = page.next;
      if (after !== undefined) await nextTurn();
    } while (after !== undefined && credentials.length < MAX_PURGED_PER_RUN);
    const tokens = sidecars.revokedTokens(before, MAX_PURGED_PER_RUN - credentials.length);
    const byOrg = new Map<string, { credentials: StoredCredential[]; tokens: typeof tokens }>();
    const of = (org: string) => {
      let o = byOrg.get(org);
      if (o === undefined) byOrg.set(org, (o = { credentials: [], tokens: [] }));
      return o;
    };
    for (const c of credentials) of(c.record.org_id).credentials.push(c);
    for (const t of tokens) of(t.record.org_id).tokens.push(t);
    let purged = 0;
    for (const [org, found] of byOrg) {
      const named: Named[] = found.credentials.map(({ record: c }) => ({
        kind: c.kind,
        credential_id: c.credential_id,
        subject_id: c.subject_id,
        revoked_at: c.revoked_at,
        expires_at: c.expires_at,
      }));
      for (const { record: r } of found.tokens) named.push(sidecarNamed(r));
      await audit.append({
        org_id: org,
        event_type: 'admin.credentials_purged',
        outcome: 'allow',
        details: {
          actor: 'system',
          actor_kind: 'system',
          credential_id: null,
          grace_days: CREDENTIAL_PURGE_GRACE_DAYS,
          cutoff: new Date(before).toISOString(),
          credentials: named,
        },
      });
      purged += identity.purgeCredentials(found.credentials, before).length;
      purged += (await sidecars.purgeTokens(found.tokens, before)).length;
    }
    return { purged };
  }
}

function sidecarNamed(r: SidecarRecord): Named {
  return {
    kind: 'sidecar',
    credential_id: r.sidecar_id,
    subject_id: null,
    revoked_at: r.revoked_at,
    expires_at: null,
  };
}
