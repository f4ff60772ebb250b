/**
 * The request an Anthropic client's call sends to an Anthropic upstream: the caller's own request,
 * not a round trip through the canonical (OpenAI) shape, so what that shape cannot say reaches
 * the model: `thinking` and the signed thinking blocks of earlier turns, `cache_control` on any
 * block or tool, `top_k`, `service_tier`, citations, the exact stop sequences.
 *
 * It is rebuilt from the members the Messages API documents, so every string that goes out is one
 * the scanner reads (core/guardrails/anthropic-content.ts) or an opaque id, signature or binary:
 * - top-level fields: those in this file; others are not sent, among them `mcp_servers` and
 *   `container`, which would let the provider run tools the gateway never sees;
 * - tools: client tools (those with an `input_schema`). Server tools (web search, code execution,
 *   ...) run at the provider, unseen, and are dropped as the translation drops them;
 * - content blocks: the client block types below (and inside tool results and document content
 *   sources, text, image and document). Server-tool history (server_tool_use, *_tool_result) has
 *   no tool left to match and is dropped, as are unknown members of every object.
 *
 * The result shares strings and opaque values with `req`; redaction rewrites the result only.
 */
import type {
  AnthropicContentBlockParam,
  AnthropicMessageParam,
  AnthropicMessagesRequest,
} from './anthropic-types.js';

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Copies the members of `from` named in `keys` that are set. */
function pick(from: Json, keys: readonly string[]): Json {
  const out: Json = {};
  for (const k of keys) if (from[k] !== undefined && from[k] !== null) out[k] = from[k];
  return out;
}

function cacheControl(v: unknown): Json | undefined {
  return isObject(v) ? pick(v, ['type', 'ttl']) : undefined;
}

/** `block`'s documented members plus its cache_control. */
function withCache(block: Json, keys: readonly string[]): Json {
  const out = pick(block, keys);
  const cc = cacheControl(block.cache_control);
  if (cc) out.cache_control = cc;
  return out;
}

function source(v: unknown): Json | undefined {
  if (!isObject(v)) return undefined;
  switch (v.type) {
    case 'base64':
    case 'text':
      return pick(v, ['type', 'media_type', 'data']);
    case 'url':
      return pick(v, ['type', 'url']);
    case 'file':
      return pick(v, ['type', 'file_id']);
    case 'content': {
      const content = v.content;
      return {
        type: 'content',
        content: Array.isArray(content) ? blocks(content, INNER) : typeof content === 'string' ? content : [],
      };
    }
    default:
      return undefined;
  }
}

type Rebuild = (b: Json) => Json | undefined;

const TEXT: Rebuild = (b) => withCache(b, ['type', 'text', 'citations']);
const IMAGE: Rebuild = (b) => {
  const s = source(b.source);
  return s ? { ...withCache(b, ['type']), source: s } : undefined;
};
const DOCUMENT: Rebuild = (b) => {
  const s = source(b.source);
  if (!s) return undefined;
  const out = withCache(b, ['type', 'title', 'context']);
  out.source = s;
  if (isObject(b.citations)) out.citations = pick(b.citations, ['enabled']);
  return out;
};

/** Blocks inside a tool result or a document's content source. */
const INNER: Readonly<Record<string, Rebuild>> = { text: TEXT, image: IMAGE, document: DOCUMENT };

const BLOCKS: Readonly<Record<string, Rebuild>> = {
  ...INNER,
  tool_use: (b) => withCache(b, ['type', 'id', 'name', 'input']),
  tool_result: (b) => {
    const out = withCache(b, ['type', 'tool_use_id', 'is_error']);
    if (typeof b.content === 'string') out.content = b.content;
    else if (Array.isArray(b.content)) out.content = blocks(b.content, INNER);
    return out;
  },
  thinking: (b) => pick(b, ['type', 'thinking', 'signature']),
  redacted_thinking: (b) => pick(b, ['type', 'data']),
};

function blocks(list: unknown[], kinds: Readonly<Record<string, Rebuild>>): Json[] {
  const out: Json[] = [];
  for (const b of list) {
    if (!isObject(b) || typeof b.type !== 'string') continue;
    const rebuild = Object.hasOwn(kinds, b.type) ? kinds[b.type] : undefined;
    const next = rebuild?.(b);
    if (next) out.push(next);
  }
  return out;
}

export function forwardedAnthropicRequest(req: AnthropicMessagesRequest): AnthropicMessagesRequest {
  const r = req as unknown as Json;
  const out = pick(r, ['model', 'max_tokens', 'stream', 'temperature', 'top_p', 'top_k', 'service_tier']);
  if (Array.isArray(r.stop_sequences))
    out.stop_sequences = r.stop_sequences.filter((x) => typeof x === 'string');
  if (typeof r.system === 'string') out.system = r.system;
  else if (Array.isArray(r.system)) out.system = blocks(r.system, { text: TEXT });
  if (isObject(r.metadata) && typeof r.metadata.user_id === 'string')
    out.metadata = { user_id: r.metadata.user_id };
  if (isObject(r.thinking)) out.thinking = pick(r.thinking, ['type', 'budget_tokens']);
  out.messages = req.messages.map(
    (m: AnthropicMessageParam): AnthropicMessageParam => ({
      role: m.role,
      content:
        typeof m.content === 'string'
          ? m.content
          : (blocks(m.content, BLOCKS) as unknown as AnthropicContentBlockParam[]),
    }),
  );
  const tools = Array.isArray(r.tools)
    ? (r.tools as unknown[])
        .filter((t): t is Json => isObject(t) && t.input_schema !== undefined)
        .map((t) =>
          withCache(t, ['name', 'description', 'input_schema', ...(t.type === 'custom' ? ['type'] : [])]),
        )
    : [];
  if (tools.length > 0) {
    out.tools = tools;
    // No tool left, no tool_choice: one naming a tool would be refused by the provider.
    if (isObject(r.tool_choice))
      out.tool_choice = pick(r.tool_choice, ['type', 'name', 'disable_parallel_tool_use']);
  }
  return out as unknown as AnthropicMessagesRequest;
}
