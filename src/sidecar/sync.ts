import type { ChainLog } from '../audit/chain-log.js';
import type { StoredSeal } from '../audit/types.js';
import type { SealedSecret, Vault } from '../crypto/vault.js';
import type { SnapshotDoc } from '../snapshot/wire.js';
import type { Store } from '../store/db.js';
import type { Logger } from '../util/log.js';
import { type ControlClient, ControlError } from './control-client.js';
import type { RemoteSnapshot } from './snapshot.js';

/** The last snapshot, kept sealed in the local store so a restart decides before the control plane answers. */
const SNAPSHOT_KEY = 'sidecar_snapshot';
/** The mandate key ids the control plane last took, when, and for which token: `{kids, at, token}`. */
const MANDATE_KEYS_KEY = 'sidecar_mandate_keys_registered';
const SNAPSHOT_AAD = 'sidecar/snapshot';

/** How often the sidecar registers its mandate keys again. */
const KEYS_AGAIN_MS = 10 * 60_000;
/** How far this clock may be off the control plane's before the sidecar says so (a mandate lives 60 s). */
const MAX_CLOCK_SKEW_MS = 30_000;

/** Statuses after which the sidecar forgets its snapshot: the control plane no longer knows this sidecar. */
const REFUSED = new Set([401, 403]);
/** Statuses that refuse the mandate keys themselves (a conflict, a malformed key), not the sidecar. */
const KEYS_REFUSED = new Set([400, 409]);

/**
 * Pulls the org snapshot every `intervalMs` (a conditional GET: an unchanged snapshot costs a
 * 304) and puts each new one in force. A failure keeps the one in force and is tried again on
 * the next tick; a refused token (401, 403) clears it, so the sidecar stops deciding.
 */
export class SnapshotPoller {
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  failures = 0;
  /** Whether the control plane has this sidecar's mandate keys (it verifies its mandates then). */
  mandateKeysRegistered = false;
  /** Whether this clock is within MAX_CLOCK_SKEW_MS of the control plane's (as of the last pull). */
  clockAgrees = true;
  #keysAt = 0;
  /** Consecutive refusals of the mandate keys (#registerKeys). */
  #keysRefused = 0;

  constructor(
    private readonly client: ControlClient,
    private readonly snapshot: RemoteSnapshot,
    private readonly store: Store,
    private readonly vault: Vault,
    private readonly logger: Logger,
    private readonly intervalMs: number,
    /** The public JWKs of this sidecar's mandate keys, registered once a snapshot is in force. */
    private readonly mandateJwks: () => readonly unknown[],
    /** Called when the control plane answers again after failures (the shipper goes on at once). */
    private readonly onRecovered: () => void = () => {},
  ) {}

