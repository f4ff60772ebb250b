import type { SealedSecret, Vault } from '../crypto/vault.js';
import type { ProviderSettings } from '../providers/types.js';
import { OrgGenerations } from '../util/org-generations.js';
import type { Store } from './db.js';
import { assertOrgLive } from './org-tombstone.js';

/** Org settings (provider list) and the vault slots that hold their secrets. */
export class SettingsRepo {
  /** Grows on every change, so snapshot caches know when to rebuild. */
  generation = 0;
  /** Changes per org (`generation` counts them all): see OrgGenerations. */
  readonly orgGenerations = new OrgGenerations();

  constructor(
    private readonly store: Store,
    private readonly vault: Vault,
  ) {}

  providers(orgId: string): ProviderSettings[] {
    return (this.store.settings.get([orgId, 'providers']) as ProviderSettings[] | undefined) ?? [];
  }

  /** Seals `secret` into the vault slot `ref`, bound to the org (404 when the org was deleted). */
  sealSecret(orgId: string, ref: string, secret: string): void {
    assertOrgLive(this.store, orgId);
    this.store.vault.putSync([orgId, ref], this.vault.seal(secret, `${orgId}/${ref}`));
  }

  /** Deletes the vault slot `ref` of the org (nothing when it is empty). */
  removeSecret(orgId: string, ref: string): void {
    this.store.vault.removeSync([orgId, ref]);
  }

  openSecret(orgId: string, ref: string): string | undefined {
    const sealed = this.store.vault.get([orgId, ref]) as SealedSecret | undefined;
    return sealed === undefined ? undefined : this.vault.open(sealed, `${orgId}/${ref}`);
  }

  /** Replaces the org's provider list; vault slots no longer referenced are deleted. */
  setProviders(
    orgId: string,
    entries: readonly ProviderSettings[],
    secrets: ReadonlyMap<string, string>,
  ): void {
    const before = this.providers(orgId);
    this.store.root.transactionSync(() => {
      assertOrgLive(this.store, orgId);
      for (const [ref, secret] of secrets) this.sealSecret(orgId, ref, secret);
      const kept = new Set(entries.map((e) => e.key_ref));
      for (const old of before) {
        if (old.key_ref !== null && !kept.has(old.key_ref)) this.store.vault.removeSync([orgId, old.key_ref]);
      }
      this.store.settings.putSync([orgId, 'providers'], entries);
    });
    this.generation++;
    this.orgGenerations.bump(orgId);
  }

  /**
   * The org is being deleted: every vault slot of the org (provider keys, tool header values,
   * destination tokens and URLs) and every settings entry under it (its provider list, what is
   * left of its destinations and their delivery logs) are deleted, in one transaction. Returns
   * how many secrets and settings entries went.
   */
  dropOrg(orgId: string): { secrets: number; settings: number } {
    const n = { secrets: 0, settings: 0 };
    this.store.root.transactionSync(() => {
      for (const key of this.store.vault.getKeys({ start: [orgId] })) {
        if ((key as unknown[])[0] !== orgId) break;
        this.store.vault.removeSync(key);
        n.secrets++;
      }
      for (const key of this.store.settings.getKeys({ start: [orgId] })) {
        if ((key as unknown[])[0] !== orgId) break;
        this.store.settings.removeSync(key);
        n.settings++;
      }
    });
    this.generation++;
    this.orgGenerations.bump(orgId);
    return n;
  }
}
