import { ServiceError } from '../core/errors.js';
import type { Ctx } from '../http/context.js';
import { authenticate } from '../identity/guard.js';
import { roleAtLeast } from '../identity/roles.js';
import type { Principal } from '../identity/types.js';
import type { Snapshot } from '../snapshot/types.js';

export interface ActingAgent {
  readonly principal: Principal;
  readonly orgId: string;
  /** The agent's own name (agent_id) and stable uuid. */
  readonly agentId: string;
  readonly agentUuid: string;
  /** Set when an admin acts for an agent through X-Agent-Id. */
  readonly actingAdmin: string | null;
}

/**
 * Who a data-plane call is for. Identity is pinned from the credential: an agent key acts as its
 * own agent (naming another in X-Agent-Id is refused); an admin's PAT may act for an agent of its
 * org by naming it in X-Agent-Id.
 */
export function actingAgent(ctx: Ctx, snapshot: Snapshot, bodyAgentId?: unknown): ActingAgent {
  const p = authenticate(ctx, snapshot);
  const header = ctx.header('x-agent-id');
  if (header === undefined && bodyAgentId != null && typeof bodyAgentId !== 'string')
    throw new ServiceError('invalid_request', 'agent_id must be a string', { param: 'agent_id' });
  const inBody = typeof bodyAgentId === 'string' && bodyAgentId !== '' ? bodyAgentId : undefined;
  // Two names for the acting agent that disagree are refused, not settled by picking one.
  if (header !== undefined && inBody !== undefined && inBody !== header)
    throw new ServiceError('invalid_request', 'X-Agent-Id and agent_id name different agents', {
      param: 'agent_id',
    });
  const named = header ?? inBody;
  // Where the agent was named, for the errors about it.
  const param = header !== undefined ? 'X-Agent-Id' : 'agent_id';
  if (p.kind === 'agent') {
    if (named !== undefined && named !== p.agent_id) {
      throw new ServiceError(
        'forbidden',
        'identity is pinned to the key: an agent key cannot act as another agent',
        {
          param,
        },
      );
    }
    return {
      principal: p,
      orgId: p.org_id,
      agentId: p.agent_id as string,
      agentUuid: p.id,
      actingAdmin: null,
    };
  }
  if (!roleAtLeast(p.role, 'admin')) {
    throw new ServiceError(
      'forbidden',
      'the data plane takes an agent key; only admins may act for an agent (X-Agent-Id)',
    );
  }
  if (named === undefined) {
    throw new ServiceError(
      'invalid_request',
      'an admin credential must name the agent it acts for in X-Agent-Id',
      {
        param: 'X-Agent-Id',
      },
    );
  }
  const agent = snapshot.agentByName(p.org_id, named);
  if (!agent) throw new ServiceError('not_found', `agent ${named} does not exist in this org`, { param });
  return {
    principal: p,
    orgId: p.org_id,
    agentId: agent.agent_id,
    agentUuid: agent.agent_uuid,
    actingAdmin: p.id,
  };
}

/**
 * Who made a `/v1` call, as every event the call writes records it in `details`: the credential
 * (`key_…` or `tok_…`: a key a human minted for the agent is told apart from the agent's own)
 * and the admin acting for the agent, if one is. A fresh object, for the event to add to.
 */
export function callerDetails(agent: ActingAgent): Record<string, unknown> {
  return { credential_id: agent.principal.credential_id, acting_admin: agent.actingAdmin };
}
