import type { AnthropicMessage } from '../../src/providers/wire/index.js';

/**
 * Anthropic stop reasons, the stop sequence that goes with them, and the OpenAI finish_reason an
 * OpenAI client gets for each: the mapping both the translator and the gateway tests hold.
 */
export const STOP_REASONS: readonly [
  reason: NonNullable<AnthropicMessage['stop_reason']>,
  sequence: string | null,
  finish: string,
][] = [
  ['stop_sequence', 'END', 'stop'],
  ['pause_turn', null, 'stop'],
  ['model_context_window_exceeded', null, 'length'],
  ['refusal', null, 'content_filter'],
  ['end_turn', null, 'stop'],
  ['max_tokens', null, 'length'],
];
