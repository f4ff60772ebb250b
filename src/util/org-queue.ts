/**
 * Runs one org's jobs of several kinds one at a time, in the order they were asked for; other
 * orgs' jobs run alongside. For work that rewrites the same data two ways at once: an erasure
 * tombstones an org's events while a retention run copies them into an archive and deletes them,
 * and either one running inside the other leaves an unerased copy behind.
 */
export class OrgQueue {
  readonly #tails = new Map<string, Promise<void>>();

  async run<T>(org: string, job: () => Promise<T>): Promise<T> {
    const before = this.#tails.get(org) ?? Promise.resolve();
    let release!: () => void;
    const done = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tail = before.then(() => done);
    this.#tails.set(org, tail);
    try {
      await before;
      return await job();
    } finally {
      release();
      if (this.#tails.get(org) === tail) this.#tails.delete(org);
    }
  }
}
