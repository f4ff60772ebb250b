/**
 * Anthropic message → OpenAI chat completion (the agent spoke OpenAI, the model is served by
 * Anthropic). The reverse of openaiResponseToAnthropic.
 *
 * - Text blocks are concatenated into `content` (null when there is no text but tool calls).
 * - `tool_use` blocks become `tool_calls` with JSON-string arguments.
 * - Thinking blocks are dropped.
 * - `created` is a parameter (Unix seconds): this module reads no clock.
 */
import type { AnthropicMessage } from './anthropic-types.js';
import { anthropicIdToOpenai, anthropicStopToOpenai, anthropicUsageToOpenai } from './conversions.js';
import type { ChatCompletion, ChatCompletionMessage, OpenaiToolCall } from './openai-types.js';
import { stringifyToolInput } from './tool-arguments.js';

export function anthropicResponseToOpenai(res: AnthropicMessage, created: number): ChatCompletion {
  let text = '';
  let toolCalls: OpenaiToolCall[] | undefined;
  for (const block of res.content) {
    if (block.type === 'text') {
      text += block.text;
    } else if (block.type === 'tool_use') {
      const call: OpenaiToolCall = {
        id: block.id,
        type: 'function',
        function: { name: block.name, arguments: stringifyToolInput(block.input) },
      };
      if (toolCalls) toolCalls.push(call);
      else toolCalls = [call];
    }
  }
  const message: ChatCompletionMessage = {
    role: 'assistant',
    content: text === '' && toolCalls ? null : text,
  };
  if (toolCalls) message.tool_calls = toolCalls;
  return {
    id: anthropicIdToOpenai(res.id),
    object: 'chat.completion',
    created,
    model: res.model,
    choices: [{ index: 0, message, finish_reason: anthropicStopToOpenai(res.stop_reason), logprobs: null }],
    usage: anthropicUsageToOpenai(res.usage),
  };
}
