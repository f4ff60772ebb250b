import type { ApprovalRef } from '../gateway/blocked.js';
import type { Principal } from '../identity/types.js';

export interface MandateCap {
  readonly type: string;
  readonly tool: string | null;
  readonly args_sha256: string;
}

export interface MandateClaims {
  readonly iss: string;
  readonly sub: string;
  readonly org: string;
  readonly jti: string;
  readonly iat: number;
  readonly exp: number;
  readonly behavior_id: string;
  readonly pipeline_id: string;
  readonly cap: MandateCap;
}

/** Issues and checks mandates (the mandate service implements it). */
export interface MandateAuthority {
  issue(claims: {
    sub: string;
    org: string;
    behavior_id: string;
    pipeline_id: string;
    cap: MandateCap;
  }): Promise<{ token: string; jti: string; exp: number }>;
  verify(token: string): Promise<{ valid: true; claims: MandateClaims } | { valid: false; error: string }>;
  /** Resolves once committed; `created` is false when `jti` was already revoked (or used). */
  revoke(jti: string, orgId: string, by: string, reason?: string): Promise<{ created: boolean }>;
}

/** What a call the policy wants a human to approve asks for. */
export interface ApprovalRequest {
  org_id: string;
  agent_id: string;
  agent_uuid: string;
  fingerprint: string;
  tier: 'standard' | 'signed';
  summary: string;
  matched_rule: string | null;
  pipeline_id: string;
  behavior_type: string;
  tool: string | null;
  /** The credential of the call that asks. */
  credential_id: string;
}

/** Creates approvals on behalf of govern and gateway calls (the approval store implements it). */
export interface ApprovalDesk {
  request(input: ApprovalRequest): Promise<ApprovalRef>;
  preApprove(
    input: {
      org_id: string;
      agent_id: string;
      agent_uuid: string;
      fingerprint: string;
      behavior_type: string;
      tool: string | null;
    },
    by: Principal,
  ): Promise<ApprovalRef & { status: string }>;
}
