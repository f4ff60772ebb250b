// A bound on how many things of one kind an org holds (alert destinations, export destinations),
// kept also when additions are asked at once: an addition holds its place from the count until it
// is stored, since the checks and the write in between wait (a URL resolved, a store write), and
// every addition counted before any was stored would see room.

import { ServiceError } from '../core/errors.js';

export class OrgBound {
  readonly #max: number;
  /** What is counted, plural, for the refusal ("alert destinations"). */
  readonly #what: string;
  /** Additions under way per org. */
  readonly #adding = new Map<string, number>();

  constructor(max: number, what: string) {
    this.#max = max;
    this.#what = what;
  }

  /**
   * Runs `add` for `org`, which holds `held` now, and answers what it answers; 409 conflict, without
   * running it, when the org's holdings and the additions under way reach the bound.
   */
  async add<T>(org: string, held: number, add: () => Promise<T>): Promise<T> {
    const adding = this.#adding.get(org) ?? 0;
    if (held + adding >= this.#max)
      throw new ServiceError(
        'conflict',
        `an org holds at most ${this.#max} ${this.#what}: delete one to add another`,
      );
    this.#adding.set(org, adding + 1);
    try {
      return await add();
    } finally {
      const left = (this.#adding.get(org) ?? 1) - 1;
      if (left === 0) this.#adding.delete(org);
      else this.#adding.set(org, left);
    }
  }
}
