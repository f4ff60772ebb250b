import type { Decision } from '../core/policy/index.js';
import type { ChatCompletion, ChatCompletionChunk } from '../providers/wire/index.js';
import { newId } from '../util/ids.js';

export interface ApprovalRef {
  readonly request_id: string;
  readonly tier: string;
  readonly expires_at: string;
  readonly matched_rule: string | null;
}

/** The assistant message that explains a block or a pending approval to the agent (and its user). */
export function blockMessage(
  decision: Pick<Decision, 'outcome' | 'reason' | 'rule_id'>,
  approval?: ApprovalRef,
): string {
  const rule = decision.rule_id ? ` (rule ${decision.rule_id})` : '';
  if (decision.outcome === 'needs_approval' && approval) {
    return (
      `This request needs human approval before it can run${rule}: ${decision.reason}. ` +
      `Approval ${approval.request_id} (${approval.tier} tier) is pending until ${approval.expires_at}; ` +
      'send the identical request again once it is approved.'
    );
  }
  return `This request was blocked by governance policy${rule}: ${decision.reason}.`;
}

export function blockedCompletion(model: string, text: string): ChatCompletion {
  return {
    id: newId('chatcmpl-blocked-', 20),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'content_filter' }],
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
  };
}

/** A blocked answer as a stream: role, the explanation, and the finish. */
export function blockedChunks(
  model: string,
  text: string,
  id = newId('chatcmpl-blocked-', 20),
): ChatCompletionChunk[] {
  const base = {
    id,
    object: 'chat.completion.chunk' as const,
    created: Math.floor(Date.now() / 1000),
    model,
  };
  return [
    { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: { content: text }, finish_reason: null }] },
    { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'content_filter' }] },
  ];
}
