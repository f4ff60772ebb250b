import { sign } from 'node:crypto';
import { compactVerify, createLocalJWKSet, type JWK, type JWTPayload, jwtVerify } from 'jose';
import { ServiceError } from '../core/errors.js';
import type { MandateKeys } from '../crypto/mandate-keys.js';
import type { Store } from '../store/db.js';
import { orgDeleted } from '../store/org-tombstone.js';
import { randomBase62 } from '../util/ids.js';
import { RevocationList } from './revocation-list.js';

/** A mandate's lifetime: `exp = iat + 60` (DESIGN C). */
export const MANDATE_TTL_S = 60;
/** Clock skew accepted on `iat` and `exp`. */
export const MANDATE_CLOCK_TOLERANCE_S = 5;
/**
 * How long a revocation stays listed. Any mandate still live when it was revoked expires within
 * TTL + tolerance of that moment; the rest of the hour is a margin for slow, skewed verifiers.
 */
export const REVOCATION_RETENTION_MS = 3_600_000;
/**
 * The public list drops expired revocations when it is rebuilt, at most this often: one may be
 * listed up to this long past REVOCATION_RETENTION_MS.
 */
export const REVOKED_LIST_REFRESH_MS = 60_000;
/**
 * Live revocations by bare jti one org may hold. Nothing shows a bare jti was ever issued
 * (mandates are not recorded when issued), so each is a row anyone with admin could make up; a
 * revocation by token proves its mandate and is not counted.
 */
export const MAX_UNPROVEN_REVOCATIONS_PER_ORG = 10_000;
/** Rows one sweep deletes per write transaction. */
const SWEEP_BATCH = 2_000;
/** Longer strings are not mandates (a mandate is ~600 characters). */
export const MAX_MANDATE_CHARS = 8192;
export const MANDATE_JTI_RE = /^mdt_[A-Za-z0-9]{16,64}$/;
const JTI_LENGTH = 22;

export interface MandateCapability {
  readonly type: string;
  readonly tool: string | null;
  readonly args_sha256: string;
}

/** What the govern path supplies; the service adds iss, jti, iat and exp. */
export interface MandateRequest {
  /** The agent id. */
  readonly sub: string;
  /** The org id. */
  readonly org: string;
  readonly behavior_id: string;
  readonly pipeline_id: string;
  readonly cap: MandateCapability;
}

export interface MandateClaims extends MandateRequest {
  readonly iss: string;
  readonly jti: string;
  readonly iat: number;
  readonly exp: number;
}

export interface IssuedMandate {
  readonly token: string;
  readonly jti: string;
  /** Seconds since the epoch. */
  readonly exp: number;
}

/** Why a token is not a valid mandate (the `error` of `/v1/tokens/verify`). */
export type MandateError =
  | 'malformed'
  | 'algorithm_not_allowed'
  | 'unknown_key'
  | 'signature_invalid'
  | 'issuer_mismatch'
  | 'expired'
  | 'not_yet_valid'
  | 'claims_invalid'
  | 'revoked';

export type MandateVerification =
  | { readonly valid: true; readonly claims: MandateClaims }
  | { readonly valid: false; readonly error: MandateError };

/**
 * One row of `Store.revokedMandates`, keyed by `[jti, org_id]`: a revocation applies to the
 * mandate of that jti issued to that org only, so another org naming a jti (bare, unproven)
 * revokes nothing of this one's. Rows of earlier builds are keyed `[jti]` (read the same way;
 * they leave within REVOCATION_RETENTION_MS).
 */
export interface RevokedMandate {
  readonly jti: string;
  readonly org_id: string;
  readonly revoked_at: string;
  readonly revoked_by: string;
  readonly reason: string | null;
  /** Revoked by bare jti (`POST /api/mandates/revoke {jti}`): counted against its org's allowance. */
  readonly unproven?: true;
}

/**
 * Public keys besides the service's own that sign mandates for it: the sidecars' (each registered
 * by the control plane, docs/sidecar.md). `generation` grows whenever the set changes.
 */
export interface DelegatedMandateKeys {
  readonly generation: number;
  mandateJwks(): JWK[];
  /** The org a delegated key `kid` signs for (its sidecar's); undefined when it is none of them. */
  mandateKeyOrg(kid: string): string | undefined;
}

export interface MandateServiceOptions {
  /** Keys of sidecars that issue mandates in this service's name (verified like its own). */
  readonly delegated?: DelegatedMandateKeys;
  /** The clock (ms) of every method whose `now` is left out; Date.now by default. */
  readonly now?: () => number;
  /** Overrides MAX_UNPROVEN_REVOCATIONS_PER_ORG (tests). */
  readonly unprovenCap?: number;
}

