/**
 * An Anthropic stop that OpenAI's `finish_reason` cannot say: `stop_sequence` and the sequence
 * that matched, `pause_turn`, `model_context_window_exceeded`, or a reason this module does not
 * know. It rides on the OpenAI-shaped choice (whole answers and finish chunks) under a symbol
 * key, which `JSON.stringify` leaves out: an Anthropic client gets it back, an OpenAI client
 * sees only the standard `finish_reason`, and no upstream's JSON can set it.
 */
import type { AnthropicStopReason } from './anthropic-types.js';

export const ANTHROPIC_STOP: unique symbol = Symbol('govgate.anthropic_stop');

export interface AnthropicStop {
  readonly stop_reason: AnthropicStopReason;
  readonly stop_sequence: string | null;
}

/**
 * Prompt-cache writes of an Anthropic answer (`cache_creation_input_tokens`), which the OpenAI
 * usage shape has no field for: kept beside it, out of its JSON, for the audit trail's cost.
 */
export const CACHE_WRITE_TOKENS: unique symbol = Symbol('govgate.cache_write_tokens');
