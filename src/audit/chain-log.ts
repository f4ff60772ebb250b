import { hash as digest, randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { setImmediate as yieldTurn } from 'node:timers/promises';
import {
  bridgeRecord,
  type ChainBridge,
  canonicalEventParts,
  ERASURE_EVENT_TYPE,
  type ErasureTarget,
  erasePersonal,
  erasureTargets,
  hashFromStoredText,
  type IntegrityResult,
  isTombstone,
  type JsonValue,
  leafHash,
  type Personal,
  personalField,
  type Receipt,
} from '../core/chain/index.js';
import { ServiceError } from '../core/errors.js';
import type { Store } from '../store/db.js';
import { eventId, eventIdSeq } from '../util/ids.js';
import { ChainReader, type ConsistencyResult } from './chain-reader.js';
import { IntegrityScan, VerifiedSignatures, verifiersFor } from './integrity.js';
import { IntegrityPool } from './integrity-pool.js';
import { JsonlLog, NoJsonlLog } from './jsonl-log.js';
import {
  BRIDGE_KIND,
  boundMs,
  familyOf,
  HOUR_KIND,
  ID_KIND,
  INDEX_KINDS,
  isDerivedId,
  MINUTE_KIND,
  ORG_ID_MAX,
  POSTINGS_MARK_KIND,
  ROLLUP_MARK_KIND,
} from './layout.js';
import {
  type Batch,
  type Bucket,
  chainOrgs,
  compactNodes,
  compactRange,
  loadBucket,
  loadHead,
  nodeReader,
  type OrgHead,
  STORED_NODE_LEVEL,
} from './org-head.js';
import type { PendingWrite } from './postings.js';
import { deletePrunedPrefix } from './prune.js';
import { addEvent, bucketStart, HOUR_MS, MINUTE_MS, type Rollup } from './rollups.js';
import { Sealer } from './sealer.js';
import { AuditSearch } from './search.js';
import type {
  AuditEvent,
  AuditInput,
  AuditLog,
  AuditOverview,
  AuditPage,
  AuditQuery,
  AuditRef,
  ChainLine,
  SealSigner,
  SigningKeyDocument,
  StoredSeal,
} from './types.js';

export interface ChainLogOptions {
  /** The JSONL log goes to `<dataDir>/audit/<org>.jsonl`. */
  readonly dataDir: string;
  /** False: no JSONL log (a sidecar, whose log the control plane's JSONL file holds). */
  readonly jsonl?: boolean;
  /**
   * False: no overview rollups (a sidecar: the overview and trust scores are the control plane's,
   * over the org chain it ships to); `overview` and `rollup` then count nothing. The postings stay:
   * a sidecar finds a decision by its pipeline (`/v1/govern/execution`).
   */
  readonly rollups?: boolean;
  /** SERVICE_AUDIT_ROTATION_MAX_MB. */
  readonly rotationMaxMb: number;
  /** Org JSONL files kept open at most, a soft cap (default 256; see `JsonlLog`). */
  readonly jsonlMaxOpen?: number;
  /** A seal is cut at most this long after the first unsealed event (default 250 ms)… */
  readonly sealIntervalMs?: number;
  /** …or as soon as this many events are unsealed (default 1,000)… */
  readonly sealEvery?: number;
  /**
   * …or as soon as their lines hold this many characters (default 1 Mi): a seal's span stays
   * small enough to ship whole whatever its entries' sizes (a sidecar ships batches ending on
   * seals, docs/sidecar.md).
   */
  readonly sealMaxChars?: number;
  /** Epoch ms (tests freeze it). */
  readonly clock?: () => number;
  /** Rows one search call examines at most before it returns a short page and a cursor. */
  readonly searchBudget?: number;
  /**
   * Worker threads for integrity scans (default: the CPUs available, at most 4; 0 scans on the
   * event loop, in steps). Only chains of at least `integrityParallelMin` events (default 20,000)
   * use them; `integrityChunk` is the events per piece of work (default 2,048).
   */
  readonly integrityWorkers?: number;
  readonly integrityParallelMin?: number;
  readonly integrityChunk?: number;
  /**
   * The overview rollups of an org are written at most this often (default 1,000 ms), not with
   * every commit: an hour's rollup names every agent active in it, so rewriting it per commit cost
   * O(agents) per commit. `overview` merges the unwritten counts from memory, and a start after a
   * crash recounts the events after the org's rollup mark, so counts stay exact either way.
   */
  readonly rollupFlushMs?: number;
  /**
   * Posting lists (all orgs) begun since the last flush past which the pending postings are
   * stored before the rollup timer fires (default 4,096; see `PENDING_LISTS_MAX`).
   */
  readonly pendingListsMax?: number;
  /** What an operator should know, e.g. a JSONL log set aside as ahead of the store (a logger). */
  readonly warn?: (msg: string, fields: Record<string, unknown>) => void;
}

/** Erasure authorities a bounded export carries at most (each an erasure of its events). */
const MAX_AUTHORITIES = 100_000;
/** Events tombstoned per transaction by `erase`. */
const ERASE_BATCH = 256;
/** The end of every stored event's text (and JSONL line): `,"hash":"<64 hex>"}`. */
const HASH_MEMBER = ',"hash":"';
const HASH_TAIL = HASH_MEMBER.length + 64 + 2;

/** The `hash` an event line ends with, without parsing it (undefined for a seal or bridge line). */
function lineHash(line: string): string | undefined {
  if (line.length < HASH_TAIL || !line.endsWith('"}')) return undefined;
  if (!line.startsWith(HASH_MEMBER, line.length - HASH_TAIL)) return undefined;
  return line.slice(line.length - 66, line.length - 2);
}

/**
 * The stored text of an event with `fields` of its personal data tombstoned, its `hash`
 * unchanged (checked); undefined when none of them holds a value any more. The `personal`
 * member is replaced where it stands, so every other byte stays as the writer made it.
 */
export function erasedLine(
  text: string,
  fields: readonly string[],
): { hash: string; json: string } | undefined {
  const event = JSON.parse(text) as Record<string, unknown> & { personal?: Personal; hash: string };
  const personal = event.personal;
  if (personal === undefined || personal === null) return undefined;
  const live = fields.filter((f) => f in personal && !isTombstone(personal[f]));
  if (live.length === 0) return undefined;
  const before = `"personal":${JSON.stringify(personal)}`;
  const at = text.lastIndexOf(before);
  const erased = erasePersonal(personal, live);
  if (at < 0) throw new Error(`the stored text of event ${String(event.id)} has no personal member`);
  const json = `${text.slice(0, at)}"personal":${JSON.stringify(erased)}${text.slice(at + before.length)}`;
  const after = { ...event, personal: erased };
  if (hashFromStoredText(String(event.prev_hash), after, json) !== event.hash)
    throw new Error(`tombstoning event ${String(event.id)} would change its hash`);
  return { hash: event.hash, json };
}

/** An event being built: the writer sets `hash` last. */
type Draft = { -readonly [K in keyof AuditEvent]: AuditEvent[K] } & { hash: string; prev_hash: string };

/**
 * The hash of an event and its stored JSON text, from one canonical serialization: the event
 * hash is `hashEvent`'s rule, SHA-256(prev_hash ‖ canonical); the stored text is that same
 * canonical JSON (sorted keys) with the full personal fields in place of their commitments and
 * `hash` appended, so no second serialization is needed (`hashFromStoredText` reverses it).
 */
function linkedLine(event: Draft): { hash: string; json: string } {
  const { head, committed, rest } = canonicalEventParts(event);
  const hash = digest('sha256', `${event.prev_hash}${head}${committed}${rest}}`, 'hex');
  const full = committed.length <= 2 ? committed : JSON.stringify(event.personal); // '' or '{}'
  return { hash, json: `${head}${full}${rest},"hash":"${hash}"}` };
}

/** `v` with every string and member name made well formed (an unpaired surrogate → U+FFFD). */
function wellFormed(v: unknown): unknown {
  if (typeof v === 'string') return v.toWellFormed();
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(wellFormed);
  const out: Record<string, unknown> = {};
  // Defined, not assigned: a member named `__proto__` stays a member.
  for (const [k, x] of Object.entries(v))
    Object.defineProperty(out, k.toWellFormed(), {
      value: wellFormed(x),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  return out;
}

/**
 * Counts `e` in its org's pending postings (see `PendingPostings`) and returns how many lists
 * that began. Session and task ids of the derived form have no entry: search finds them through
 * the pipeline (see `DerivedIdList`).
 */
function addPending(head: OrgHead, e: AuditEvent): number {
  const p = head.pending;
  const { seq, pipeline_id: pl, session_id: session, task_id: task } = e;
  return (
    p.add(INDEX_KINDS.agent_id, e.agent_id, seq) +
    p.add(INDEX_KINDS.event_type, e.event_type, seq) +
    p.add(INDEX_KINDS.action, e.outcome, seq) +
    p.add(INDEX_KINDS.category, familyOf(e.event_type), seq) +
    p.add(INDEX_KINDS.pipeline_id, pl, seq) +
    (session !== null && !isDerivedId('session_id', session, pl)
      ? p.add(INDEX_KINDS.session_id, session, seq)
      : 0) +
    (task !== null && !isDerivedId('task_id', task, pl) ? p.add(INDEX_KINDS.task_id, task, seq) : 0)
  );
}

/**
 * Posting lists (all orgs) begun since the last flush past which the pending postings are stored
 * before the rollup timer. A flush writes one entry per list in one transaction, which holds the
 * loop about 2 µs per list here; this bounds that (to ~8 ms) when events carry many distinct
 * values, e.g. a new pipeline per call. Far fewer (2,048 in the 10-org benchmark) flush the
 * recurring values (sessions, agents) so often that the saving over per-commit lists is gone.
 */
const PENDING_LISTS_MAX = 4_096;

/** Lines per step of an asynchronous integrity scan (tens of ms between yields to the loop). */
const SCAN_STEP = 2_000;
const SALT_BYTES = 16;
const APPEND = { append: true } as const;
const SALT_POOL = SALT_BYTES * 256;

/**
 * The audit trail as a transparency log (DESIGN B): per-org hash chains whose event hashes are
 * the leaves of an RFC 6962 tree, sealed with dual-signed checkpoints, stored in LMDB and
 * mirrored to a rotated JSONL log.
 *
 * Appends are synchronous in memory (seq, prev_hash, hash, commitments and the Merkle append
 * happen before `append` returns its promise; one writer per org) and their writes are grouped
 * into one LMDB transaction per event-loop turn; the promise resolves at commit. Seals are cut
 * per org at most `sealIntervalMs` after the first unsealed event, after `sealEvery` events or
 * once their lines hold `sealMaxChars` characters, signed off the request path, one in flight
 * per org.
 */
export class ChainLog implements AuditLog {
  readonly #store: Store;
  readonly #signer: SealSigner;
  readonly #reader: ChainReader;
  readonly #search: AuditSearch;
  readonly #jsonl: JsonlLog;
  readonly #heads = new Map<string, OrgHead>();
  /** The last org whose event was appended at the end of `auditEvents` (see `#write`). */
  #appendOrg = '';
  readonly #verified = new VerifiedSignatures();
  readonly #sealer: Sealer;
  readonly #clock: () => number;
  #closed = false;
  #closing: Promise<void> | undefined;
  readonly #integrityPool: IntegrityPool | undefined;
  readonly #parallelMin: number;
  #salts = randomBytes(SALT_POOL);
  #saltAt = 0;
  #loadError: unknown;
  #integrityError: unknown;
  #rollupError: unknown;
  readonly #rollupFlushMs: number;
  readonly #rollups: boolean;
  #rollupTimer: NodeJS.Timeout | undefined;
  /** Posting lists begun (all orgs) since the last flush began; see `#flushPostings`. */
  #newLists = 0;
  #postingsFlushQueued = false;
  readonly #pendingListsMax: number;
  readonly #listeners: Array<(org: string, events: readonly AuditEvent[]) => void> = [];

  constructor(store: Store, signer: SealSigner, opts: ChainLogOptions) {
    this.#store = store;
    this.#signer = signer;
    this.#reader = new ChainReader(store);
    this.#search = new AuditSearch(this.#reader, opts.searchBudget, (org, kind, value) => {
      const head = this.#heads.get(org);
      return head === undefined || head.dead ? [] : head.pending.seqs(kind, value);
    });
    this.#clock = opts.clock ?? Date.now;
    this.#rollupFlushMs = Math.max(1, opts.rollupFlushMs ?? 1_000);
    this.#rollups = opts.rollups !== false;
    this.#pendingListsMax = Math.max(1, opts.pendingListsMax ?? PENDING_LISTS_MAX);
    const workers = opts.integrityWorkers ?? Math.min(4, availableParallelism());
    this.#integrityPool =
      workers > 0
        ? new IntegrityPool({ dataDir: store.dataDir, workers, chunkEvents: opts.integrityChunk })
        : undefined;
    this.#parallelMin = opts.integrityParallelMin ?? 20_000;
    const reader = this.#reader;
    this.#jsonl = new (opts.jsonl === false ? NoJsonlLog : JsonlLog)(
      opts.dataDir,
      opts.rotationMaxMb,
      {
        lines: (org, afterSeq, afterSeal) => reader.lines(org, afterSeq + 1, reader.lastSeq(org), afterSeal),
        eventHash: (org, seq) => {
          const json: unknown = store.auditEvents.get([org, seq]);
          if (typeof json !== 'string') return undefined;
          const { hash } = JSON.parse(json) as { hash?: unknown };
          return typeof hash === 'string' ? hash : undefined;
        },
        sealAt: (org, size) => reader.sealAtSize(org, size),
        sealedAt: (org, seq) => reader.sealAtOrBefore(org, seq)?.size ?? 0,
        bridgeLine: (org) => reader.bridgeLine(org),
      },
      opts.warn,
      opts.jsonlMaxOpen,
    );
    this.#sealer = new Sealer(store, signer, this.#jsonl, {
      intervalMs: opts.sealIntervalMs ?? 250,
      every: Math.max(1, opts.sealEvery ?? 1000),
      maxChars: Math.max(1, opts.sealMaxChars ?? 1024 * 1024),
      clock: this.#clock,
    });
    // A JSONL log ahead of the store (a machine crash lost the store's tail) is repaired now.
    this.#jsonl.checkAll();
    // Events left unsealed by a previous run (a crash) are sealed now, not at the org's next event.
    for (const org of chainOrgs(store)) {
      try {
        const head = this.#head(org);
        if (head.sealedSize < head.seq) this.#sealer.check(head);
      } catch (err) {
        this.#loadError = err; // that org's appends will report it
      }
    }
  }

  /** The last error of a seal or of the JSONL log (both retry or carry on; the store is truth). */
  get lastError(): unknown {
    return (
      this.#sealer.lastError ??
      this.#jsonl.lastError ??
      this.#loadError ??
      this.#rollupError ??
      this.#integrityError
    );
  }

  /** Path of an org's live JSONL file. */
  jsonlPath(orgId: string): string {
    return this.#jsonl.pathOf(orgId);
  }

  /** GET /api/audit/signing-key. */
  publicDocument(): SigningKeyDocument {
    return this.#signer.publicDocument();
  }

  // -------------------------------------------------------------------------------------------
  // Write side

  append(input: AuditInput): Promise<AuditRef> {
    if (this.#closed) return Promise.reject(new ServiceError('unavailable', 'the audit log is closed'));
    const org = input.org_id;
    let head: OrgHead;
    let event: Draft;
    let json: string;
    let ms: number;
    try {
      if (typeof org !== 'string' || org.length === 0 || org.length > ORG_ID_MAX) {
        // A key over LMDB's limit would fail the commit of every org's batch in this turn.
        throw new ServiceError(
          'invalid_request',
          `an audit event needs an org_id of 1 to ${ORG_ID_MAX} characters`,
        );
      }
      head = this.#head(org);
      ms = Math.max(this.#clock(), head.tsMs);
      if (this.#rollups) this.#buckets(head, ms);
      event = this.#build(input, head, ms);
      let line = linkedLine(event);
      // JCS writes a lone UTF-16 surrogate as a lowercase `\udxxx` escape (a pair goes as it is):
      // one came from a provider (a tool name, an error cut inside an emoji). The event is built
      // again with every string well formed, so RFC 8785 tools can canonicalize it (U+FFFD).
      if (line.json.includes('\\ud')) {
        event = this.#build(wellFormed(input) as AuditInput, head, ms);
        line = linkedLine(event);
      }
      event.hash = line.hash;
      json = line.json;
    } catch (err) {
      return Promise.reject(err);
    }
    // From here on nothing throws: the event is part of the chain in memory.
    head.seq = event.seq;
    head.hash = event.hash;
    head.tsMs = ms;
    const batch = this.#batchOf(head);
    batch.events.push(event);
    batch.json.push(json);
    head.chars += json.length;
    for (const n of head.tree.append(leafHash(event.hash)))
      if (n.level >= STORED_NODE_LEVEL) batch.nodes.push(n);
    if (this.#rollups) {
      this.#count(head, head.minute as Bucket, event);
      this.#count(head, head.hour as Bucket, event);
    }
    this.#newLists += addPending(head, event);
    if (this.#newLists >= this.#pendingListsMax) this.#flushPostings();
    this.#scheduleRollups();
    this.#sealer.check(head);
    const ref: AuditRef = { id: event.id, seq: event.seq };
    return batch.promise.then(() => ref);
  }

  #build(input: AuditInput, head: OrgHead, ms: number): Draft {
    let personal: Personal | undefined;
    const given = input.personal;
    if (given !== undefined && given !== null) {
      personal = Object.create(null) as Personal;
      for (const path of Object.keys(given)) {
        // The canonical form maps fields through a plain object, where this name would vanish.
        const value = given[path];
        if (value !== undefined) personal[path] = personalField(path, value, this.#salt());
      }
    }
    // One literal shape for every event keeps JCS's sorted-key memo hitting.
    return {
      id: eventId(ms, head.seq + 1),
      org_id: head.org,
      seq: head.seq + 1,
      ts: new Date(ms).toISOString(),
      event_type: input.event_type,
      agent_id: input.agent_id ?? null,
      session_id: input.session_id ?? null,
      task_id: input.task_id ?? null,
      pipeline_id: input.pipeline_id ?? null,
      behavior_type: input.behavior_type ?? null,
      outcome: input.outcome ?? null,
      reason: input.reason ?? null,
      rule_id: input.rule_id ?? null,
      provider: input.provider ?? null,
      model: input.model ?? null,
      usage: input.usage ?? null,
      cost: input.cost ?? null,
      detections: input.detections ?? null,
      details: input.details ?? {},
      personal: personal ?? {},
      origin: input.origin ?? null,
      _chain_version: 2,
      prev_hash: head.hash,
      hash: '',
    };
  }

  /** 16 random bytes, base64url, from a pooled buffer (one randomBytes call per 256 salts). */
  #salt(): string {
    if (this.#saltAt === SALT_POOL) {
      this.#salts = randomBytes(SALT_POOL);
      this.#saltAt = 0;
    }
    const s = this.#salts.toString('base64url', this.#saltAt, this.#saltAt + SALT_BYTES);
    this.#saltAt += SALT_BYTES;
    return s;
  }

  #head(org: string): OrgHead {
    let head = this.#heads.get(org);
    if (head === undefined) {
      head = loadHead(this.#store, org);
      this.#recount(head);
      this.#heads.set(org, head);
    }
    return head;
  }

  #count(head: OrgHead, bucket: Bucket, event: AuditEvent): void {
    addEvent(bucket.rollup, event);
    bucket.version++;
    head.dirty.add(bucket);
  }

  #scheduleRollups(): void {
    this.#rollupTimer ??= setTimeout(this.#flushRollups, this.#rollupFlushMs).unref();
  }

  /** The bucket of `kind` starting at `start`: unwritten counts first, else the stored one. */
  #bucket(head: OrgHead, kind: string, start: number): Bucket {
    for (const b of head.dirty) if (b.kind === kind && b.start === start) return b; // a few at most
    return loadBucket(this.#store, head.org, kind, start);
  }

  /**
   * A freshly loaded head: events after the org's rollup mark (postings mark) were committed but
   * not yet in the stored rollups (buffered postings) when the process stopped (a crash); they
   * are counted again, from the store. An org without a mark has exact rollups or postings
   * (written per commit before marks existed, or none); its next commit writes the mark.
   */
  #recount(head: OrgHead): void {
    const { auditMeta } = this.#store;
    const mark: unknown = auditMeta.get([head.org, ROLLUP_MARK_KIND]);
    const postingsMark: unknown = auditMeta.get([head.org, POSTINGS_MARK_KIND]);
    if (typeof mark !== 'number' && this.#rollups) head.markPending = head.seq;
    if (typeof postingsMark !== 'number') head.postingsMarkPending = head.seq;
    const rollupsFrom = typeof mark === 'number' && this.#rollups ? mark : head.seq;
    const postingsFrom = typeof postingsMark === 'number' ? postingsMark : head.seq;
    const from = Math.min(rollupsFrom, postingsFrom);
    if (from >= head.seq) return;
    for (const { seq, json } of this.#reader.eventTexts(head.org, from + 1, head.seq)) {
      const e = JSON.parse(json) as AuditEvent;
      if (seq > postingsFrom) addPending(head, e);
      if (seq <= rollupsFrom) continue;
      const ms = Date.parse(e.ts);
      if (!Number.isFinite(ms)) continue;
      this.#count(head, this.#bucket(head, MINUTE_KIND, bucketStart(ms, MINUTE_MS)), e);
      this.#count(head, this.#bucket(head, HOUR_KIND, bucketStart(ms, HOUR_MS)), e);
    }
    this.#scheduleRollups();
  }

  /**
   * Writes every org's unwritten rollups and pending postings, and their marks (every
   * `rollupFlushMs`). Runs in a transaction of its own right after the commit of the batches
   * queued in the same turn, and only if that commit succeeded (`enqueueAlone`), so a mark (the
   * head's seq at that moment) never names an event whose batch is not in that commit or an
   * earlier one, and a flush that fails can never roll back an append of any org. A bucket
   * counted again before the commit stays dirty, postings appended since stay pending; a failed
   * commit leaves them all for the next flush. A posting list the store refuses is dropped and
   * reported (lastError) instead of failing every flush. A head whose commit failed is skipped:
   * its memory names events that were never stored (it is reloaded and recounted on next use).
   */
  readonly #flushRollups = (): Promise<void> => {
    this.#rollupTimer = undefined;
    return this.#flush(true);
  };

  /**
   * Stores the pending postings (not the rollups) with the next commit: many lists are waiting
   * (`PENDING_LISTS_MAX`).
   */
  #flushPostings(): void {
    if (this.#postingsFlushQueued) return;
    this.#postingsFlushQueued = true;
    this.#flush(false).catch(() => {}); // reported through lastError; retried by the timer
  }

  #flush(rollups: boolean): Promise<void> {
    const due = (h: OrgHead): boolean => ((rollups && h.dirty.size > 0) || h.pending.size > 0) && !h.dead;
    let any = false;
    for (const h of this.#heads.values()) if ((any = due(h))) break;
    if (!any) {
      if (!rollups) this.#postingsFlushQueued = false;
      return Promise.resolve();
    }
    const written: Array<[OrgHead, Bucket, number]> = [];
    const postings: Array<[OrgHead, PendingWrite[]]> = [];
    const store = this.#store;
    const done = store.writer.enqueueAlone(() => {
      // The heads as they stand at the commit: every list begun until now is written.
      if (!rollups) this.#postingsFlushQueued = false;
      this.#newLists = 0;
      for (const head of this.#heads.values()) {
        if (!due(head)) continue;
        if (rollups && this.#rollups) {
          for (const b of head.dirty) {
            store.auditMeta.putSync([head.org, b.kind, b.start], JSON.stringify(b.rollup));
            written.push([head, b, b.version]);
          }
          store.auditMeta.putSync([head.org, ROLLUP_MARK_KIND], head.seq);
          head.markPending = undefined; // this mark is newer; a batch later in this commit keeps it
        }
        postings.push([head, head.pending.write(store, head.org, (err) => this.#refused(head.org, err))]);
        store.auditMeta.putSync([head.org, POSTINGS_MARK_KIND], head.seq);
        head.postingsMarkPending = undefined;
      }
    });
    return done.then(
      () => {
        for (const [head, b, version] of written) if (b.version === version) head.dirty.delete(b);
        for (const [head, lists] of postings) head.pending.stored(lists);
      },
      (err: unknown) => {
        this.#rollupError = err;
        if (!rollups) this.#postingsFlushQueued = false;
        if (!this.#closed) this.#scheduleRollups();
      },
    );
  }

  /** A posting list the store refused (see `PendingPostings.write`): reported, then dropped. */
  #refused(org: string, err: unknown): void {
    const why = err instanceof Error ? err.message : String(err);
    this.#rollupError = new Error(
      `a search index list of org ${org} could not be stored and was dropped: ${why}`,
      {
        cause: err,
      },
    );
  }

  #batchOf(head: OrgHead): Batch {
    if (head.batch !== undefined) return head.batch;
    const batch: Batch = { events: [], json: [], nodes: [], promise: Promise.resolve() };
    head.batch = batch;
    batch.promise = this.#store.writer.enqueue(() => this.#write(head, batch));
    batch.promise.then(
      () => this.#committed(head, batch),
      () => this.#failed(head),
    );
    return batch;
  }

  /** Runs inside the writer's transaction. */
  #write(head: OrgHead, batch: Batch): void {
    if (head.batch === batch) head.batch = undefined;
    const { auditEvents, auditIndex, auditNodes, auditMeta } = this.#store;
    const org = head.org;
    for (let i = 0; i < batch.events.length; i++) {
      const e = batch.events[i] as AuditEvent;
      const seq = e.seq;
      // Seqs only grow, so for the last org in key order this is an append: LMDB then fills each
      // page instead of splitting it in half (a third fewer pages for ~1 KB events). For another
      // org an append would be refused without effect, so it is not tried once an org after it
      // in key order has appended; the event is put in place.
      const key = [org, seq];
      // (lmdb's typings say void; putSync returns whether the write was done.)
      const appended =
        org >= this.#appendOrg && (auditEvents.putSync(key, batch.json[i], APPEND) as unknown as boolean);
      if (appended) this.#appendOrg = org;
      else auditEvents.putSync(key, batch.json[i]);
      // An id that names its seq needs no index entry (see `eventId`).
      if (eventIdSeq(e.id) !== seq) auditIndex.putSync([org, ID_KIND, e.id], seq);
    }
    for (const n of batch.nodes) auditNodes.putSync([org, n.level, n.index], n.hash);
    // An org's first commit records its rollup mark (see #recount); later ones leave the rollups
    // to #flushRollups.
    if (head.markPending !== undefined) {
      auditMeta.putSync([org, ROLLUP_MARK_KIND], head.markPending);
      head.markPending = undefined;
    }
    if (head.postingsMarkPending !== undefined) {
      auditMeta.putSync([org, POSTINGS_MARK_KIND], head.postingsMarkPending);
      head.postingsMarkPending = undefined;
    }
  }

  #committed(head: OrgHead, batch: Batch): void {
    this.#jsonl.events(
      head.org,
      batch.events.map((e) => e.seq),
      batch.json,
    );
    for (const l of this.#listeners) {
      try {
        l(head.org, batch.events);
      } catch {
        // a listener's failure is its own (alert delivery keeps its own log); the chain goes on
      }
    }
  }

  /**
   * Calls `listener` with each batch of events once it is committed (alerting). It runs on the
   * commit path: it must return at once (queue its work). Returns a function that removes it.
   */
  onCommitted(listener: (org: string, events: readonly AuditEvent[]) => void): () => void {
    this.#listeners.push(listener);
    return () => {
      const i = this.#listeners.indexOf(listener);
      if (i >= 0) this.#listeners.splice(i, 1);
    };
  }

  /**
   * A failed commit: this head's memory is ahead of the store; it is dropped and loaded again from
   * the store now (reads only, so on a full disk too). Search and the overview merge the postings
   * and counts a head holds that the store does not yet; with no head they would miss the
   * committed events since the last flush until the org's next append.
   */
  #failed(head: OrgHead): void {
    head.dead = true;
    if (head.timer !== undefined) clearTimeout(head.timer);
    head.timer = undefined;
    if (this.#heads.get(head.org) !== head) return;
    this.#heads.delete(head.org);
    if (this.#closed) return;
    try {
      this.#sealer.check(this.#head(head.org));
    } catch (err) {
      this.#loadError = err; // the org's next append loads it again, and reports this
    }
  }

  /** Makes the overview buckets of `ms` current (they only move forward: ts never goes back). */
  #buckets(head: OrgHead, ms: number): void {
    const m = bucketStart(ms, MINUTE_MS);
    if (head.minute?.start !== m) head.minute = this.#bucket(head, MINUTE_KIND, m);
    const h = bucketStart(ms, HOUR_MS);
    if (head.hour?.start !== h) head.hour = this.#bucket(head, HOUR_KIND, h);
  }

  async flushSeals(): Promise<void> {
    try {
      await this.#sealer.flush(this.#heads.values());
    } finally {
      await this.#jsonl.drain();
    }
  }

  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    this.#sealer.stop(this.#heads.values());
    try {
      await this.flushSeals();
    } catch {
      // recorded in lastError; the events themselves are committed
    }
    await Promise.allSettled([...this.#heads.values()].map((h) => h.batch?.promise));
    if (this.#rollupTimer !== undefined) clearTimeout(this.#rollupTimer);
    await this.#flushRollups(); // failures are kept in lastError; a restart recounts
    await Promise.all([this.#jsonl.close(), this.#integrityPool?.close()]);
  }

  // -------------------------------------------------------------------------------------------
  // Read side

  /** The seq of the org's newest committed event (0 when it has none). */
  lastSeq(orgId: string): number {
    return this.#reader.lastSeq(orgId);
  }

  get(orgId: string, eventId: string): AuditEvent | undefined {
    return this.#reader.get(orgId, eventId);
  }

  /** The org's seals with `from ≤ size ≤ to`, in order (a sidecar ships them with its entries). */
  sealsBetween(orgId: string, from: number, to: number): Iterable<StoredSeal> {
    return this.#reader.sealsBetween(orgId, from, to);
  }

  /** The stored text of the org's committed events `lo..hi` (by seq), in order (a sidecar ships these). */
  eventTexts(orgId: string, lo: number, hi: number): Iterable<{ seq: number; json: string }> {
    return this.#reader.eventTexts(orgId, lo, hi);
  }

  byPipeline(orgId: string, pipelineId: string, limit = 1000): AuditEvent[] {
    return this.#search.byFilter(orgId, 'pipeline_id', pipelineId, limit);
  }

  view(
    orgId: string,
    filter: 'pipeline_id' | 'session_id' | 'task_id',
    value: string,
    limit: number,
    cursor?: string,
  ): AuditPage {
    return this.#search.view(orgId, filter, value, limit, cursor);
  }

  search(orgId: string, q: AuditQuery): AuditPage {
    return this.#search.search(orgId, q);
  }

  overview(orgId: string, range: { since?: string; until?: string }): AuditOverview {
    return this.#search.overview(orgId, range, this.#heads.get(orgId)?.dirty);
  }

  /** The counters behind `overview` (per agent and outcome too: trust scores). */
  rollup(orgId: string, range: { since?: string; until?: string }): Rollup {
    return this.#search.rollup(orgId, range, this.#heads.get(orgId)?.dirty);
  }

  scanEvents(
    orgId: string,
    filters: Omit<AuditQuery, 'cursor' | 'limit'>,
    limit: number,
    fromSeq?: number,
  ): Iterable<AuditEvent> {
    return this.#search.scan(orgId, filters, limit, fromSeq);
  }

  exportLines(orgId: string, range: { since?: string; until?: string } = {}): Iterable<ChainLine> {
    return this.#reader.exportLines(orgId, boundMs(range.since, 'since'), boundMs(range.until, 'until'));
  }

  /**
   * `exportLines` as JSON text, one string per line (no newline): what the export endpoint
   * streams. An export that ends before the chain does is followed by the erasures made later
   * that tombstoned its events, each as `{"_erasure_authority": {event, receipt}}`: the erasure
   * event and its receipt (its inclusion in a later seal), so the tombstones verify offline in
   * an export that does not hold the erasure events themselves (docs/audit.md, "Export").
   */
  exportText(orgId: string, range: { since?: string; until?: string } = {}): Iterable<string> {
    // Checked now, before the caller starts answering: a generator would check at its first line.
    return this.#exportText(orgId, boundMs(range.since, 'since'), boundMs(range.until, 'until'));
  }

  *#exportText(orgId: string, since: number | undefined, until: number | undefined): Generator<string> {
    yield* this.#reader.exportTexts(orgId, since, until);
    if (until === undefined) return;
    const { lo, hi: last } = this.#reader.window(orgId, since, until);
    if (lo > last) return;
    const end = this.#reader.exportEnd(orgId, last, until);
    if (end >= this.#reader.lastSeq(orgId)) return;
    for (const e of this.#search.scan(orgId, { event_type: ERASURE_EVENT_TYPE }, MAX_AUTHORITIES, end + 1)) {
      const covers = erasureTargets(e).some((t) => (this.#reader.seqOf(orgId, t.event_id) ?? end + 1) <= end);
      if (!covers) continue;
      // Unsealed yet (for at most a seal interval): left out, and its tombstones read as unauthorised.
      const receipt = this.receipt(orgId, e.id);
      if (receipt === null || receipt === undefined) continue;
      const { seal: _seal, ...event } = e as AuditEvent & { seal?: unknown };
      yield JSON.stringify({ _erasure_authority: { event, receipt } });
    }
  }

  /** The seal covering an event: undefined when there is no such event, null while unsealed. */
  sealOf(orgId: string, eventId: string): StoredSeal | null | undefined {
    const seq = this.#reader.seqOf(orgId, eventId);
    if (seq === undefined) return undefined;
    return this.#reader.coveringSeal(orgId, seq) ?? null;
  }

  /**
   * Receipt of an event (inclusion proof at the size of its covering seal + that seal's note,
   * checkable with `verifyReceipt`): undefined when there is no such event, null while unsealed.
   */
  receipt(orgId: string, eventId: string): Receipt | null | undefined {
    const r = this.#reader.receipt(orgId, eventId);
    return r === undefined || r === null ? r : r.receipt;
  }

  /** Consistency proof between two seal sizes (undefined when either is not a seal's size). */
  consistency(orgId: string, fromSize: number, toSize: number): ConsistencyResult | undefined {
    return this.#reader.consistency(orgId, fromSize, toSize);
  }

  /** The integrity scan (spec 2.6) of an org chain, in one synchronous pass. */
  integrity(orgId: string): IntegrityResult {
    const scan = new IntegrityScan(
      this.#reader,
      orgId,
      verifiersFor(this.#signer.publicDocument(), this.#verified),
    );
    while (!scan.step(Number.MAX_SAFE_INTEGER));
    return scan.result();
  }

  /**
   * Tombstones personal fields of committed events (a GDPR erasure, see compliance/erasure.ts):
   * each named field's value becomes `[ERASED:GDPR-Art17]` and its salt goes, its commitment
   * stays, so every hash, seal and receipt is unchanged. The store is written first, then the
   * org's JSONL files are rewritten (`JsonlLog.rewrite`). The caller commits the erasure event
   * naming the targets before this: a tombstone no erasure event names is
   * `unauthorized_erasure`. Fields already erased, or absent, are left; unknown events are
   * skipped. Throws when the JSONL files cannot be rewritten (the store is erased by then, and
   * erasing again rewrites them again).
   */
  async erase(orgId: string, targets: readonly ErasureTarget[]): Promise<{ events: number; lines: number }> {
    const edits = new Map<string, string>(); // event hash → its new line
    const writes: Array<{ seq: number; json: string }> = [];
    for (const t of targets) {
      const seq = this.#reader.seqOf(orgId, t.event_id);
      if (seq === undefined) continue;
      const text: unknown = this.#store.auditEvents.get([orgId, seq]);
      if (typeof text !== 'string') continue;
      const erased = erasedLine(text, t.fields);
      if (erased === undefined) {
        // Already tombstoned in the store: the JSONL line may still need it (an erasure cut short).
        const { hash } = JSON.parse(text) as { hash: string };
        edits.set(hash, text);
        continue;
      }
      edits.set(erased.hash, erased.json);
      writes.push({ seq, json: erased.json });
    }
    const { auditEvents, writer } = this.#store;
    for (let i = 0; i < writes.length; i += ERASE_BATCH) {
      const slice = writes.slice(i, i + ERASE_BATCH);
      await writer.enqueue(() => {
        for (const w of slice) auditEvents.putSync([orgId, w.seq], w.json);
      });
    }
    const lines =
      edits.size === 0
        ? 0
        : await this.#jsonl.rewrite(orgId, (line) => {
            const hash = lineHash(line);
            return hash === undefined ? undefined : edits.get(hash);
          });
    return { events: writes.length, lines };
  }

  /**
   * Where retention could cut the org chain for events older than `beforeMs` (DESIGN B: on a
   * seal boundary, keeping at least the newest event): the newest seal of size < the last seq
   * whose events all have ts < `beforeMs`. Undefined when nothing that old is sealed past the
   * current bridge.
   */
  pruneCut(orgId: string, beforeMs: number): { toSeq: number; fromSeq: number; lastTs: string } | undefined {
    const r = this.#reader;
    const first = r.firstSeq(orgId);
    const last = r.lastSeq(orgId);
    if (first === 0 || last <= first) return undefined;
    const older = r.seqAtOrAfter(orgId, beforeMs, first, last) - 1; // the last event before it
    const seal = r.sealAtOrBefore(orgId, Math.min(older, last - 1));
    if (seal === undefined || seal.size < first) return undefined;
    return { toSeq: seal.size, fromSeq: first, lastTs: r.eventAt(orgId, seal.size)?.ts ?? '' };
  }

  /**
   * The newest seal boundary at or before `seq` and before the org's last event, after what is
   * pruned already: where a sidecar may cut what the control plane acknowledged.
   */
  pruneCutAt(orgId: string, seq: number): number | undefined {
    const r = this.#reader;
    const first = r.firstSeq(orgId);
    const last = r.lastSeq(orgId);
    if (first === 0 || last <= first) return undefined;
    const seal = r.sealAtOrBefore(orgId, Math.min(seq, last - 1));
    return seal === undefined || seal.size < first ? undefined : seal.size;
  }

  /** The seq through which the org chain was pruned (0: never). */
  prunedThrough(orgId: string): number {
    return this.#reader.prunedThrough(orgId);
  }

  /**
   * Prunes the org chain through seq `toSeq`, a seal boundary before its last event (retention,
   * DESIGN B). `archive`, when given, gets the lines pruned (the earlier bridge, events and seals,
   * as in the export) and answers where they went. Then one commit stores the `_chain_bridge`
   * (the last pruned event's hash, the compact range of the pruned leaves, the seal at the cut,
   * the archive) and those compact-range nodes, from when on readers start after it; the pruned
   * data is deleted in steps, and the JSONL files are cut to start with the bridge. Every later
   * root, receipt and seal still verifies; `govgate verify` and integrity start at the bridge.
   */
  async prune(
    orgId: string,
    toSeq: number,
    archive?: (lines: Iterable<string>) => Promise<JsonValue>,
  ): Promise<{
    from_seq: number;
    to_seq: number;
    events: number;
    seals: number;
    files_deleted: number;
    bridge: ChainBridge;
  }> {
    const r = this.#reader;
    const first = r.firstSeq(orgId);
    const last = r.lastSeq(orgId);
    const seal = r.sealAtSize(orgId, toSeq);
    if (first === 0 || toSeq < first || toSeq >= last || seal === undefined)
      throw new Error(`org ${orgId}: seq ${toSeq} is not a seal boundary inside ${first}..${last - 1}`);
    const pruned = r.prunedThrough(orgId);
    const bridgedHash = r.eventAt(orgId, toSeq)?.hash;
    if (bridgedHash === undefined) throw new Error(`org ${orgId}: event ${toSeq} is missing`);
    const earlier = r.bridgeLine(orgId);
    const archived =
      archive === undefined
        ? null
        : await archive(
            (function* (): Generator<string> {
              if (earlier !== undefined) yield earlier;
              for (const l of r.lines(orgId, first, toSeq, pruned)) yield l.line;
            })(),
          );
    const nodes = compactNodes(toSeq);
    const subtrees = compactRange(toSeq, nodeReader(this.#store, orgId));
    const { _chain_bridge: bridge } = bridgeRecord({
      fromSeq: 1,
      toSeq,
      bridgedHash,
      subtrees,
      lastSeal: { seq: seal.seq, size: seal.size, note: seal.note },
      archive: archived,
    });
    const { auditMeta, auditNodes, writer } = this.#store;
    await writer.enqueue(() => {
      for (let i = 0; i < nodes.length; i++) {
        const n = nodes[i] as { level: number; index: number };
        auditNodes.putSync([orgId, n.level, n.index], subtrees[i]);
      }
      auditMeta.putSync([orgId, BRIDGE_KIND], bridge);
    });
    const keep = new Set(nodes.map((n) => `${n.level}/${n.index}`));
    const deleted = await deletePrunedPrefix(this.#store, orgId, toSeq, keep);
    const filesDeleted = await this.#jsonl.prune(orgId, toSeq, r.bridgeLine(orgId) as string);
    return {
      from_seq: first,
      to_seq: toSeq,
      events: deleted.events,
      seals: deleted.seals,
      files_deleted: filesDeleted,
      bridge,
    };
  }

  /** The org's `_chain_bridge`: retention pruned its chain through `bridged_to_seq`. */
  bridge(orgId: string): ChainBridge | undefined {
    return this.#store.auditMeta.get([orgId, BRIDGE_KIND]) as ChainBridge | undefined;
  }

  /**
   * Finishes the last cut of an org chain where a run left it (a crash, a JSONL file that could
   * not be written): deletes what is left of the pruned prefix and cuts the JSONL files. Does
   * nothing to a chain that was never pruned; costs a read of the first JSONL file otherwise.
   */
  async finishPrune(orgId: string): Promise<void> {
    const toSeq = this.#reader.prunedThrough(orgId);
    if (toSeq === 0) return;
    const keep = new Set(compactNodes(toSeq).map((n) => `${n.level}/${n.index}`));
    await deletePrunedPrefix(this.#store, orgId, toSeq, keep);
    await this.#jsonl.prune(orgId, toSeq, this.#reader.bridgeLine(orgId) as string);
  }

  /** The JSONL files a start set aside for `orgId` (JsonlLog.divergedFiles). */
  divergedFiles(orgId: string): string[] {
    return this.#jsonl.divergedFiles(orgId);
  }

  /**
   * `integrity` for the endpoint, off the event loop: a long chain on the integrity workers, a
   * short one (or any, if a worker fails) inline in steps, yielding between them.
   */
  async integrityAsync(orgId: string): Promise<IntegrityResult> {
    const doc = this.#signer.publicDocument();
    const scanOf = (): IntegrityScan =>
      new IntegrityScan(this.#reader, orgId, verifiersFor(doc, this.#verified));
    const pool = this.#integrityPool;
    let scan = scanOf();
    if (pool !== undefined && scan.size >= this.#parallelMin) {
      try {
        return await pool.run(scan, JSON.stringify(doc));
      } catch (err) {
        if (this.#closed) throw err;
        this.#integrityError = err;
        scan = scanOf(); // the same scan on this thread: a verdict either way
      }
    }
    while (!scan.step(SCAN_STEP)) await yieldTurn();
    return scan.result();
  }
}
