/**
 * Anthropic Messages wire shapes: only the fields govgate reads or writes.
 *
 * The request type carries an index signature so that fields we do not model (thinking,
 * service_tier, ...) flow through unchanged when forwarded to Anthropic itself
 * (anthropic-forward.ts).
 */

export interface AnthropicCacheControl {
  type: 'ephemeral';
  ttl?: string;
}

export interface AnthropicTextBlock {
  type: 'text';
  text: string;
  cache_control?: AnthropicCacheControl | null;
  citations?: unknown[] | null;
}

export interface AnthropicBase64ImageSource {
  type: 'base64';
  media_type: string;
  data: string;
}

export interface AnthropicUrlImageSource {
  type: 'url';
  url: string;
}

export interface AnthropicImageBlock {
  type: 'image';
  source: AnthropicBase64ImageSource | AnthropicUrlImageSource;
  cache_control?: AnthropicCacheControl | null;
}

/** A document; govgate translates only base64 PDFs (to an OpenAI `file` part). */
export interface AnthropicDocumentBlock {
  type: 'document';
  source: { type: string; media_type?: string; data?: string; url?: string };
  title?: string | null;
  cache_control?: AnthropicCacheControl | null;
}

export interface AnthropicToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: Record<string, unknown>;
  cache_control?: AnthropicCacheControl | null;
}

export interface AnthropicToolResultBlock {
  type: 'tool_result';
  tool_use_id: string;
  content?: string | Array<AnthropicTextBlock | AnthropicImageBlock | AnthropicDocumentBlock>;
  is_error?: boolean;
  cache_control?: AnthropicCacheControl | null;
}

export interface AnthropicThinkingBlock {
  type: 'thinking';
  thinking: string;
  signature: string;
}

export interface AnthropicRedactedThinkingBlock {
  type: 'redacted_thinking';
  data: string;
}

/** A content block in a request message. */
export type AnthropicContentBlockParam =
  | AnthropicTextBlock
  | AnthropicImageBlock
  | AnthropicDocumentBlock
  | AnthropicToolUseBlock
  | AnthropicToolResultBlock
  | AnthropicThinkingBlock
  | AnthropicRedactedThinkingBlock;

export interface AnthropicMessageParam {
  role: 'user' | 'assistant';
  content: string | AnthropicContentBlockParam[];
}

/** A client tool. Server tools (web search, bash, ...) have a `type` and no `input_schema`. */
export interface AnthropicTool {
  name: string;
  description?: string;
  input_schema?: Record<string, unknown>;
  type?: string;
  cache_control?: AnthropicCacheControl | null;
}

export type AnthropicToolChoice =
  | { type: 'auto'; disable_parallel_tool_use?: boolean }
  | { type: 'any'; disable_parallel_tool_use?: boolean }
  | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean }
  | { type: 'none' };

/** POST /v1/messages body. */
export interface AnthropicMessagesRequest {
  model: string;
  messages: AnthropicMessageParam[];
  max_tokens: number;
  system?: string | AnthropicTextBlock[];
  metadata?: { user_id?: string | null };
  stop_sequences?: string[];
  stream?: boolean;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  tools?: AnthropicTool[];
  tool_choice?: AnthropicToolChoice;
  [key: string]: unknown;
}

export type AnthropicStopReason =
  | 'end_turn'
  | 'max_tokens'
  | 'stop_sequence'
  | 'tool_use'
  | 'pause_turn'
  | 'refusal'
  | 'model_context_window_exceeded';

/**
 * Token usage. `input_tokens` excludes prompt-cache reads and writes, which are counted in the
 * two `cache_*` fields (the total prompt is the sum of the three).
 */
export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
}

/** A content block in a response. */
export type AnthropicContentBlock =
  | AnthropicTextBlock
  | AnthropicToolUseBlock
  | AnthropicThinkingBlock
  | AnthropicRedactedThinkingBlock;

/** A non-streamed Messages response. `service` is govgate's governance envelope. */
export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: AnthropicContentBlock[];
  stop_reason: AnthropicStopReason | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
  service?: unknown;
}

export interface AnthropicMessageStartEvent {
  type: 'message_start';
  message: AnthropicMessage;
}

export interface AnthropicContentBlockStartEvent {
  type: 'content_block_start';
  index: number;
  content_block: AnthropicContentBlock;
}

export type AnthropicContentDelta =
  | { type: 'text_delta'; text: string }
  | { type: 'input_json_delta'; partial_json: string }
  | { type: 'thinking_delta'; thinking: string }
  | { type: 'signature_delta'; signature: string }
  | { type: 'citations_delta'; citation: unknown };

export interface AnthropicContentBlockDeltaEvent {
  type: 'content_block_delta';
  index: number;
  delta: AnthropicContentDelta;
}

export interface AnthropicContentBlockStopEvent {
  type: 'content_block_stop';
  index: number;
}

/**
 * Carries the stop reason and cumulative usage (`output_tokens` always; `input_tokens` and the
 * cache counts when known). govgate puts its `service` envelope on this event.
 */
export interface AnthropicMessageDeltaEvent {
  type: 'message_delta';
  delta: { stop_reason: AnthropicStopReason | null; stop_sequence: string | null };
  usage: {
    output_tokens: number;
    input_tokens?: number | null;
    cache_creation_input_tokens?: number | null;
    cache_read_input_tokens?: number | null;
  };
  service?: unknown;
}

export interface AnthropicMessageStopEvent {
  type: 'message_stop';
}

export interface AnthropicPingEvent {
  type: 'ping';
}

/** An error inside an otherwise 200 stream, e.g. `overloaded_error`. */
export interface AnthropicErrorEvent {
  type: 'error';
  error: { type: string; message: string };
}

export type AnthropicStreamEvent =
  | AnthropicMessageStartEvent
  | AnthropicContentBlockStartEvent
  | AnthropicContentBlockDeltaEvent
  | AnthropicContentBlockStopEvent
  | AnthropicMessageDeltaEvent
  | AnthropicMessageStopEvent
  | AnthropicPingEvent
  | AnthropicErrorEvent;