export interface RevokedList {
  /** `org_sha256`: the SHA-256 (hex) of the revoking org's id; the revocation is of its mandate only. */
  readonly revoked: { jti: string; org_sha256: string; revoked_at: string }[];
  /** When this list was produced: it is complete as of this moment. */
  readonly updated_at: string;
}

const fail = (error: MandateError): MandateVerification => ({ valid: false, error });

function isCapability(value: unknown): value is MandateCapability {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const c = value as Record<string, unknown>;
  return (
    typeof c.type === 'string' &&
    (c.tool === null || typeof c.tool === 'string') &&
    typeof c.args_sha256 === 'string'
  );
}

/** The payload as mandate claims, or undefined when a claim is missing or of the wrong type. */
function asClaims(p: JWTPayload): MandateClaims | undefined {
  const r = p as Record<string, unknown>;
  if (
    typeof p.iss !== 'string' ||
    typeof p.sub !== 'string' ||
    typeof r.org !== 'string' ||
    typeof p.jti !== 'string' ||
    typeof p.iat !== 'number' ||
    typeof p.exp !== 'number' ||
    typeof r.behavior_id !== 'string' ||
    typeof r.pipeline_id !== 'string' ||
    !isCapability(r.cap) ||
    p.exp - p.iat > MANDATE_TTL_S
  ) {
    return undefined;
  }
  return p as unknown as MandateClaims;
}

function errorOf(err: unknown): MandateError {
  const e = err as { code?: unknown; claim?: unknown };
  switch (e?.code) {
    case 'ERR_JWT_EXPIRED':
      return 'expired';
    case 'ERR_JWT_CLAIM_VALIDATION_FAILED':
      if (e.claim === 'iss') return 'issuer_mismatch';
      if (e.claim === 'iat' || e.claim === 'nbf') return 'not_yet_valid';
      return 'claims_invalid';
    case 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED':
      return 'signature_invalid';
    case 'ERR_JWKS_NO_MATCHING_KEY':
    case 'ERR_JWKS_MULTIPLE_MATCHING_KEYS':
      return 'unknown_key';
    case 'ERR_JOSE_ALG_NOT_ALLOWED':
    case 'ERR_JOSE_NOT_SUPPORTED':
      return 'algorithm_not_allowed';
    default:
      return 'malformed';
  }
}

/**
 * Issues, verifies and revokes mandates: EdDSA JWTs naming the one capability a govern allow
 * grants. Signing is node:crypto over a cached header (about twice as fast as jose's async
 * WebCrypto path, and on every allow); verification is jose against the local key set.
 */
export class MandateService {
  private readonly issuerOf: () => string;
  private headerKid = '';
  private headerB64 = '';
  private jwkSetGen = '';
  private readonly delegated: DelegatedMandateKeys | undefined;
  private jwkSet: ReturnType<typeof createLocalJWKSet> | undefined;
  private readonly clock: () => number;
  private readonly unprovenCap: number;
  /** Every row of the revocation table, loaded once; the public list is served from it. */
  private readonly list = new RevocationList(REVOCATION_RETENTION_MS, REVOKED_LIST_REFRESH_MS);
  private sweeping = false;

  constructor(
    private readonly keys: MandateKeys,
    private readonly store: Store,
    /** The service's base URL (`iss`); a function when it is only known after listen. */
    issuer: string | (() => string),
    opts: MandateServiceOptions = {},
  ) {
    this.issuerOf = typeof issuer === 'string' ? () => issuer : issuer;
    this.clock = opts.now ?? Date.now;
    this.unprovenCap = opts.unprovenCap ?? MAX_UNPROVEN_REVOCATIONS_PER_ORG;
    this.delegated = opts.delegated;
    // The one scan of the table: this process is its only writer (the data dir is locked), so
    // from here on the list follows it through revoke() and sweep().
    const rows: { jti: string; org: string; revoked_at: string; unprovenOrg?: string }[] = [];
    for (const { value } of store.revokedMandates.getRange()) {
      const r = value as RevokedMandate;
      rows.push({
        jti: r.jti,
        org: r.org_id,
        revoked_at: r.revoked_at,
        unprovenOrg: r.unproven ? r.org_id : undefined,
      });
    }
    this.list.load(rows);
  }

  /** How many times the public list's text was rebuilt (not appended to): for tests. */
  get revokedListBuilds(): number {
    return this.list.builds;
  }

