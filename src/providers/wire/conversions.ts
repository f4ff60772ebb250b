/** Small field-level conversions shared by the request, response and stream translators. */
import { type AnthropicStop, CACHE_WRITE_TOKENS } from './anthropic-stop.js';
import type { AnthropicStopReason, AnthropicUsage } from './anthropic-types.js';
import type { OpenaiFinishReason, OpenaiUsage } from './openai-types.js';

const OPENAI_ID_PREFIX = 'chatcmpl-';
const ANTHROPIC_ID_PREFIX = 'msg_';

/** `chatcmpl-abc` → `msg_abc`; an id already in Anthropic form is kept. */
export function openaiIdToAnthropic(id: string): string {
  if (id.startsWith(ANTHROPIC_ID_PREFIX)) return id;
  return ANTHROPIC_ID_PREFIX + (id.startsWith(OPENAI_ID_PREFIX) ? id.slice(OPENAI_ID_PREFIX.length) : id);
}

/** `msg_abc` → `chatcmpl-abc`; an id already in OpenAI form is kept. */
export function anthropicIdToOpenai(id: string): string {
  if (id.startsWith(OPENAI_ID_PREFIX)) return id;
  return OPENAI_ID_PREFIX + (id.startsWith(ANTHROPIC_ID_PREFIX) ? id.slice(ANTHROPIC_ID_PREFIX.length) : id);
}

/** stop→end_turn, length→max_tokens, tool_calls→tool_use, content_filter→refusal, else end_turn. */
export function openaiFinishToAnthropic(reason: OpenaiFinishReason | null | undefined): AnthropicStopReason {
  switch (reason) {
    case 'length':
      return 'max_tokens';
    case 'tool_calls':
      return 'tool_use';
    case 'content_filter':
      return 'refusal';
    default:
      return 'end_turn';
  }
}

/**
 * end_turn, stop_sequence, pause_turn → stop; max_tokens and model_context_window_exceeded →
 * length; tool_use → tool_calls; refusal → content_filter. What this loses is carried beside
 * the finish_reason for Anthropic clients (carriedAnthropicStop).
 */
export function anthropicStopToOpenai(reason: AnthropicStopReason | null | undefined): OpenaiFinishReason {
  switch (reason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      return 'stop';
  }
}

/**
 * The Anthropic stop to carry on an OpenAI-shaped choice (anthropic-stop.ts): undefined when its
 * `finish_reason` maps back to the same stop (end_turn, max_tokens, tool_use, refusal, with no
 * sequence), so the common answer carries nothing.
 */
export function carriedAnthropicStop(reason: unknown, sequence: unknown): AnthropicStop | undefined {
  if (typeof reason !== 'string') return undefined;
  const stopSequence = typeof sequence === 'string' ? sequence : null;
  const stopReason = reason as AnthropicStopReason;
  if (stopSequence === null && openaiFinishToAnthropic(anthropicStopToOpenai(stopReason)) === stopReason)
    return undefined;
  return { stop_reason: stopReason, stop_sequence: stopSequence };
}

/**
 * The Anthropic stop of an OpenAI-shaped choice: the carried one while the choice's
 * `finish_reason` is still the one it maps to (an answer replaced since, by a block, has its own),
 * else the mapped `finish_reason` with no sequence.
 */
export function anthropicStopOf(
  finish: OpenaiFinishReason | null | undefined,
  carried: AnthropicStop | undefined,
): AnthropicStop {
  if (carried !== undefined && anthropicStopToOpenai(carried.stop_reason) === finish) return carried;
  return { stop_reason: openaiFinishToAnthropic(finish), stop_sequence: null };
}

function count(value: number | null | undefined): number {
  return typeof value === 'number' && value > 0 ? value : 0;
}

/** Usage fields as both APIs may report them; missing counts are zero. */
export interface AnthropicUsageLike {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
}

/**
 * Anthropic counts cache reads and writes apart from `input_tokens`; OpenAI's `prompt_tokens`
 * includes them, with cache reads also reported as `prompt_tokens_details.cached_tokens`.
 */
export function anthropicUsageToOpenai(usage: AnthropicUsageLike | null | undefined): OpenaiUsage {
  if (!usage) return { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  const cached = count(usage.cache_read_input_tokens);
  const prompt = count(usage.input_tokens) + count(usage.cache_creation_input_tokens) + cached;
  const completion = count(usage.output_tokens);
  const out: OpenaiUsage = {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
  };
  if (cached > 0) out.prompt_tokens_details = { cached_tokens: cached };
  const written = count(usage.cache_creation_input_tokens);
  if (written > 0) out[CACHE_WRITE_TOKENS] = written;
  return out;
}

/** Inverse of anthropicUsageToOpenai: cached prompt tokens become `cache_read_input_tokens`. */
export function openaiUsageToAnthropic(usage: OpenaiUsage | null | undefined): AnthropicUsage {
  if (!usage) return { input_tokens: 0, output_tokens: 0 };
  const cached = count(usage.prompt_tokens_details?.cached_tokens);
  const out: AnthropicUsage = {
    input_tokens: Math.max(0, count(usage.prompt_tokens) - cached),
    output_tokens: count(usage.completion_tokens),
  };
  if (cached > 0) out.cache_read_input_tokens = cached;
  return out;
}

/** Splits `data:<media type>[;params];base64,<data>`; undefined for anything else. */
export function parseBase64DataUrl(url: string): { mediaType: string; data: string } | undefined {
  if (!url.startsWith('data:')) return undefined;
  const comma = url.indexOf(',');
  if (comma < 0) return undefined;
  const header = url.slice(5, comma);
  if (!header.endsWith(';base64')) return undefined;
  const semi = header.indexOf(';');
  const mediaType = header.slice(0, semi);
  if (mediaType === '') return undefined;
  return { mediaType, data: url.slice(comma + 1) };
}

export function toBase64DataUrl(mediaType: string, data: string): string {
  return `data:${mediaType};base64,${data}`;
}

/** True for http: and https: URLs (case-insensitive scheme). */
export function isHttpUrl(url: string): boolean {
  const lower = url.slice(0, 8).toLowerCase();
  return lower.startsWith('https://') || lower.startsWith('http://');
}
