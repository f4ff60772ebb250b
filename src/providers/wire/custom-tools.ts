/**
 * OpenAI custom (freeform) tools and Anthropic models. Anthropic has no freeform tools: a tool
 * takes a JSON object, described by its input_schema. A custom tool call's free-text input goes
 * to Anthropic as a tool_use input of one string, CUSTOM_INPUT_KEY; a custom tool itself cannot
 * be declared to an Anthropic model, and is refused (400) rather than dropped.
 */
import { ServiceError } from '../../core/errors.js';
import type { AnthropicTool } from './anthropic-types.js';
import type { OpenaiCustomTool } from './openai-types.js';

/** The one member of the input an Anthropic model gives a custom tool: the free text. */
export const CUSTOM_INPUT_KEY = 'input';

/** `tools[index]`, a custom tool, cannot be sent to an Anthropic model. */
export function customToolToAnthropic(tool: OpenaiCustomTool, index: number): AnthropicTool {
  throw new ServiceError(
    'invalid_request',
    `custom tool ${tool.custom.name} cannot be sent to an Anthropic model; send it to an OpenAI model`,
    { param: `tools[${index}]` },
  );
}

/** A custom call's free-text input as an Anthropic tool_use input. */
export function customInputToAnthropic(input: string | null | undefined): Record<string, unknown> {
  return { [CUSTOM_INPUT_KEY]: typeof input === 'string' ? input : '' };
}
