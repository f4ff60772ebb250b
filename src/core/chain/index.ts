/**
 * The audit chain core: canonical JSON, event hashing, personal-data commitments, the RFC 6962
 * Merkle tree, seal notes (C2SP signed notes) and the streaming integrity verifier. Pure and
 * synchronous; storage, clocks, randomness and signing keys are supplied by the caller.
 * Format reference: docs/audit.md.
 */
export {
  type BridgeRecord,
  bridgeRecord,
  type ChainBridge,
  isBridgeRecord,
  parseBridge,
  type SealRecord,
} from './bridge.js';
export { fromBase64, fromHex, isHash, toBase64, toHex } from './bytes.js';
export {
  type Checkpoint,
  type CheckpointInput,
  checkpointOrigin,
  formatCheckpoint,
  parseCheckpoint,
  SEAL_ALG_LINE,
} from './checkpoint.js';
export {
  buildPersonal,
  checkPersonalField,
  commit,
  ERASED,
  erasePersonal,
  isTombstone,
  type Personal,
  type PersonalField,
  type PersonalStatus,
  personalField,
} from './commitment.js';
export { ERASURE_EVENT_TYPE, type ErasureTarget, erasureDetails, erasureTargets } from './erasure.js';
export { ChainError, type ChainErrorCode } from './errors.js';
export {
  type CanonicalParts,
  type ChainEvent,
  canonicalEventBytes,
  canonicalEventParts,
  canonicalEventString,
  type EventDraft,
  type EventOrigin,
  GENESIS,
  hashEvent,
  hashFromStoredText,
  type LegacyEvent,
  linkEvent,
} from './event.js';
export { canonicalize, JCS_MAX_DEPTH, type JsonValue, writeString } from './jcs.js';
export {
  consistencyProof,
  EMPTY_ROOT,
  inclusionProof,
  leafHash,
  leafHashOf,
  MerkleBuilder,
  type MerkleNode,
  type NodeReader,
  nodeHash,
  rootAt,
  verifyConsistency,
  verifyInclusion,
} from './merkle.js';
export {
  assembleNote,
  keyIdFor,
  MAX_NOTE_SIGNATURES,
  type NoteSignature,
  type NoteSigner,
  type NoteVerification,
  type NoteVerifier,
  noteVerifier,
  type ParsedNote,
  parseNote,
  SEAL_ALGS,
  type SignatureAlg,
  signNote,
  verifyNote,
} from './note.js';
export {
  buildReceipt,
  type Receipt,
  type ReceiptVerification,
  receiptOrigin,
  verifyReceipt,
} from './receipt.js';
export { duplicateMember } from './strict-json.js';
export {
  type BrokenEvent,
  ChainVerifier,
  type ChainVerifierOptions,
  checkLine,
  checkSeal,
  type EventVerdict,
  type IntegrityReason,
  type IntegrityResult,
  type LineVerdict,
  type SealCheck,
  type SealCoverage,
} from './verifier.js';