  /** The key ids of this sidecar's mandate keys, in order. */
  #kids(): string {
    return this.mandateJwks()
      .map((k) => String((k as { kid?: unknown }).kid))
      .join(',');
  }

  /**
   * Loads the snapshot kept from the last run, if any (it may be older than the control plane's),
   * and whether the control plane took the mandate keys this sidecar has now: a restart while it is
   * away keeps deciding and stays ready (it verifies the mandates of keys it took).
   */
  loadKept(): boolean {
    const keys = this.store.meta.get(MANDATE_KEYS_KEY) as
      | { kids: string; at: number; token?: string }
      | undefined;
    // Taken for this sidecar (its token): a new token is another sidecar to the control plane.
    if (keys !== undefined && keys.kids === this.#kids() && keys.token === this.client.tokenDigest) {
      this.mandateKeysRegistered = true;
      this.#keysAt = keys.at;
    }
    const sealed = this.store.meta.get(SNAPSHOT_KEY) as
      | { etag: string; at: number; doc: SealedSecret }
      | undefined;
    if (sealed === undefined) return false;
    try {
      const doc = JSON.parse(this.vault.open(sealed.doc, SNAPSHOT_AAD)) as SnapshotDoc;
      this.snapshot.apply(doc, sealed.etag, sealed.at);
      return true;
    } catch (err) {
      this.logger.warn('the kept snapshot could not be read; waiting for the control plane', {
        error: String(err),
      });
      return false;
    }
  }

  start(): void {
    const tick = (): void => {
      this.#running ??= this.pollOnce().then(
        () => {
          this.#running = undefined;
        },
        () => {
          this.#running = undefined;
        },
      );
    };
    tick();
    this.#timer = setInterval(tick, this.intervalMs);
    this.#timer.unref();
  }

  /** One pull; resolves true when a snapshot is in force afterwards. */
  async pollOnce(): Promise<boolean> {
    let step: 'snapshot' | 'mandate_keys' = 'snapshot';
    try {
      const got = await this.client.snapshot(this.snapshot.etag);
      if (got !== undefined) {
        const at = Date.now();
        this.snapshot.apply(got.doc, got.etag, at);
        const sealed = this.vault.seal(JSON.stringify(got.doc), SNAPSHOT_AAD);
        await this.store.writer.enqueue(() =>
          this.store.meta.putSync(SNAPSHOT_KEY, { etag: got.etag, at, doc: sealed }),
        );
        this.logger.info('snapshot in force', { org_id: got.doc.org_id, etag: got.etag });
      } else this.snapshot.touch();
      // Registered once a snapshot is in force, and again every few minutes: the control plane
      // stops publishing a key it has not seen for a day.
      if (!this.mandateKeysRegistered || Date.now() - this.#keysAt >= KEYS_AGAIN_MS) {
        step = 'mandate_keys';
        await this.#registerKeys();
      }
      this.#checkClock();
      if (this.failures > 0) this.onRecovered();
      this.failures = 0;
    } catch (err) {
      this.failures++;
      if (err instanceof ControlError && REFUSED.has(err.status)) {
        if (this.snapshot.loaded)
          this.logger.error(
            'the control plane refused this sidecar token: no call is decided until it accepts one',
            {
              status: err.status,
            },
          );
        this.snapshot.clear();
        this.mandateKeysRegistered = false;
        await this.store.writer
          .enqueue(() => {
            this.store.meta.removeSync(SNAPSHOT_KEY);
            this.store.meta.removeSync(MANDATE_KEYS_KEY);
          })
          .catch(() => {});
      } else if (this.failures === 1 || this.failures % 60 === 0) {
        this.logger.warn(
          step === 'snapshot'
            ? 'the control plane cannot be reached for the snapshot; deciding from the one in force'
            : 'the control plane cannot be reached to register the mandate keys; tried again',
          {
            error: String(err),
            failures: this.failures,
          },
        );
      }
    }
    return this.snapshot.loaded;
  }

  /**
   * Registers this sidecar's mandate keys. A refusal of the keys themselves (409: a key id the
   * control plane holds for another key or another sidecar, such as the old token of a rotation
   * not revoked yet; 400) is not an outage: the snapshot was pulled, and the control plane will
   * answer the same until an operator acts. It leaves readiness `mandate_keys` false, says what
   * the control plane answered in an error line (the first time, then every 60th), and is tried
   * again on each poll, so the sidecar is ready within a poll of the fix.
   */
  async #registerKeys(): Promise<void> {
    try {
      await this.client.registerMandateKeys(this.mandateJwks());
    } catch (err) {
      if (!(err instanceof ControlError) || !KEYS_REFUSED.has(err.status)) throw err;
      // Not taken now, so not remembered as taken either: a restart while the control plane is
      // away must not report ready on an older registration.
      if (this.mandateKeysRegistered)
        await this.store.writer.enqueue(() => this.store.meta.removeSync(MANDATE_KEYS_KEY)).catch(() => {});
      this.mandateKeysRegistered = false;
      this.#keysRefused++;
      if (this.#keysRefused === 1 || this.#keysRefused % 60 === 0)
        this.logger.error(
          "the control plane refused this sidecar's mandate keys (its answer says why): not ready until they are taken",
          { status: err.status, error: err.message, refusals: this.#keysRefused },
        );
      return;
    }
    if (this.#keysRefused > 0) this.logger.info("the control plane took this sidecar's mandate keys");
    this.#keysRefused = 0;
    this.mandateKeysRegistered = true;
    this.#keysAt = Date.now();
    const record = { kids: this.#kids(), at: this.#keysAt, token: this.client.tokenDigest };
    await this.store.writer.enqueue(() => this.store.meta.putSync(MANDATE_KEYS_KEY, record));
  }

  /**
   * Mandates carry this clock's times, and agent keys expire by it: minutes off the control
   * plane's, the sidecar's mandates are refused there (not yet valid) or, behind, it takes keys
   * past their expiry. Reported (readiness `clock`, a gauge, a log line when it changes).
   */
  #checkClock(): void {
    const skew = this.client.clockSkewMs;
    const agrees = Math.abs(skew) <= MAX_CLOCK_SKEW_MS;
    if (agrees !== this.clockAgrees) {
      if (agrees) this.logger.info("this clock agrees with the control plane's again", { skew_ms: skew });
      else
        this.logger.error(
          "this clock is off the control plane's: mandates it signs may be refused, agent keys taken past their expiry; sync the clock (NTP)",
          { skew_ms: skew },
        );
    }
    this.clockAgrees = agrees;
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    await this.#running;
  }
}

/** One push: at most this many entries, and about this many bytes. */
const BATCH_ENTRIES = 500;
const BATCH_BYTES = 2 * 1024 * 1024;
const RETRY_MIN_MS = 250;
/** How long a push waits for the seal of entries not sealed yet. */
const SEAL_WAIT_MS = 100;
/** The local log is cut once this many acknowledged entries are past its last cut. */
const PRUNE_AFTER = 10_000;
/**
 * …or once this long has passed since its last cut with any acknowledged entry past it: a quiet
 * sidecar keeps an acknowledged entry (personal values included) at most about twice this long,
 * so an erasure at the control plane has no copy here to miss for longer than that.
 */
const PRUNE_AGE_MS = 5 * 60_000;
const RETRY_MAX_MS = 30_000;

/**
 * Ships the sidecar's log to the control plane: every committed entry after what the control
 * plane acknowledged, in order, in batches, as soon as it is committed. A failure is tried again
 * with a growing delay; a 409 (the control plane holds a different point of this log) reads the
 * control plane's state again and goes on from there. Nothing is dropped: the local log keeps
 * every entry (docs/sidecar.md).
 */
export class Shipper {
  /** The last index the control plane acknowledged (-1: not asked yet). */
  acked = -1;
  /**
   * Set when the control plane holds this log further than the local store does, or another
   * entry at its head: the store went back in time (restored from a copy, a disk that lost
   * writes). Nothing written since can join the org chain; the sidecar says so and keeps it.
   */
  diverged: { readonly control: number; readonly local: number } | undefined;
  failures = 0;
  #org: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #registered = false;
  #delay = RETRY_MIN_MS;
  #closed = false;

  /** Acknowledged entries past the last cut before the log is cut again. */
  readonly #pruneAfter: number;
  /** Time since the last cut after which any acknowledged entry is cut. */
  readonly #pruneAgeMs: number;
  /**
   * When this process last cut the log; 0 until it has: what a run before it left acknowledged
   * (of any age: a sidecar restarted more often than pruneAgeMs never reached it) is cut at the
   * first occasion.
   */
  #lastCut = 0;
  readonly #ageTimer: NodeJS.Timeout;
  #pruning: Promise<void> | undefined;
  /** Resolves once the local store's commits so far are on disk (Store.durable). */
  readonly #durable: () => Promise<void>;

  constructor(
    private readonly client: ControlClient,
    private readonly log: ChainLog,
    private readonly epoch: string,
    private readonly logger: Logger,
    opts: { pruneAfter?: number; pruneAgeMs?: number; durable?: () => Promise<void> } = {},
  ) {
    this.#pruneAfter = opts.pruneAfter ?? PRUNE_AFTER;
    this.#pruneAgeMs = opts.pruneAgeMs ?? PRUNE_AGE_MS;
    // No push follows the last one of a quiet sidecar: its age is looked at on a timer.
    this.#ageTimer = setInterval(() => {
      if (this.#org !== undefined && this.failures === 0 && this.#running === undefined)
        this.#maybePrune(this.#org);
    }, this.#pruneAgeMs);
    this.#ageTimer.unref();
    this.#durable = opts.durable ?? (() => Promise.resolve());
  }

  /** The org whose chain this sidecar writes (known from the snapshot). */
  set org(org: string | undefined) {
    if (org !== this.#org) {
      this.#org = org;
      this.acked = -1;
      this.#startSeq = org === undefined ? 0 : this.log.lastSeq(org);
    }
  }

  /** Entries committed and not yet acknowledged (past a divergence: every entry since it). */
  get unshipped(): number {
    const org = this.#org;
    if (org === undefined) return 0;
    const last = this.log.lastSeq(org);
    if (this.diverged !== undefined) return Math.max(0, last - this.#divergedFrom);
    return Math.max(0, last - Math.max(0, this.acked));
  }

  /** The local head when this org's log was first read here (before anything written since). */
  #startSeq = 0;
  /** Where the local log left the control plane's: what came after it is not shipped. */
  #divergedFrom = 0;

  /**
   * The control plane's point of this log, checked against the local log: the same entry at its
   * index, or an index the local log has not reached yet. A divergence is reported (an error
   * line, readiness, a gauge) and refused like a failure, tried again with the growing delay.
   */
  async #readState(org: string): Promise<number> {
    const state = await this.client.state(this.epoch);
    const last = this.log.lastSeq(org);
    let same = state.index <= last;
    if (same && state.index > this.log.prunedThrough(org) && state.index > 0) {
      const [entry] = this.log.eventTexts(org, state.index, state.index);
      same = entry !== undefined && (JSON.parse(entry.json) as { hash?: unknown }).hash === state.hash;
    }
    if (same) {
      if (this.diverged !== undefined)
        this.logger.info('the control plane holds this sidecar log at a point it has again', {
          index: state.index,
        });
      this.diverged = undefined;
      return state.index;
    }
    if (this.diverged === undefined) {
      // A store that went back in time did so before this process wrote anything.
      this.#divergedFrom = Math.min(this.#startSeq, last, state.index);
      this.logger.error(
        'the control plane holds this sidecar log further than its local store (restored from a copy, or a disk that lost writes): entries written since cannot be shipped; they stay in the local log. Start the sidecar on a new data dir to begin a new log, and keep this one for the audit',
        { epoch: this.epoch, control_index: state.index, local_index: last },
      );
    }
    this.diverged = { control: state.index, local: last };
    throw new Error(`sidecar log diverged from the control plane (control ${state.index}, local ${last})`);
  }

  /**
   * The control plane answers again: the push waiting out a failure's delay (up to 30 s) goes now,
   * and the delay starts again from its least.
   */
  retryNow(): void {
    if (this.#timer === undefined || this.failures === 0) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#delay = RETRY_MIN_MS;
    this.kick();
  }

  /** Asks for a push now (after a commit); pushes already running pick the new entries up. */
  kick(): void {
    if (this.#closed) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    if (this.#timer) return; // waiting out a failure's delay
    this.#running = this.#run().finally(() => {
      this.#running = undefined;
      if (this.#again && !this.#closed && this.#timer === undefined) {
        this.#again = false;
        this.kick();
      }
    });
  }

  async #run(): Promise<void> {
    const org = this.#org;
    if (org === undefined) return;
    try {
      if (!this.#registered) {
        await this.client.registerLog(this.epoch, this.log.publicDocument());
        this.#registered = true;
      }
      if (this.acked < 0 || this.diverged !== undefined) this.acked = await this.#readState(org);
      for (;;) {
        const last = this.log.lastSeq(org);
        if (this.acked >= last) break;
        const batch = this.#batch(org, last);
        if (batch === undefined) {
          // Entries wait for their seal (cut within 250 ms): the control plane takes a batch that
          // ends on one, whose signatures it checks.
          this.#later(SEAL_WAIT_MS);
          break;
        }
        try {
          // Only what is on this machine's disk is shipped: an entry the control plane holds and a
          // crash of this machine then took from the local log (the fsync runs every 100 ms)
          // would fork the log, and every later entry would be refused.
          await this.#durable();
          this.acked = (await this.client.push(this.epoch, batch.texts, batch.seals)).index;
        } catch (err) {
          if (err instanceof ControlError && err.status === 409) {
            this.logger.warn('the control plane holds another point of this sidecar log; reading it again', {
              error: err.message,
            });
            this.acked = await this.#readState(org);
            if (this.acked >= last) break;
            // The same batch again would meet the same answer: a real fork needs an operator.
            throw err;
          }
          throw err;
        }
      }
      this.failures = 0;
      this.#delay = RETRY_MIN_MS;
      this.#maybePrune(org);
    } catch (err) {
      this.failures++;
      if (this.failures === 1 || this.failures % 20 === 0)
        this.logger.warn('audit entries could not be shipped to the control plane; kept, and tried again', {
          error: String(err),
          unshipped: this.unshipped,
          failures: this.failures,
        });
      if (!this.#closed) {
        this.#timer = setTimeout(() => {
          this.#timer = undefined;
          this.kick();
        }, this.#delay);
        this.#timer.unref();
        this.#delay = Math.min(RETRY_MAX_MS, this.#delay * 2);
      }
    }
  }

  /**
   * The next batch: the entries after `acked` through the furthest seal within the bounds (at
   * least the first seal, whatever its size), with the seals among them; undefined while no
   * entry after `acked` is sealed yet.
   */
  #batch(org: string, last: number): { texts: string[]; seals: StoredSeal[] } | undefined {
    const seals: StoredSeal[] = [];
    let bytes = 0;
    let end = 0;
    for (const seal of this.log.sealsBetween(org, this.acked + 1, last)) {
      if (seals.length > 0 && seal.size - this.acked > BATCH_ENTRIES) break;
      seals.push(seal);
      end = seal.size;
      bytes += seal.note.length;
      if (bytes >= BATCH_BYTES) break;
    }
    if (end === 0) return undefined;
    const texts: string[] = [];
    for (const { json } of this.log.eventTexts(org, this.acked + 1, end)) {
      texts.push(json);
      bytes += json.length;
    }
    // A batch over the byte bound is cut back to the last seal within it (never below the first).
    while (bytes > BATCH_BYTES && seals.length > 1) {
      seals.pop();
      const cut = (seals[seals.length - 1] as StoredSeal).size - this.acked;
      for (const t of texts.splice(cut)) bytes -= t.length;
    }
    return { texts, seals };
  }

  /** Kicks again after `ms` (unless one is already due). */
  #later(ms: number): void {
    if (this.#timer || this.#closed) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.kick();
    }, ms);
    this.#timer.unref();
  }

  /**
   * Cuts the local log at the newest seal boundary the control plane has acknowledged, once
   * enough is acknowledged past the last cut, or it was cut `pruneAgeMs` ago or longer: what the org chain holds is not kept twice (an
   * erasure at the control plane then has no copy here to miss). The cut is a retention cut
   * without an archive: a `_chain_bridge` keeps what is left verifiable.
   */
  #maybePrune(org: string): void {
    if (this.#pruning !== undefined || this.#closed) return;
    const past = this.acked - this.log.prunedThrough(org);
    if (past < this.#pruneAfter && (past <= 0 || Date.now() - this.#lastCut < this.#pruneAgeMs)) return;
    const toSeq = this.log.pruneCutAt(org, this.acked);
    if (toSeq === undefined || toSeq <= this.log.prunedThrough(org)) return;
    this.#pruning = this.log
      .prune(org, toSeq)
      .then(
        () => {
          this.#lastCut = Date.now();
        },
        (err: unknown) =>
          this.logger.warn(
            'the acknowledged part of the sidecar log could not be cut; kept, and tried later',
            {
              error: String(err),
            },
          ),
      )
      .finally(() => {
        this.#pruning = undefined;
      });
  }

  /** Ships what it can within `graceMs`, then stops; what is left stays in the local log for the next start. */
  async close(graceMs: number): Promise<void> {
    clearInterval(this.#ageTimer);
    if (this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    this.kick();
    const done = (async () => {
      while (this.#running) await this.#running;
    })();
    await Promise.race([done, new Promise((r) => setTimeout(r, graceMs).unref())]);
    this.#closed = true;
    await this.#pruning;
    if (this.#timer) clearTimeout(this.#timer);
  }
}
