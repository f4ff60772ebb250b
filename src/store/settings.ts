import type { SealedSecret, Vault } from '../crypto/vault.js';
import type { ProviderSettings } from '../providers/types.js';
import { OrgGenerations } from '../util/org-generations.js';
import type { Store } from './db.js';

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

  /** Seals `secret` into the vault slot `ref`, bound to the org. */
  sealSecret(orgId: string, ref: string, secret: string): void {
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
}
