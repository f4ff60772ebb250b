import { createHash, randomBytes } from 'node:crypto';
import {
  type AuthenticationResponseJSON,
  generateAuthenticationOptions,
  generateRegistrationOptions,
  type RegistrationResponseJSON,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
} from '@simplewebauthn/server';
import { ServiceError } from '../core/errors.js';
import type { Principal } from '../identity/types.js';
import type { Store } from '../store/db.js';
import { assertOrgLive } from '../store/org-tombstone.js';

/** Where WebAuthn ceremonies are bound: the relying party id and the origins a browser reports. */
export interface WebauthnSettings {
  readonly rpId: string;
  readonly origins: readonly string[];
}

/** A registered authenticator of a user (public material only). */
export interface WebauthnCredentialRecord {
  /** Credential id, base64url. */
  readonly id: string;
  readonly user_id: string;
  readonly org_id: string;
  /** COSE public key, base64url. */
  readonly public_key: string;
  readonly counter: number;
  readonly transports: readonly string[];
  readonly name: string | null;
  readonly created_at: string;
}

/**
 * What a verified signed-tier decision carries into its audit event: the assertion as the
 * authenticator made it, so an auditor can check the signature again with the credential's public
 * key (recorded when it was registered).
 */
export interface WebauthnEvidence {
  readonly credential_id: string;
  readonly authenticator_data: string;
  readonly client_data_json: string;
  readonly signature: string;
  readonly sign_count: number;
  readonly user_verified: boolean;
  /** SHA-256 (hex) of the challenge it signed. */
  readonly challenge_sha256: string;
  /** What that challenge commits to (ChallengeBinding): recompute it to check the decision. */
  readonly challenge_binding: ChallengeBinding;
}

/** Challenges live this long (the browser's ceremony timeout is the same). */
const CHALLENGE_TTL_MS = 5 * 60_000;
/** Open challenges kept per user; the oldest goes first. */
const MAX_CHALLENGES_PER_USER = 32;
/** Authenticators per user. */
const MAX_CREDENTIALS_PER_USER = 20;
/** A credential id is at most 1,023 bytes (WebAuthn L3): 1,364 base64url characters. */
const MAX_CREDENTIAL_ID_CHARS = 1_364;
/**
 * An assertion's parts are recorded whole in the decision's audit event: each is bounded (real
 * ones are a few hundred bytes; extensions and client data stay far below this).
 */
const MAX_ASSERTION_PART_CHARS = 16_384;

interface Challenge {
  readonly challenge: string;
  readonly expires: number;
  /** A decision challenge's binding (absent for a registration). */
  readonly binding?: ChallengeBinding;
}

/**
 * What a decision challenge commits to. Its 48 bytes are `nonce ‖ SHA-256(BINDING_LABEL ‖
 * approval_id ‖ fingerprint ‖ decision ‖ nonce)` (fields each followed by a newline, the nonce in
 * base64url), so the authenticator's signature over it covers the approval, the exact action (its
 * fingerprint) and, when the challenge was asked for one, the decision: an auditor recomputes it
 * from the decision event alone.
 */
export interface ChallengeBinding {
  readonly scheme: typeof BINDING_LABEL;
  /** 16 random bytes, base64url. */
  readonly nonce: string;
  readonly approval_id: string;
  readonly fingerprint: string;
  /** The decision the challenge was asked for; `any` when it was asked for none. */
  readonly decision: 'approve' | 'deny' | 'any';
}

const BINDING_LABEL = 'govgate-approval-decision-v1';

/** The challenge bytes of `binding` (see ChallengeBinding). */
function boundChallenge(binding: Omit<ChallengeBinding, 'scheme'>): Uint8Array<ArrayBuffer> {
  const nonce = Buffer.from(binding.nonce, 'base64url');
  const digest = createHash('sha256')
    .update(
      `${BINDING_LABEL}\n${binding.approval_id}\n${binding.fingerprint}\n${binding.decision}\n${binding.nonce}\n`,
    )
    .digest();
  const out = new Uint8Array(nonce.length + digest.length);
  out.set(nonce);
  out.set(digest, nonce.length);
  return out;
}

