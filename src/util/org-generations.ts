/**
 * A change counter per org, beside a repository's deployment-wide `generation`: a cache of one
 * org's data (a sidecar snapshot) is rebuilt when that org changed, not whenever any org did.
 */
export class OrgGenerations {
  readonly #counts = new Map<string, number>();

  bump(orgId: string): void {
    this.#counts.set(orgId, (this.#counts.get(orgId) ?? 0) + 1);
  }

  of(orgId: string): number {
    return this.#counts.get(orgId) ?? 0;
  }
}
