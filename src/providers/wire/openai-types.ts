/**
 * OpenAI Chat Completions and Embeddings wire shapes: only the fields govgate reads or writes.
 * Chat Completions is govgate's canonical internal format (request, response and stream chunk).
 *
 * Request types carry an index signature so that fields we do not model (seed, logprobs,
 * response_format, ...) flow through unchanged when the request is forwarded to an
 * OpenAI-compatible provider. Response and chunk types are closed: we build them ourselves.
 */
import type { ANTHROPIC_STOP, AnthropicStop, CACHE_WRITE_TOKENS } from './anthropic-stop.js';

/** A text part of a message's content array. */
export interface OpenaiTextPart {
  type: 'text';
  text: string;
}

/** An image part; `url` is an http(s) URL or a `data:<media type>;base64,<data>` URL. */
export interface OpenaiImagePart {
  type: 'image_url';
  image_url: { url: string; detail?: 'auto' | 'low' | 'high' };
}

/** A file part; govgate maps base64 PDFs (`file_data` as a data URL) to Anthropic documents. */
export interface OpenaiFilePart {
  type: 'file';
  file: { file_data?: string; file_id?: string; filename?: string };
}

/** An audio input part; not translatable to Anthropic, passed through to OpenAI providers. */
export interface OpenaiAudioPart {
  type: 'input_audio';
  input_audio: { data: string; format: string };
}

/** A refusal part, only in assistant messages. */
export interface OpenaiRefusalPart {
  type: 'refusal';
  refusal: string;
}

export type OpenaiUserContentPart = OpenaiTextPart | OpenaiImagePart | OpenaiFilePart | OpenaiAudioPart;
export type OpenaiAssistantContentPart = OpenaiTextPart | OpenaiRefusalPart;

/** A complete function tool call, as in an assistant message or a non-streamed response. */
export interface OpenaiFunctionToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A call of a custom (freeform) tool: its input is free text, not JSON. */
export interface OpenaiCustomToolCall {
  id: string;
  type: 'custom';
  custom: { name: string; input: string };
}

export type OpenaiToolCall = OpenaiFunctionToolCall | OpenaiCustomToolCall;

export interface OpenaiSystemMessage {
  role: 'system';
  content: string | OpenaiTextPart[];
  name?: string;
}

export interface OpenaiDeveloperMessage {
  role: 'developer';
  content: string | OpenaiTextPart[];
  name?: string;
}

export interface OpenaiUserMessage {
  role: 'user';
  content: string | OpenaiUserContentPart[];
  name?: string;
}

export interface OpenaiAssistantMessage {
  role: 'assistant';
  content?: string | OpenaiAssistantContentPart[] | null;
  refusal?: string | null;
  tool_calls?: OpenaiToolCall[];
  name?: string;
}

export interface OpenaiToolMessage {
  role: 'tool';
  content: string | OpenaiTextPart[];
  tool_call_id: string;
}

export type OpenaiMessage =
  | OpenaiSystemMessage
  | OpenaiDeveloperMessage
  | OpenaiUserMessage
  | OpenaiAssistantMessage
  | OpenaiToolMessage;

/** A function tool definition; `parameters` is a JSON Schema object. */
export interface OpenaiFunctionTool {
  type: 'function';
  function: {
    name: string;
    description?: string;
    parameters?: Record<string, unknown>;
    strict?: boolean | null;
  };
}

/**
 * A custom (freeform) tool: the model calls it with free text, unconstrained (`format` absent or
 * `text`) or held to a grammar (Lark or a regular expression) that the provider enforces.
 */
export interface OpenaiCustomTool {
  type: 'custom';
  custom: {
    name: string;
    description?: string;
    format?:
      | { type: 'text' }
      | { type: 'grammar'; grammar: { definition: string; syntax: 'lark' | 'regex' } }
      | null;
  };
}

export type OpenaiTool = OpenaiFunctionTool | OpenaiCustomTool;

export interface OpenaiNamedToolChoice {
  type: 'function';
  function: { name: string };
}

export interface OpenaiNamedCustomToolChoice {
  type: 'custom';
  custom: { name: string };
}

/** Only these of the declared tools may be called (`required`: one of them must be). */
export interface OpenaiAllowedToolsChoice {
  type: 'allowed_tools';
  allowed_tools: {
    mode: 'auto' | 'required';
    tools: (OpenaiNamedToolChoice | OpenaiNamedCustomToolChoice)[];
  };
}

