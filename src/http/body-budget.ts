/**
 * The request body bytes one server holds while it reads bodies, across all its requests. A body
 * is read whole before its request is handled (and before its credential is checked), so without
 * a bound many clients sending large bodies slowly, or declaring them and stalling, hold memory
 * together without limit. Past it, a body is refused (503, adapters' `busy`) instead of read.
 */
export class BodyBudget {
  #held = 0;

  constructor(readonly max: number = MAX_BUFFERED_BODY_BYTES) {}

  /** Bytes held now. */
  get held(): number {
    return this.#held;
  }

  /** Takes `n` more bytes; false (nothing taken) when that would pass the bound. */
  take(n: number): boolean {
    if (this.#held + n > this.max) return false;
    this.#held += n;
    return true;
  }

  give(n: number): void {
    this.#held -= n;
  }
}

/**
 * The default bound: room for a sidecar's largest audit batch (96 MiB) several times over and for
 * about a hundred 5 MiB calls read at once, far less than the memory a process is given.
 */
export const MAX_BUFFERED_BODY_BYTES = 512 * 1024 * 1024;
