import { setImmediate as yieldTurn } from 'node:timers/promises';
import type { Store } from '../store/db.js';
import { HASHED_SUFFIX, ID_KIND, INDEX_KINDS, SEAL_KIND, SEAL_SIZE_KIND } from './layout.js';
import { STORED_NODE_LEVEL } from './org-head.js';

/** Keys removed per transaction: a large prefix is deleted in steps, the loop free between them. */
const BATCH = 2_000;

type Key = readonly (string | number)[];

/**
 * Deletes what an org chain holds through seq `toSeq` once its `_chain_bridge` is committed
 * (readers already skip it: see `ChainReader.firstSeq`, `IntegrityScan`): the events, their id
 * index entries, posting lists that end at or before it, the seals before it (the one at it is the
 * bridge's), and the stored Merkle nodes inside it other than its compact range (`keep`, which
 * proofs of later events use). Rollups stay: counts, nothing personal. Safe to run again: it
 * deletes what is left.
 */
export async function deletePrunedPrefix(
  store: Pick<Store, 'auditEvents' | 'auditIndex' | 'auditNodes' | 'auditMeta' | 'writer'>,
  org: string,
  toSeq: number,
  keep: ReadonlySet<string>,
): Promise<{ events: number; seals: number }> {
  const { auditEvents, auditIndex, auditNodes, auditMeta, writer } = store;
  const events = await drain(
    writer,
    auditEvents,
    collect(
      auditEvents,
      [org],
      () => true,
      (key) => !(Number(key[1]) <= toSeq),
    ),
  );
  // Id index entries of pruned events; posting lists whose last seq is pruned.
  await drain(
    writer,
    auditIndex,
    collect(auditIndex, [org, ID_KIND], (_k, v) => typeof v === 'number' && v <= toSeq),
  );
  for (const kind of Object.values(INDEX_KINDS))
    for (const k of [kind, kind + HASHED_SUFFIX])
      await drain(
        writer,
        auditIndex,
        collect(auditIndex, [org, k], (key) => Number(key[3]) <= toSeq),
      );
  // Seals before the cut, by tree size ('z') and by number ('s').
  let seals = 0;
  for (;;) {
    const batch: Array<{ size: number; seq: number }> = [];
    for (const { key, value } of auditMeta.getRange({ start: [org, SEAL_SIZE_KIND, 0] })) {
      const k = key as Key;
      if (k[0] !== org || k[1] !== SEAL_SIZE_KIND || !(Number(k[2]) < toSeq) || batch.length === BATCH) break;
      batch.push({ size: Number(k[2]), seq: value as number });
    }
    if (batch.length === 0) break;
    await writer.enqueue(() => {
      for (const b of batch) {
        auditMeta.removeSync([org, SEAL_SIZE_KIND, b.size]);
        auditMeta.removeSync([org, SEAL_KIND, b.seq]);
      }
    });
    seals += batch.length;
    await yieldTurn();
  }
  // Stored nodes wholly inside the pruned leaves, but for the compact range.
  for (let level = STORED_NODE_LEVEL; level <= 52 && 2 ** level <= toSeq; level++) {
    const width = 2 ** level;
    await drain(
      writer,
      auditNodes,
      collect(
        auditNodes,
        [org, level],
        (key) => !keep.has(`${level}/${key[2]}`),
        (key) => (Number(key[2]) + 1) * width > toSeq,
      ),
    );
  }
  return { events, seals };
}

type AnyDb = Store['auditIndex'];

/** A batch of keys to remove, and the key the next read starts at (none: the end was reached). */
interface Batch {
  readonly keys: Key[];
  readonly next: Key | undefined;
}

/** Removes the keys `read` lists, a batch a transaction, until it reaches the end; returns how many. */
async function drain(
  writer: Store['writer'],
  db: AnyDb,
  read: (from: Key | undefined) => Batch,
): Promise<number> {
  let n = 0;
  let from: Key | undefined;
  for (;;) {
    const { keys, next } = read(from);
    if (keys.length > 0) {
      await writer.enqueue(() => {
        for (const k of keys) db.removeSync(k as (string | number)[]);
      });
      n += keys.length;
    }
    if (next === undefined) return n;
    from = next;
    await yieldTurn();
  }
}

/**
 * Up to BATCH keys under `prefix` that `pick` selects, read in key order from `from` (else the
 * prefix's start); the read ends at the first key outside the prefix, or one `stop` says ends the
 * candidates.
 */
function collect(
  db: AnyDb,
  prefix: Key,
  pick: (key: Key, value: unknown) => boolean,
  stop: (key: Key) => boolean = () => false,
): (from: Key | undefined) => Batch {
  return (from) => {
    const keys: Key[] = [];
    for (const { key, value } of db.getRange({ start: (from ?? prefix) as (string | number)[] })) {
      const k = key as Key;
      if (prefix.some((p, i) => k[i] !== p) || stop(k)) return { keys, next: undefined };
      if (keys.length === BATCH) return { keys, next: k };
      if (pick(k, value)) keys.push(k);
    }
    return { keys, next: undefined };
  };
}
