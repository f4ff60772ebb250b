import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Database, open, type RootDatabase } from 'lmdb';
import { BatchWriter } from './batch-writer.js';

// biome-ignore lint/suspicious/noExplicitAny: lmdb's generic default for heterogeneous values
type AnyDb = Database<any, any>;

export interface Store {
  /** The directory the store was opened in (`openStore`'s argument). */
  readonly dataDir: string;
  readonly root: RootDatabase;
  readonly orgs: AnyDb;
  readonly users: AnyDb;
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
  /** Audit chain events: [org, seq] → the event as JSON text (what was hashed, byte for byte). */
  readonly auditEvents: AnyDb;
  /** Audit lookups: [org, 'i', event id] → seq; [org, kind, value, last seq] → [seq, …] (search). */
  readonly auditIndex: AnyDb;
  /** Audit Merkle nodes above the leaves: [org, level, index] → 32-byte hash. */
  readonly auditNodes: AnyDb;
  /** Audit seals, seal sizes, overview rollups and bridges, keyed by [org, kind, …]. */
  readonly auditMeta: AnyDb;
  readonly writer: BatchWriter;
  close(): Promise<void>;
}

export interface StoreOptions {
  /** fsync interval; 0 fsyncs every commit. */
  readonly syncIntervalMs?: number;
}

/**
 * Opens the embedded store. Writes are committed without a per-transaction fsync (a process crash
 * loses nothing; the OS holds the pages) and fsynced every `syncIntervalMs` (default 100 ms), so a
 * machine crash can lose at most that window. DESIGN's "committed before the response" holds.
 */
export function openStore(dataDir: string, opts: StoreOptions = {}): Store {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const syncMs = opts.syncIntervalMs ?? 100;
  const root = open({
    path: join(dataDir, 'govgate.lmdb'),
    compression: false,
    noSync: syncMs > 0,
    useWritemap: true,
    maxDbs: 32,
  });
  const db = (name: string): AnyDb => root.openDB({ name });
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
  const syncNow = (): Promise<void> =>
    new Promise<void>((resolve) => {
      (root as unknown as { sync(cb: (err?: unknown) => void): void }).sync(() => resolve());
    });
  if (syncMs > 0) {
    timer = setInterval(() => {
      if (!dirty || syncing) return;
      dirty = false;
      syncing = syncNow().finally(() => {
        syncing = undefined;
      });
    }, syncMs);
    timer.unref();
  }
  const store: Store = {
    dataDir,
    root,
    orgs: db('orgs'),
    users: db('users'),
    credentials: db('credentials'),
    agents: db('agents'),
    agentNames: db('agent_names'),
    settings: db('settings'),
    vault: db('vault'),
    idempotency: db('idempotency'),
    meta: db('meta'),
    policies: db('policies'),
    policyVersions: db('policy_versions'),
    policyAssignments: db('policy_assignments'),
    approvals: db('approvals'),
    approvalIndex: db('approval_index'),
    revokedMandates: db('revoked_mandates'),
    tools: db('tools'),
    auditEvents: db('audit_events'),
    auditIndex: db('audit_index'),
    auditNodes: db('audit_nodes'),
    auditMeta: db('audit_meta'),
    writer,
    async close() {
      if (timer) clearInterval(timer);
      writer.close();
      await syncing;
      await root.close();
    },
  };
  return store;
}
