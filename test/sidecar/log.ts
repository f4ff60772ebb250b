import { randomBytes } from 'node:crypto';
import { formatCheckpoint } from '../../src/core/chain/checkpoint.js';
import { buildPersonal } from '../../src/core/chain/commitment.js';
import { type ChainEvent, GENESIS, linkEvent } from '../../src/core/chain/event.js';
import { leafHash, MerkleBuilder } from '../../src/core/chain/merkle.js';
import { signNote } from '../../src/core/chain/note.js';
import type { TestSigner } from '../audit/helpers.js';
import { draft } from '../core/chain/helpers.js';

/**
 * `n` linked entries of a sidecar log of `org` after `prev` (seq and hash): `llm_call` events with
 * an erasable personal field, as a sidecar writes them.
 */
export function sidecarEntries(
  org: string,
  n: number,
  prev: { seq: number; hash: string } = { seq: 0, hash: GENESIS },
  over: Partial<ChainEvent> = {},
): ChainEvent[] {
  const out: ChainEvent[] = [];
  let { seq, hash } = prev;
  for (let i = 0; i < n; i++) {
    seq++;
    const e = linkEvent(
      hash,
      draft(seq, {
        org_id: org,
        ts: new Date().toISOString(),
        event_type: 'llm_call',
        pipeline_id: `pl_sync_${seq}_${randomBytes(4).toString('hex')}`,
        details: { n: seq },
        personal: buildPersonal({ end_user: `user-${seq}@example.com` }, () =>
          randomBytes(16).toString('base64url'),
        ),
        ...over,
      }),
    );
    out.push(e);
    hash = e.hash;
  }
  return out;
}

/** The seal of `org`'s sidecar log whose entry hashes are `hashes` (1..n), signed by `signer`. */
export function sealOf(
  org: string,
  hashes: readonly string[],
  signer: TestSigner,
): { size: number; note: string } {
  const tree = new MerkleBuilder();
  for (const h of hashes) tree.push(leafHash(h));
  const body = formatCheckpoint({
    origin: `govgate/${org}`,
    size: hashes.length,
    rootHash: tree.root(),
    head: hashes[hashes.length - 1] as string,
  });
  return { size: hashes.length, note: signNote(body, signer.signers) };
}
