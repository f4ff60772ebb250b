/**
 * The request an Anthropic client's call sends to an Anthropic upstream: the caller's own request,
 * not a round trip through the canonical (OpenAI) shape, so what that shape cannot say reaches
 * the model: `thinking` and the signed thinking blocks of earlier turns, `cache_control` on any
 * block or tool, `top_k`, `service_tier`, citations, the exact stop sequences.
 *
 * It is narrowed to what the gateway governs (docs/ops.md, "Anthropic to Anthropic"):
 * - top-level fields: the Messages API fields in FORWARDED. Others are not sent; among them
 *   `mcp_servers` and `container`, which would let the provider run tools the gateway never sees.
 * - tools: client tools (those with an `input_schema`). Server tools (web search, code execution,
 *   ...) run at the provider, unseen, and are dropped as the translation drops them.
 * - content blocks: the client block types in BLOCKS (and inside tool results, INNER_BLOCKS).
 *   Server-tool history (server_tool_use, *_tool_result) has no tool left to match and is dropped.
 *
 * The result shares its leaf objects with `req`: redaction rewrites the result, and `req` is not
 * read again once it is made.
 */
import type {
  AnthropicContentBlockParam,
  AnthropicMessageParam,
  AnthropicMessagesRequest,
  AnthropicTool,
} from './anthropic-types.js';

const FORWARDED = [
  'model',
  'messages',
  'system',
  'max_tokens',
  'metadata',
  'stop_sequences',
  'stream',
  'temperature',
  'top_p',
  'top_k',
  'tools',
  'tool_choice',
  'thinking',
  'service_tier',
] as const;

const BLOCKS = new Set([
  'text',
  'image',
  'document',
  'tool_use',
  'tool_result',
  'thinking',
  'redacted_thinking',
]);
const INNER_BLOCKS = new Set(['text', 'image', 'document']);

export function forwardedAnthropicRequest(req: AnthropicMessagesRequest): AnthropicMessagesRequest {
  const out = {
    model: req.model,
    messages: req.messages,
    max_tokens: req.max_tokens,
  } as AnthropicMessagesRequest;
  for (const key of FORWARDED) {
    const v = req[key];
    if (v !== undefined && v !== null) (out as Record<string, unknown>)[key] = v;
  }
  out.messages = req.messages.map(keptMessage);
  if (Array.isArray(req.tools)) {
    const tools = req.tools.filter((t: AnthropicTool) => t.input_schema !== undefined);
    if (tools.length > 0) out.tools = tools;
    else {
      // No tool left: a tool_choice naming one would be refused by the provider.
      delete out.tools;
      delete out.tool_choice;
    }
  }
  return out;
}

function keptMessage(m: AnthropicMessageParam): AnthropicMessageParam {
  if (typeof m.content === 'string') return m;
  let kept: AnthropicContentBlockParam[] | undefined;
  for (let i = 0; i < m.content.length; i++) {
    const block = m.content[i] as AnthropicContentBlockParam;
    let next: AnthropicContentBlockParam | undefined = block;
    if (!BLOCKS.has(block.type)) next = undefined;
    else if (block.type === 'tool_result' && Array.isArray(block.content)) {
      const inner = block.content.filter((b) => INNER_BLOCKS.has(b.type));
      if (inner.length !== block.content.length) next = { ...block, content: inner };
    }
    if (next !== block && kept === undefined) kept = m.content.slice(0, i);
    if (kept !== undefined && next !== undefined) kept.push(next);
  }
  return kept === undefined ? m : { role: m.role, content: kept };
}
