/**
 * OpenAI's reasoning models: the o-series and gpt-5 (gpt-5-mini, gpt-5.2, …), but not the gpt-5
 * chat models. They refuse `max_tokens` (they take `max_completion_tokens`) and any temperature
 * but their own.
 */
const REASONING_MODEL = /^(?:o\d|gpt-5(?![\w.]*-chat))/;

export function isReasoningModel(model: string): boolean {
  return REASONING_MODEL.test(model);
}