function requirePerson(p: Principal): void {
  if (p.kind !== 'user')
    throw new ServiceError('forbidden', 'WebAuthn is for people: an agent key has no authenticator');
}

function b64url(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('base64url');
}

/**
 * WebAuthn for signed-tier approvals (DESIGN C "Approvals"): people register authenticators
 * (`/api/me/webauthn/register/…`), fetch a challenge for one approval
 * (`GET /v1/me/approvals/{id}/challenge`) and decide it with the assertion. Credentials are kept
 * in LMDB under [user, credential id]; challenges in memory, one use each, 5 minutes, bound to
 * the user and to the approval (registration: to the user alone).
 */
export class WebauthnDesk {
  readonly #challenges = new Map<string, Challenge>();

  constructor(
    private readonly store: Store,
    private readonly settings: WebauthnSettings,
    private readonly clock: () => number = Date.now,
  ) {}

  credentialsOf(userId: string): WebauthnCredentialRecord[] {
    const out: WebauthnCredentialRecord[] = [];
    for (const { value } of this.store.webauthn.getRange({ start: [userId], end: [userId, '\uffff'] }))
      out.push(value as WebauthnCredentialRecord);
    return out;
  }

  #put(key: string, challenge: string, binding?: ChallengeBinding): void {
    const now = this.clock();
    for (const [k, c] of this.#challenges) if (c.expires <= now) this.#challenges.delete(k);
    this.#challenges.delete(key);
    this.#challenges.set(
      key,
      binding === undefined
        ? { challenge, expires: now + CHALLENGE_TTL_MS }
        : { challenge, expires: now + CHALLENGE_TTL_MS, binding },
    );
    // At most MAX_CHALLENGES_PER_USER per user: the oldest of this user's go first.
    const user = key.slice(0, key.indexOf('\0'));
    const mine = [...this.#challenges.keys()].filter((k) => k.startsWith(`${user}\0`));
    for (const k of mine.slice(0, Math.max(0, mine.length - MAX_CHALLENGES_PER_USER)))
      this.#challenges.delete(k);
  }

