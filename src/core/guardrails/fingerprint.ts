import { hash } from 'node:crypto';
import { canonicalize } from '../chain/index.js';

export interface FingerprintInput {
  readonly org_id: string;
  readonly agent_id: string;
  readonly type: string;
  readonly tool: string | null;
  readonly args: unknown;
}

/** SHA-256 of JCS {org_id, agent_id, type, tool, args}: the identity of an action for approvals. */
export function actionFingerprint(input: FingerprintInput): string {
  const body = canonicalize({
    org_id: input.org_id,
    agent_id: input.agent_id,
    type: input.type,
    tool: input.tool,
    args: input.args === undefined ? null : input.args,
  } as never);
  return hash('sha256', body, 'hex'); // one-shot: about half the cost of createHash().update().digest()
}

/** SHA-256 of JCS(args): what a mandate's `cap.args_sha256` binds. */
export function argsDigest(args: unknown): string {
  return hash('sha256', canonicalize((args === undefined ? null : args) as never), 'hex');
}
