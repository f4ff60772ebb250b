/**
 * OpenAI chat completion → Anthropic message (the agent spoke Anthropic, the upstream provider
 * answered in OpenAI's format). Only `choices[0]` is used.
 *
 * - `message.content` becomes one text block (a refusal with no content becomes the text).
 * - Each tool call becomes a `tool_use` block; arguments that are not a JSON object never throw:
 *   they become `input: { _raw_arguments: "<original>" }` (see RAW_ARGUMENTS_KEY). A custom tool
 *   call's free-text input becomes `input: { input: "<text>" }` (custom-tools.ts).
 * - The id `chatcmpl-X` becomes `msg_X`; `model` is the model the agent asked for.
 * - Usage: cached prompt tokens move from `prompt_tokens` to `cache_read_input_tokens`.
 * - The stop is the one an Anthropic upstream said, when the choice carries it (ANTHROPIC_STOP),
 *   else the mapped `finish_reason` with `stop_sequence: null`.
 */
import { ANTHROPIC_STOP } from './anthropic-stop.js';
import type { AnthropicContentBlock, AnthropicMessage } from './anthropic-types.js';
import { anthropicStopOf, openaiIdToAnthropic, openaiUsageToAnthropic } from './conversions.js';
import { toolUseOf } from './custom-tools.js';
import type { ChatCompletion } from './openai-types.js';

export function openaiResponseToAnthropic(res: ChatCompletion, requestModel: string): AnthropicMessage {
  const choice = res.choices[0];
  const content: AnthropicContentBlock[] = [];
  const message = choice?.message;
  if (message) {
    const text = typeof message.content === 'string' && message.content !== '' ? message.content : undefined;
    if (text !== undefined) content.push({ type: 'text', text });
    else if (typeof message.refusal === 'string' && message.refusal !== '') {
      content.push({ type: 'text', text: message.refusal });
    }
    if (Array.isArray(message.tool_calls)) {
      for (const call of message.tool_calls) content.push(toolUseOf(call));
    }
  }
  const stop = anthropicStopOf(choice?.finish_reason, choice?.[ANTHROPIC_STOP]);
  return {
    id: openaiIdToAnthropic(res.id),
    type: 'message',
    role: 'assistant',
    model: requestModel,
    content,
    stop_reason: stop.stop_reason,
    stop_sequence: stop.stop_sequence,
    usage: openaiUsageToAnthropic(res.usage),
  };
}
