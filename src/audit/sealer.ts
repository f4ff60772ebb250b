import { formatCheckpoint } from '../core/chain/index.js';
import type { Store } from '../store/db.js';
import type { JsonlLog } from './jsonl-log.js';
import { SEAL_KIND, SEAL_SIZE_KIND } from './layout.js';
import type { OrgHead } from './org-head.js';
import type { SealSigner, StoredSeal } from './types.js';

export interface SealerOptions {
  /** A seal is cut at most this long after the first unsealed event… */
  readonly intervalMs: number;
  /** …or as soon as this many events are unsealed… */
  readonly every: number;
  /** …or as soon as their lines hold this many characters. */
  readonly maxChars: number;
  readonly clock: () => number;
}

/**
 * Cuts the seals of org chains: the checkpoint of the head is fixed synchronously, signed
 * asynchronously (ML-DSA runs in the signer's worker), then stored in its own transaction and
 * written to the JSONL log. One seal in flight per org; appends never wait for one. A failed
 * signature leaves the events unsealed (they still verify by their links) and is retried when
 * the timer next fires.
 */
export class Sealer {
  readonly #store: Store;
  readonly #signer: SealSigner;
  readonly #jsonl: JsonlLog;
  readonly #opts: SealerOptions;
  #stopped = false;
  #error: unknown;

  constructor(store: Store, signer: SealSigner, jsonl: JsonlLog, opts: SealerOptions) {
    this.#store = store;
    this.#signer = signer;
    this.#jsonl = jsonl;
    this.#opts = opts;
  }

  get lastError(): unknown {
    return this.#error;
  }

  /** After an append: cut now when enough events wait, else make sure a timer will. */
  check(head: OrgHead): void {
    if (head.sealing !== undefined || head.dead || this.#stopped || head.seq <= head.cutSize) return;
    if (
      !head.backoff &&
      (head.seq - head.cutSize >= this.#opts.every || head.chars - head.cutChars >= this.#opts.maxChars)
    ) {
      this.cut(head);
      return;
    }
    if (head.timer === undefined) {
      head.timer = setTimeout(this.#onTimer, this.#opts.intervalMs, head);
      head.timer.unref();
    }
  }

  readonly #onTimer = (head: OrgHead): void => {
    head.timer = undefined;
    head.backoff = false;
    if (head.sealing === undefined && !head.dead && head.seq > head.cutSize) this.cut(head);
  };

  /** Cuts a seal at the head now; resolves once it is stored (or has failed). */
  cut(head: OrgHead): Promise<void> {
    if (head.timer !== undefined) clearTimeout(head.timer);
    head.timer = undefined;
    const org = head.org;
    const size = head.seq;
    const previous = head.cutSize;
    const previousChars = head.cutChars;
    const sealSeq = head.sealSeq + 1;
    const ts = new Date(this.#opts.clock()).toISOString();
    const body = formatCheckpoint({ origin: head.origin, size, rootHash: head.tree.root(), head: head.hash });
    head.cutSize = size;
    head.cutChars = head.chars;
    const hold = this.#jsonl.hold(org, size);
    const { auditMeta } = this.#store;
    let stored = false;
    const sealing = Promise.resolve()
      .then(() => this.#signer.sign(body))
      .then((note) => {
        if (head.dead) throw new Error(`the chain head of ${org} was reset while sealing`);
        const seal: StoredSeal = { seq: sealSeq, size, note, ts };
        return this.#store.writer
          .enqueue(() => {
            auditMeta.putSync([org, SEAL_KIND, sealSeq], seal);
            auditMeta.putSync([org, SEAL_SIZE_KIND, size], sealSeq);
          })
          .then(() => {
            stored = true;
            head.sealSeq = sealSeq;
            head.sealedSize = size;
            this.#jsonl.seal(org, seal, hold);
          });
      })
      .catch((err: unknown) => {
        this.#error = err;
        if (stored) return;
        head.cutSize = previous;
        head.cutChars = previousChars;
        head.backoff = true;
        this.#jsonl.release(org, hold);
      })
      .finally(() => {
        head.sealing = undefined;
        this.check(head);
      });
    head.sealing = sealing;
    return sealing;
  }

  /** Seals every head up to its current seq; rejects with the signer's error if one fails. */
  async flush(heads: Iterable<OrgHead>): Promise<void> {
    const targets = new Map<OrgHead, number>();
    for (const head of heads) if (head.sealedSize < head.seq) targets.set(head, head.seq);
    while (targets.size > 0) {
      const waits: Promise<void>[] = [];
      for (const [head, target] of targets) {
        if (head.dead || head.sealedSize >= target) targets.delete(head);
        else waits.push(head.sealing ?? this.cut(head));
      }
      if (waits.length === 0) return;
      const before = this.#error;
      await Promise.all(waits);
      if (this.#error !== before) throw this.#error;
    }
  }

  /** No new seals from timers or appends (`flush` still cuts). */
  stop(heads: Iterable<OrgHead>): void {
    this.#stopped = true;
    for (const head of heads) {
      if (head.timer !== undefined) clearTimeout(head.timer);
      head.timer = undefined;
    }
  }
}
