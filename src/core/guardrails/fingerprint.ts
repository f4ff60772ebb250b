import { hash } from 'node:crypto';
import { canonicalize, writeString } from '../chain/index.js';

export interface FingerprintInput {
  readonly org_id: string;
  readonly agent_id: string;
  readonly type: string;
  readonly tool: string | null;
  readonly args: unknown;
  /**
   * What else makes the call this call (null or absent: nothing): a governed action's other
   * payload members, a model call's model, provider, tools and content digest. Without it every
   * model call of an agent, or every action without args, would share one fingerprint, and one
   * approval would let a different call through.
   */
  readonly context?: unknown;
}

/** An action's approval fingerprint and its arguments' digest, from one canonicalization. */
export interface ActionIdentity {
  /**
   * SHA-256 of JCS {org_id, agent_id, type, tool, args, context} (context omitted when null): the
   * identity of an action for approvals.
   */
  readonly fingerprint: string;
  /** SHA-256 of JCS(args): what a mandate's `cap.args_sha256` binds. */
  readonly argsSha256: string;
}

// One-shot crypto.hash: about half the cost of createHash().update().digest() here.
const sha256Hex = (text: string): string => hash('sha256', text, 'hex');

/**
 * The fingerprint's canonical text, assembled around the canonical args (JCS member order:
 * agent_id, args, context, org_id, tool, type): it equals `canonicalize({org_id, agent_id, type,
 * tool, args, context})` (without `context` when it is null), with the args serialized once for
 * both hashes.
 */
function fingerprintText(input: FingerprintInput, args: string): string {
  const tool = input.tool === null ? 'null' : writeString(input.tool);
  const context =
    input.context === undefined || input.context === null
      ? ''
      : `"context":${canonicalize(input.context as never)},`;
  return (
    `{"agent_id":${writeString(input.agent_id)},"args":${args},${context}"org_id":${writeString(input.org_id)},` +
    `"tool":${tool},"type":${writeString(input.type)}}`
  );
}

const canonicalArgs = (args: unknown): string => canonicalize((args === undefined ? null : args) as never);

// Calls without arguments (every model call) share one args digest.
export const NULL_ARGS_SHA256 = sha256Hex('null');

/** Both hashes of an action (the governor's decision needs the one, a mandate the other). */
export function actionIdentity(input: FingerprintInput): ActionIdentity {
  const args = canonicalArgs(input.args);
  return {
    fingerprint: sha256Hex(fingerprintText(input, args)),
    argsSha256: args === 'null' ? NULL_ARGS_SHA256 : sha256Hex(args),
  };
}

/** The approval fingerprint of an action (see `ActionIdentity`). */
export function actionFingerprint(input: FingerprintInput): string {
  return sha256Hex(fingerprintText(input, canonicalArgs(input.args)));
}

/** SHA-256 of JCS(args): what a mandate's `cap.args_sha256` binds. */
export function argsDigest(args: unknown): string {
  return sha256Hex(canonicalArgs(args));
}
