/**
 * The audit trail (DESIGN B): per-org hash chains inside a transparency log, stored in LMDB and
 * mirrored to a rotated JSONL log, sealed with dual-signed checkpoints; and its /api/audit
 * endpoints. The request path sees only `AuditSink`.
 */
export { ChainLog, type ChainLogOptions } from './chain-log.js';
export type { ConsistencyResult } from './chain-reader.js';
export { verifiersFor } from './integrity.js';
export { type AuditRouteDeps, INTEGRITY_TTL_MS, registerAuditRoutes } from './routes.js';
export type {
  AuditEvent,
  AuditInput,
  AuditLog,
  AuditOverview,
  AuditPage,
  AuditQuery,
  AuditReader,
  AuditRef,
  AuditSink,
  ChainLine,
  SealSigner,
  SigningKeyDocument,
  StoredSeal,
} from './types.js';