  /** Signs a mandate valid from `now` (ms) for MANDATE_TTL_S seconds. */
  async issue(request: MandateRequest, now: number = this.clock()): Promise<IssuedMandate> {
    return this.issueNow(request, now);
  }

  private issueNow(request: MandateRequest, now: number): IssuedMandate {
    const key = this.keys.active;
    if (key.kid !== this.headerKid) {
      this.headerKid = key.kid;
      this.headerB64 = Buffer.from(JSON.stringify({ alg: 'EdDSA', kid: key.kid, typ: 'JWT' })).toString(
        'base64url',
      );
    }
    const iat = Math.floor(now / 1000);
    const exp = iat + MANDATE_TTL_S;
    const jti = `mdt_${randomBase62(JTI_LENGTH)}`;
    const cap = request.cap;
    const claims: MandateClaims = {
      iss: this.issuerOf(),
      sub: request.sub,
      org: request.org,
      jti,
      iat,
      exp,
      behavior_id: request.behavior_id,
      pipeline_id: request.pipeline_id,
      cap: { type: cap.type, tool: cap.tool, args_sha256: cap.args_sha256 },
    };
    const input = `${this.headerB64}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
    const signature = sign(null, Buffer.from(input), key.privateKey).toString('base64url');
    return { token: `${input}.${signature}`, jti, exp };
  }

  /**
   * Whether key `kid` may sign a mandate of `org`: the service's own keys sign for every org; a
   * sidecar's key only for its sidecar's org (a sidecar token of one org registering a key must
   * not mint mandates for another org's agents).
   */
  private signsFor(kid: string | undefined, org: string): boolean {
    if (kid === undefined) return false;
    if (this.ownKidsGen !== this.keys.generation) {
      this.ownKids = new Set(this.keys.jwks().keys.map((k) => k.kid as string));
      this.ownKidsGen = this.keys.generation;
    }
    if (this.ownKids.has(kid)) return true;
    return this.delegated?.mandateKeyOrg(kid) === org;
  }
  private ownKids = new Set<string>();
  private ownKidsGen = -1;

  private keySet(): ReturnType<typeof createLocalJWKSet> {
    const gen = `${this.keys.generation}:${this.delegated?.generation ?? 0}`;
    if (this.jwkSet === undefined || this.jwkSetGen !== gen) {
      const set = this.keys.jwks();
      if (this.delegated !== undefined) set.keys.push(...this.delegated.mandateJwks());
      this.jwkSet = createLocalJWKSet(set);
      this.jwkSetGen = gen;
    }
    return this.jwkSet;
  }

  /** Checks signature (local key set), issuer, `iat`/`exp` (±5 s), claim shapes and revocation. */
  async verify(token: string, now: number = this.clock()): Promise<MandateVerification> {
    if (typeof token !== 'string' || token.length === 0 || token.length > MAX_MANDATE_CHARS)
      return fail('malformed');
    let payload: JWTPayload;
    let kid: string | undefined;
    try {
      ({
        payload,
        protectedHeader: { kid },
      } = await jwtVerify(token, this.keySet(), {
        algorithms: ['EdDSA'],
        typ: 'JWT',
        issuer: this.issuerOf(),
        clockTolerance: MANDATE_CLOCK_TOLERANCE_S,
        maxTokenAge: MANDATE_TTL_S,
        currentDate: new Date(now),
        requiredClaims: ['sub', 'jti', 'iat', 'exp'],
      }));
    } catch (err) {
      return fail(errorOf(err));
    }
    const claims = asClaims(payload);
    if (claims === undefined) return fail('claims_invalid');
    if (!this.signsFor(kid, claims.org)) return fail('unknown_key');
    if (this.revocation(claims.jti, claims.org) !== undefined) return fail('revoked');
    // Its org was deleted (DELETE /api/orgs/{id}): every mandate of it ends with it.
    if (orgDeleted(this.store, claims.org)) return fail('revoked');
    return { valid: true, claims };
  }

  /**
   * The claims of a token this service signed (signature, issuer and claim shapes checked), whatever
   * its age or revocation state; undefined otherwise. For revocation by token.
   */
  async inspect(token: string): Promise<MandateClaims | undefined> {
    if (typeof token !== 'string' || token.length === 0 || token.length > MAX_MANDATE_CHARS) return undefined;
    try {
      const { payload, protectedHeader } = await compactVerify(token, this.keySet(), {
        algorithms: ['EdDSA'],
      });
      const parsed: unknown = JSON.parse(Buffer.from(payload).toString('utf8'));
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return undefined;
      const claims = asClaims(parsed as JWTPayload);
      if (claims === undefined || !this.signsFor(protectedHeader.kid, claims.org)) return undefined;
      return claims.iss === this.issuerOf() ? claims : undefined;
    } catch {
      return undefined;
    }
  }

  /** The revocation of `org`'s mandate `jti`, if there is one. */
  revocation(jti: string, org: string): RevokedMandate | undefined {
    const db = this.store.revokedMandates;
    const row = db.get([jti, org]) as RevokedMandate | undefined;
    if (row !== undefined) return row;
    const legacy = db.get([jti]) as RevokedMandate | undefined;
    return legacy?.org_id === org ? legacy : undefined;
  }

  /**
   * Revokes `jti` for `orgId`. Idempotent: a jti revoked before keeps its first record, which is
   * returned with `created: false`. Resolves once the revocation is committed, and listed.
   *
   * `unproven`: the jti was named bare, so nothing shows this service issued it. Such a new
   * revocation takes one of the org's MAX_UNPROVEN_REVOCATIONS_PER_ORG; with none left it is
   * refused (`rate_limited`) and nothing is written.
   */
  async revoke(
    jti: string,
    orgId: string,
    by: string,
    reason?: string,
    now: number = this.clock(),
    opts: { unproven?: boolean } = {},
  ): Promise<{ record: RevokedMandate; created: boolean }> {
    const db = this.store.revokedMandates;
    let record: RevokedMandate = {
      jti,
      org_id: orgId,
      revoked_at: new Date(now).toISOString(),
      revoked_by: by,
      reason: reason ?? null,
      ...(opts.unproven ? { unproven: true as const } : {}),
    };
    // Taken before the write, so revocations asked at once cannot overshoot the allowance.
    let reserved = false;
    if (opts.unproven && this.revocation(jti, orgId) === undefined) {
      if (!this.list.reserve(orgId, this.unprovenCap))
        throw new ServiceError(
          'rate_limited',
          `org ${orgId} holds ${this.unprovenCap} revocations by bare jti from the last hour; revoke by token instead`,
          // The oldest leave the allowance within the hour; by token it is never limited.
          { headers: { 'retry-after': '60' } },
        );
      reserved = true;
    }
    let created = true;
    try {
      await this.store.writer.enqueue(() => {
        const existing = this.revocation(jti, orgId);
        if (existing !== undefined) {
          record = existing;
          created = false;
        } else {
          db.putSync([jti, orgId], record);
        }
      });
    } catch (err) {
      if (reserved) this.list.release(orgId);
      throw err;
    }
    if (created) this.list.add(jti, orgId, record.revoked_at, record.unproven ? orgId : undefined, reserved);
    else if (reserved) this.list.release(orgId);
    return { record, created };
  }

  /**
   * The public list as JSON: every revocation younger than REVOCATION_RETENTION_MS (and some up
   * to REVOKED_LIST_REFRESH_MS older), all orgs, each by jti and its org's digest, oldest first. Built from the cached
   * items, not the table.
   */
  revokedJson(now: number = this.clock()): string {
    return `{"revoked":[${this.list.text(now)}],"updated_at":"${new Date(now).toISOString()}"}`;
  }

  /** The public list (revokedJson, parsed). */
  revoked(now: number = this.clock()): RevokedList {
    return JSON.parse(this.revokedJson(now)) as RevokedList;
  }

  /**
   * Deletes revocations older than REVOCATION_RETENTION_MS, `batch` per write transaction, each
   * on its own turn; returns how many. The stale ones are the front of the in-memory list: the
   * table is not scanned.
   */
  async sweep(now: number = this.clock(), batch = SWEEP_BATCH): Promise<number> {
    // One at a time: a sweep still running when the next is due lets it pass.
    if (this.sweeping) return 0;
    this.sweeping = true;
    try {
      return await this.sweepStale(now - REVOCATION_RETENTION_MS, batch);
    } finally {
      this.sweeping = false;
    }
  }

  private async sweepStale(cutoff: number, batch: number): Promise<number> {
    const db = this.store.revokedMandates;
    let n = 0;
    // Bounded: each round deletes at least one of the rows there were at the start.
    for (let rounds = Math.ceil(this.list.size / batch) + 1; rounds > 0; rounds--) {
      const stale = this.list.stale(cutoff, batch);
      if (stale.length === 0) break;
      await this.store.writer.enqueue(() => {
        for (const e of stale) {
          db.removeSync([e.jti, e.org]);
          db.removeSync([e.jti]);
        }
      });
      this.list.removed(stale);
      n += stale.length;
      if (stale.length < batch) break;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    return n;
  }
}