export type OpenaiToolChoice =
  | 'none'
  | 'auto'
  | 'required'
  | OpenaiNamedToolChoice
  | OpenaiNamedCustomToolChoice
  | OpenaiAllowedToolsChoice;

/** POST /v1/chat/completions body. */
export interface ChatCompletionRequest {
  model: string;
  messages: OpenaiMessage[];
  temperature?: number | null;
  top_p?: number | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  stop?: string | string[] | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean } | null;
  tools?: OpenaiTool[];
  tool_choice?: OpenaiToolChoice;
  parallel_tool_calls?: boolean;
  reasoning_effort?: string | null;
  user?: string;
  n?: number | null;
  [key: string]: unknown;
}

export type OpenaiFinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'function_call';

export interface OpenaiUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** `cached_tokens` is the part of `prompt_tokens` served from the prompt cache. */
  prompt_tokens_details?: { cached_tokens?: number; audio_tokens?: number } | null;
  completion_tokens_details?: { reasoning_tokens?: number; [key: string]: unknown } | null;
  /** Not on the wire: the part of `prompt_tokens` an Anthropic upstream wrote to its prompt cache. */
  [CACHE_WRITE_TOKENS]?: number;
}

/** The assistant message inside a non-streamed response choice. */
export interface ChatCompletionMessage {
  role: 'assistant';
  content: string | null;
  refusal?: string | null;
  tool_calls?: OpenaiToolCall[];
}

export interface ChatCompletionChoice {
  index: number;
  message: ChatCompletionMessage;
  finish_reason: OpenaiFinishReason | null;
  logprobs?: unknown;
  /** Not on the wire: what an Anthropic upstream said that `finish_reason` cannot (anthropic-stop.ts). */
  [ANTHROPIC_STOP]?: AnthropicStop;
}

/** A non-streamed chat completion response. `service` is govgate's governance envelope. */
export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: ChatCompletionChoice[];
  usage?: OpenaiUsage | null;
  system_fingerprint?: string | null;
  service_tier?: string | null;
  service?: unknown;
}

/**
 * A tool call fragment in a stream; the first fragment of a call carries `id` and the name. A
 * custom tool call streams as `{index, id, type: 'custom', custom: {name, input: ''}}`, then
 * pieces of its input in `custom.input` (the openai package's chunk type models function
 * fragments only; this is the non-streamed call's shape, cut as function arguments are).
 */
export interface OpenaiToolCallDelta {
  index: number;
  id?: string;
  type?: 'function' | 'custom';
  function?: { name?: string; arguments?: string };
  custom?: { name?: string; input?: string };
}

export interface ChatCompletionChunkDelta {
  role?: 'assistant';
  content?: string | null;
  refusal?: string | null;
  tool_calls?: OpenaiToolCallDelta[];
  /** The legacy single call (a request with `functions`), in fragments like a tool call's. */
  function_call?: { name?: string; arguments?: string } | null;
}

export interface ChatCompletionChunkChoice {
  index: number;
  delta: ChatCompletionChunkDelta;
  finish_reason: OpenaiFinishReason | null;
  logprobs?: unknown;
  /** Not on the wire, on a finish chunk: as on ChatCompletionChoice. */
  [ANTHROPIC_STOP]?: AnthropicStop;
}

/**
 * One `chat.completion.chunk` of a stream. With `stream_options.include_usage`, OpenAI sends a
 * last chunk with `choices: []` and the totals in `usage`.
 */
export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: ChatCompletionChunkChoice[];
  usage?: OpenaiUsage | null;
  system_fingerprint?: string | null;
  service_tier?: string | null;
  service?: unknown;
}

/** POST /v1/embeddings body. */
export interface EmbeddingRequest {
  model: string;
  input: string | string[] | number[] | number[][];
  encoding_format?: 'float' | 'base64';
  dimensions?: number;
  user?: string;
  [key: string]: unknown;
}

export interface Embedding {
  object: 'embedding';
  index: number;
  /** Floats, or a base64 string of little-endian float32 when `encoding_format` is base64. */
  embedding: number[] | string;
}

export interface EmbeddingResponse {
  object: 'list';
  data: Embedding[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
  service?: unknown;
}