  /** Takes the challenge out (one use); undefined when there is none or it expired. */
  #take(key: string): Challenge | undefined {
    const c = this.#challenges.get(key);
    this.#challenges.delete(key);
    return c === undefined || c.expires <= this.clock() ? undefined : c;
  }

  async registrationOptions(p: Principal): Promise<unknown> {
    requirePerson(p);
    const existing = this.credentialsOf(p.id);
    const options = await generateRegistrationOptions({
      rpName: 'govgate',
      rpID: this.settings.rpId,
      userName: p.email ?? p.id,
      userID: new TextEncoder().encode(p.id),
      attestationType: 'none',
      excludeCredentials: existing.map((c) => ({ id: c.id })),
      authenticatorSelection: { residentKey: 'preferred', userVerification: 'required' },
      timeout: CHALLENGE_TTL_MS,
    });
    this.#put(`${p.id}\0register`, options.challenge);
    return options;
  }

  async register(p: Principal, response: unknown, name: string | null): Promise<WebauthnCredentialRecord> {
    requirePerson(p);
    const expectedChallenge = this.#take(`${p.id}\0register`)?.challenge;
    if (expectedChallenge === undefined)
      throw new ServiceError(
        'invalid_request',
        'no registration is under way: get options from POST /api/me/webauthn/register/options first (they last 5 minutes)',
      );
    if (this.credentialsOf(p.id).length >= MAX_CREDENTIALS_PER_USER)
      throw new ServiceError('conflict', `a user holds at most ${MAX_CREDENTIALS_PER_USER} authenticators`);
    let verified: Awaited<ReturnType<typeof verifyRegistrationResponse>>;
    try {
      verified = await verifyRegistrationResponse({
        response: response as RegistrationResponseJSON,
        expectedChallenge,
        expectedOrigin: [...this.settings.origins],
        expectedRPID: this.settings.rpId,
        requireUserVerification: true,
      });
    } catch (err) {
      throw new ServiceError('invalid_request', `the registration does not verify: ${libraryReason(err)}`, {
        param: 'response',
        cause: err,
      });
    }
    const info = verified.registrationInfo;
    if (!verified.verified || info === undefined)
      throw new ServiceError('invalid_request', 'the registration does not verify', { param: 'response' });
    const cred = info.credential;
    if (cred.id.length > MAX_CREDENTIAL_ID_CHARS)
      throw new ServiceError('invalid_request', 'the credential id is longer than WebAuthn allows', {
        param: 'response',
      });
    if (this.store.webauthn.get([p.id, cred.id]) !== undefined)
      throw new ServiceError('conflict', 'this authenticator is registered already');
    const record: WebauthnCredentialRecord = {
      id: cred.id,
      user_id: p.id,
      org_id: p.org_id,
      public_key: b64url(cred.publicKey),
      counter: cred.counter,
      transports: cred.transports ?? [],
      name,
      created_at: new Date(this.clock()).toISOString(),
    };
    await this.store.writer.enqueue(() => {
      // Its org deleted while the registration was verified: nothing is written for it (the
      // deletion's removeOrg may have run already).
      assertOrgLive(this.store, p.org_id);
      this.store.webauthn.putSync([p.id, cred.id], record);
    });
    return record;
  }

  /** Removes one of the user's authenticators; false when it has none by that id. */
  async remove(userId: string, credentialId: string): Promise<boolean> {
    if (credentialId.length > MAX_CREDENTIAL_ID_CHARS) return false;
    if (this.store.webauthn.get([userId, credentialId]) === undefined) return false;
    await this.store.writer.enqueue(() => this.store.webauthn.removeSync([userId, credentialId]));
    return true;
  }

  /** Removes every authenticator of a user (their erasure); returns how many there were. */
  async removeAll(userId: string): Promise<number> {
    const ids = this.credentialsOf(userId).map((c) => c.id);
    if (ids.length > 0)
      await this.store.writer.enqueue(() => {
        for (const id of ids) this.store.webauthn.removeSync([userId, id]);
      });
    return ids.length;
  }

  /**
   * The org is being deleted: every authenticator registered by one of its people goes, in one
   * write, found by the org each record names (its users are gone already when a deletion cut
   * short is run again, so they cannot be looked up by user id). Returns how many.
   */
  async removeOrg(orgId: string): Promise<number> {
    let n = 0;
    await this.store.writer.enqueue(() => {
      n = 0;
      for (const { key, value } of this.store.webauthn.getRange()) {
        if ((value as WebauthnCredentialRecord).org_id !== orgId) continue;
        this.store.webauthn.removeSync(key);
        n++;
      }
    });
    return n;
  }

  /** `GET /v1/me/approvals/{id}/challenge`: request options for this user's authenticators. */
  async challenge(
    p: Principal,
    approval: { readonly id: string; readonly fingerprint: string },
    decision: 'approve' | 'deny' | undefined,
  ): Promise<unknown> {
    requirePerson(p);
    const creds = this.credentialsOf(p.id);
    if (creds.length === 0)
      throw new ServiceError(
        'conflict',
        'register a WebAuthn authenticator first (POST /api/me/webauthn/register/options, then …/register/verify)',
      );
    const binding: ChallengeBinding = {
      scheme: BINDING_LABEL,
      nonce: randomBytes(16).toString('base64url'),
      approval_id: approval.id,
      fingerprint: approval.fingerprint,
      decision: decision ?? 'any',
    };
    const options = await generateAuthenticationOptions({
      challenge: boundChallenge(binding),
      rpID: this.settings.rpId,
      allowCredentials: creds.map((c) => ({ id: c.id, transports: c.transports as never })),
      userVerification: 'required',
      timeout: CHALLENGE_TTL_MS,
    });
    this.#put(`${p.id}\0${approval.id}`, options.challenge, binding);
    return {
      challenge: options.challenge,
      rpId: options.rpId,
      allowCredentials: options.allowCredentials,
      timeout: options.timeout,
      userVerification: options.userVerification,
    };
  }

  /**
   * Checks a signed-tier decision's assertion: made by one of the user's authenticators, over the
   * challenge issued to this user for this approval (used up here), with user verification, and a
   * signature counter that moved on (a cloned authenticator shows as one that did not).
   */
  async verify(
    p: Principal,
    approvalId: string,
    decision: 'approve' | 'deny',
    assertion: unknown,
  ): Promise<WebauthnEvidence> {
    requirePerson(p);
    const refuse = (why: string, cause?: unknown): ServiceError =>
      new ServiceError('webauthn_required', `the WebAuthn assertion does not verify: ${why}`, {
        param: 'webauthn',
        cause,
      });
    const a = assertion as Partial<AuthenticationResponseJSON> | null;
    if (a === null || typeof a !== 'object' || typeof a.id !== 'string' || typeof a.response !== 'object')
      throw refuse('expected the assertion as a browser returns it ({id, rawId, type, response: {...}})');
    const parts = a.response as unknown as Record<string, unknown>;
    for (const part of ['authenticatorData', 'clientDataJSON', 'signature'])
      if (typeof parts[part] !== 'string' || (parts[part] as string).length > MAX_ASSERTION_PART_CHARS)
        throw refuse(
          `response.${part} must be base64url text of at most ${MAX_ASSERTION_PART_CHARS} characters`,
        );
    const open = this.#take(`${p.id}\0${approvalId}`);
    if (open === undefined || open.binding === undefined)
      throw refuse(
        `no challenge is open for this approval: get one from GET /v1/me/approvals/${approvalId}/challenge`,
      );
    const expectedChallenge = open.challenge;
    const binding = open.binding;
    if (binding.decision !== 'any' && binding.decision !== decision)
      throw refuse(`the challenge was issued for the decision ${binding.decision}, not ${decision}`);
    if (a.id.length > MAX_CREDENTIAL_ID_CHARS)
      throw refuse('the credential id is longer than WebAuthn allows');
    const cred = this.store.webauthn.get([p.id, a.id]) as WebauthnCredentialRecord | undefined;
    if (cred === undefined) throw refuse('the authenticator is not registered to this user');
    let result: Awaited<ReturnType<typeof verifyAuthenticationResponse>>;
    try {
      result = await verifyAuthenticationResponse({
        response: a as AuthenticationResponseJSON,
        expectedChallenge,
        expectedOrigin: [...this.settings.origins],
        expectedRPID: this.settings.rpId,
        credential: {
          id: cred.id,
          publicKey: new Uint8Array(Buffer.from(cred.public_key, 'base64url')),
          counter: cred.counter,
        },
        requireUserVerification: true,
      });
    } catch (err) {
      throw refuse(libraryReason(err), err);
    }
    if (!result.verified) throw refuse('the signature does not verify');
    const info = result.authenticationInfo;
    // Read again in the commit that sets the counter: an assertion checked meanwhile may have
    // moved it (the same counter twice is a clone, or a replay), and a removal may have taken the
    // record (it must not be written back). An authenticator that keeps no counter (0, as synced
    // passkeys report) cannot be told from a clone; its one-time challenge still binds it.
    let refused: string | undefined;
    await this.store.writer.enqueue(() => {
      const now = this.store.webauthn.get([p.id, cred.id]) as WebauthnCredentialRecord | undefined;
      if (now === undefined) refused = 'the authenticator was removed';
      else if (info.newCounter <= now.counter && !(info.newCounter === 0 && now.counter === 0))
        refused = `its signature counter ${info.newCounter} did not move past ${now.counter} (a cloned authenticator?)`;
      else this.store.webauthn.putSync([p.id, cred.id], { ...now, counter: info.newCounter });
    });
    if (refused !== undefined) throw refuse(refused);
    const r = a.response as AuthenticationResponseJSON['response'];
    return {
      credential_id: cred.id,
      authenticator_data: r.authenticatorData,
      client_data_json: r.clientDataJSON,
      signature: r.signature,
      sign_count: info.newCounter,
      user_verified: info.userVerified,
      challenge_sha256: createHash('sha256').update(expectedChallenge).digest('hex'),
      challenge_binding: binding,
    };
  }
}

/**
 * Why the WebAuthn library refused a response, without the values it quotes of what it expected
 * (`expected "<the challenge>"`, the RP id hash): the caller learns what was wrong, not what
 * would have passed.
 */
function libraryReason(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/,?\s*expected\s+"[^"]*"/gi, '').replace(/\s*\(expected [^)]*\)/gi, '');
}
