import { mkdirSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import { type Database, open, type RootDatabase, type TransactionFlags } from 'lmdb';
import { BatchWriter } from './batch-writer.js';
import { StoreHealth, type StoreHealthEvents } from './health.js';

// biome-ignore lint/suspicious/noExplicitAny: lmdb's generic default for heterogeneous values
type AnyDb = Database<any, any>;

export interface Store {
  /** The directory the store was opened in (`openStore`'s argument). */
  readonly dataDir: string;
  /**
   * The environment. Its `transactionSync` reports to `health`: a commit that fails for want of
   * storage throws 503 `unavailable` (see `StoreHealth.failed`) instead of lmdb's error.
   */
  readonly root: RootDatabase;
  /** Whether commits succeed (false from a full disk until a commit succeeds again). */
  readonly health: StoreHealth;
  readonly orgs: AnyDb;
  readonly users: AnyDb;
  /** `['e', org, lower-case email]` → user id; `['n', org name]` → org id (IdentityRepo). */
  readonly identityIndex: AnyDb;
  readonly credentials: AnyDb;
  readonly agents: AnyDb;
  readonly agentNames: AnyDb;
  readonly settings: AnyDb;
  readonly vault: AnyDb;
  readonly idempotency: AnyDb;
  readonly meta: AnyDb;
  readonly policies: AnyDb;
  readonly policyVersions: AnyDb;
  readonly policyAssignments: AnyDb;
  readonly approvals: AnyDb;
  readonly approvalIndex: AnyDb;
  readonly revokedMandates: AnyDb;
  readonly tools: AnyDb;
  /** WebAuthn authenticators of people: [user id, credential id] → the credential's public record. */
  readonly webauthn: AnyDb;
  /** GDPR erasure requests: [org, request id] → the request (ids sort by creation time). */
  readonly erasures: AnyDb;
  /** Sidecars: ['sc', id] → record; ['tok', token hash] → id; ['st', id, epoch] → SyncState. */
  readonly sidecars: AnyDb;
  /** Audit chain events: [org, seq] → the event as JSON text (what was hashed, byte for byte). */
  readonly auditEvents: AnyDb;
  /** Audit lookups: [org, 'i', event id] → seq; [org, kind, value, last seq] → [seq, …] (search). */
  readonly auditIndex: AnyDb;
  /** Audit Merkle nodes above the leaves: [org, level, index] → 32-byte hash. */
  readonly auditNodes: AnyDb;
  /** Audit seals, seal sizes, overview rollups and bridges, keyed by [org, kind, …]. */
  readonly auditMeta: AnyDb;
  readonly writer: BatchWriter;
  /**
   * Resolves once every commit made before the call is on disk (fsynced): what is sent to another
   * machine as done (a sidecar's shipped entries, a control plane's acknowledgement of them) must
   * outlive a crash of this one, which the 100 ms fsync timer alone does not promise.
   */
  durable(): Promise<void>;
  close(): Promise<void>;
}

export interface StoreOptions {
  /** fsync interval; 0 fsyncs every commit. */
  readonly syncIntervalMs?: number;
  /** Told when commits start failing for want of storage, and when they succeed again. */
  readonly health?: StoreHealthEvents;
  /** Commits are refused while the data dir has less free space (MiB); 0 (default): no reserve. */
  readonly minFreeMb?: number;
}

/** The key of `meta` that `StoreHealth`'s probe writes (the time of the probe). */
const PROBE_KEY = 'storage_probe';

/** Bytes available to an unprivileged writer on the file system of `dir`. */
function freeBytes(dir: string): number | undefined {
  try {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return undefined;
  }
}

/**
 * Makes every synchronous commit of `d` report to the store's health: the batch writer's and the
 * control plane's `root.transactionSync`, and a `putSync` outside a transaction (lmdb commits
 * it through the database's own `transactionSync`). A commit that fails for want of storage
 * throws the health's 503 instead of lmdb's error, and so does one refused beforehand for want of
 * free space (`StoreHealth.beforeCommit`).
 */
function reportCommits<D extends AnyDb | RootDatabase>(d: D, health: StoreHealth): D {
  const commit = d.transactionSync.bind(d);
  d.transactionSync = (<T>(action: () => T, flags?: TransactionFlags): T => {
    let result: T;
    health.beforeCommit();
    try {
      result = commit(action, flags);
    } catch (err) {
      throw health.failed(err);
    }
    health.committed();
    return result;
  }) as D['transactionSync'];
  return d;
}

/**
 * Opens the embedded store. Writes are committed without a per-transaction fsync (a process crash
 * loses nothing; the OS holds the pages) and fsynced every `syncIntervalMs` (default 100 ms), so a
 * machine crash can lose at most that window. DESIGN's "committed before the response" holds.
 *
 * The map is not writable (no `useWritemap`): LMDB then writes its pages with pwrite, so a disk
 * that cannot take them fails the commit (EIO, ENOSPC) and the store stays usable. With a writable
 * map the file grows sparse and pages are written through the mapping: a page the disk cannot
 * back kills the process (SIGBUS), and does so again after each restart on the full disk.
 */
export function openStore(dataDir: string, opts: StoreOptions = {}): Store {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const syncMs = opts.syncIntervalMs ?? 100;
  const root = open({
    path: join(dataDir, 'govgate.lmdb'),
    compression: false,
    noSync: syncMs > 0,
    maxDbs: 32,
  });
  const minFreeBytes = (opts.minFreeMb ?? 0) * 1_048_576;
  const health = new StoreHealth(
    () => writer.enqueue(() => meta.putSync(PROBE_KEY, new Date().toISOString())),
    {
      events: opts.health,
      reserve: { minFreeBytes, freeBytes: () => freeBytes(dataDir) },
    },
  );
  const opened: AnyDb[] = [];
  const db = (name: string): AnyDb => {
    const d = root.openDB({ name });
    opened.push(d);
    return d;
  };
  const meta = db('meta');
  let dirty = false;
  const writer = new BatchWriter(root, {
    onCommit: () => {
      dirty = true;
    },
  });
  let timer: NodeJS.Timeout | undefined;
  // An fsync runs on an LMDB worker thread; closing the env under it crashes the process, so
  // at most one runs at a time and close() waits for it.
  let syncing: Promise<void> | undefined;
  // A sync asked for by durable() that waits for the running one: it starts after the call, so
  // it covers every commit made before it; callers meanwhile share it.
  let queued: Promise<void> | undefined;
  const syncNow = (): Promise<void> =>
    new Promise<void>((resolve) => {
      (root as unknown as { sync(cb: (err?: unknown) => void): void }).sync(() => resolve());
    });
  const startSync = (): Promise<void> => {
    dirty = false;
    const run: Promise<void> = syncNow().finally(() => {
      if (syncing === run) syncing = undefined;
    });
    syncing = run;
    return run;
  };
  if (syncMs > 0) {
    timer = setInterval(() => {
      if (!dirty || syncing || queued) return;
      void startSync();
    }, syncMs);
    timer.unref();
  }
  const durable = (): Promise<void> => {
    if (syncMs <= 0) return Promise.resolve(); // every commit is fsynced
    if (queued) return queued;
    const after = syncing ?? Promise.resolve();
    const next: Promise<void> = after.then(() => {
      queued = undefined;
      return startSync();
    });
    queued = next;
    return next;
  };
  const store: Store = {
    dataDir,
    root,
    health,
    orgs: db('orgs'),
    users: db('users'),
    identityIndex: db('identity_index'),
    credentials: db('credentials'),
    agents: db('agents'),
    agentNames: db('agent_names'),
    settings: db('settings'),
    vault: db('vault'),
    idempotency: db('idempotency'),
    meta,
    policies: db('policies'),
    policyVersions: db('policy_versions'),
    policyAssignments: db('policy_assignments'),
    approvals: db('approvals'),
    approvalIndex: db('approval_index'),
    revokedMandates: db('revoked_mandates'),
    tools: db('tools'),
    webauthn: db('webauthn'),
    erasures: db('erasures'),
    sidecars: db('sidecars'),
    auditEvents: db('audit_events'),
    auditIndex: db('audit_index'),
    auditNodes: db('audit_nodes'),
    auditMeta: db('audit_meta'),
    writer,
    durable,
    async close() {
      if (timer) clearInterval(timer);
      writer.close();
      await queued;
      await syncing;
      await root.close();
    },
  };
  // Once every database is open: opening one is a commit too, and a start on a full disk must
  // come up (reads served, not ready) rather than fail.
  reportCommits(root, health);
  for (const d of opened) reportCommits(d, health);
  return store;
}
