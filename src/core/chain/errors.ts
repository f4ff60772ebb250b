/**
 * Typed errors of the audit-chain core. These are thrown for misuse or for input that cannot be
 * represented at all (a value JCS cannot serialize, a malformed note handed to a signer, a proof
 * asked of a tree that lacks a node). Tampering found while verifying is never an exception: it is
 * reported as data (see `ChainVerifier`, `verifyNote`, `verifyInclusion`).
 */
export type ChainErrorCode =
  | 'jcs_non_finite_number'
  | 'jcs_undefined_in_array'
  | 'jcs_unsupported_type'
  | 'jcs_too_deep'
  | 'invalid_hash'
  | 'invalid_tree_range'
  | 'missing_node'
  | 'invalid_note'
  | 'invalid_key_name'
  | 'invalid_key_id'
  | 'invalid_checkpoint'
  | 'invalid_bridge';

export class ChainError extends Error {
  readonly code: ChainErrorCode;

  constructor(code: ChainErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ChainError';
    this.code = code;
  }
}
