/**
 * Anthropic message → OpenAI chat completion (the agent spoke OpenAI, the model is served by
 * Anthropic). The reverse of openaiResponseToAnthropic.
 *
 * - Text blocks are concatenated into `content` (null when there is no text but tool calls).
 * - `tool_use` blocks become `tool_calls` with JSON-string arguments; those of the request's
 *   custom tools (`custom`, their names) become custom calls with the input's string as input
 *   (custom-tools.ts).
 * - Thinking blocks are dropped.
 * - A stop reason `finish_reason` cannot say (stop_sequence and its sequence, pause_turn, …) is
 *   carried on the choice under ANTHROPIC_STOP, out of the JSON.
 * - `created` is a parameter (Unix seconds): this module reads no clock.
 */
import { ANTHROPIC_STOP } from './anthropic-stop.js';
import type { AnthropicMessage } from './anthropic-types.js';
import {
  anthropicIdToOpenai,
  anthropicStopToOpenai,
  anthropicUsageToOpenai,
  carriedAnthropicStop,
} from './conversions.js';
import { customInputFromAnthropic } from './custom-tools.js';
import type {
  ChatCompletion,
  ChatCompletionChoice,
  ChatCompletionMessage,
  OpenaiToolCall,
} from './openai-types.js';
import { stringifyToolInput } from './tool-arguments.js';

export function anthropicResponseToOpenai(
  res: AnthropicMessage,
  created: number,
  custom?: ReadonlySet<string>,
): ChatCompletion {
  let text = '';
  let toolCalls: OpenaiToolCall[] | undefined;
  for (const block of res.content) {
    if (block.type === 'text') {
      text += block.text;
    } else if (block.type === 'tool_use') {
      const call: OpenaiToolCall = custom?.has(block.name)
        ? {
            id: block.id,
            type: 'custom',
            custom: { name: block.name, input: customInputFromAnthropic(block.input) },
          }
        : {
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
  const choice: ChatCompletionChoice = {
    index: 0,
    message,
    finish_reason: anthropicStopToOpenai(res.stop_reason),
    logprobs: null,
  };
  const stop = carriedAnthropicStop(res.stop_reason, res.stop_sequence);
  if (stop) choice[ANTHROPIC_STOP] = stop;
  return {
    id: anthropicIdToOpenai(res.id),
    object: 'chat.completion',
    created,
    model: res.model,
    choices: [choice],
    usage: anthropicUsageToOpenai(res.usage),
  };
}
