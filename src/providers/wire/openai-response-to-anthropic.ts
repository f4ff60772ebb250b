/**
 * OpenAI chat completion → Anthropic message (the agent spoke Anthropic, the upstream provider
 * answered in OpenAI's format). Only `choices[0]` is used.
 *
 * - `message.content` becomes one text block (a refusal with no content becomes the text).
 * - Each tool call becomes a `tool_use` block; arguments that are not a JSON object never throw:
 *   they become `input: { _raw_arguments: "<original>" }` (see RAW_ARGUMENTS_KEY).
 * - The id `chatcmpl-X` becomes `msg_X`; `model` is the model the agent asked for.
 * - Usage: cached prompt tokens move from `prompt_tokens` to `cache_read_input_tokens`.
 */
import type { AnthropicContentBlock, AnthropicMessage } from './anthropic-types.js';
import { openaiFinishToAnthropic, openaiIdToAnthropic, openaiUsageToAnthropic } from './conversions.js';
import type { ChatCompletion } from './openai-types.js';
import { parseToolArguments } from './tool-arguments.js';

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
      for (const call of message.tool_calls) {
        content.push({
          type: 'tool_use',
          id: call.id,
          name: call.function.name,
          input: parseToolArguments(call.function.arguments),
        });
      }
    }
  }
  return {
    id: openaiIdToAnthropic(res.id),
    type: 'message',
    role: 'assistant',
    model: requestModel,
    content,
    stop_reason: openaiFinishToAnthropic(choice?.finish_reason),
    stop_sequence: null,
    usage: openaiUsageToAnthropic(res.usage),
  };
}
