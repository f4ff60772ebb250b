/**
 * OpenAI custom (freeform) tools and Anthropic models. Anthropic has no freeform tools: a tool
 * takes a JSON object, described by its input_schema. So:
 * - a custom tool whose format is free text (`{type: 'text'}`, or none) becomes a tool taking one
 *   required string, CUSTOM_INPUT_KEY; its calls in the history become tool_use blocks with that
 *   string, and the model's tool_use of it comes back as a custom call with that string as input;
 * - a custom tool held to a grammar (Lark or a regular expression) is refused (400): the grammar
 *   is a constraint the provider enforces on the model's input, Anthropic cannot enforce it, and
 *   sending the tool without it would let the model call the tool with input the caller ruled out.
 */
import { UnsentError } from '../../core/errors.js';
import type { AnthropicTool, AnthropicToolUseBlock } from './anthropic-types.js';
import type { OpenaiCustomTool, OpenaiTool, OpenaiToolCall } from './openai-types.js';
import { parseToolArguments, stringifyToolInput } from './tool-arguments.js';

/** The one member of the input an Anthropic model gives a custom tool: the free text. */
export const CUSTOM_INPUT_KEY = 'input';

const CUSTOM_INPUT_SCHEMA: Record<string, unknown> = Object.freeze({
  type: 'object',
  properties: Object.freeze({ [CUSTOM_INPUT_KEY]: Object.freeze({ type: 'string' }) }),
  required: Object.freeze([CUSTOM_INPUT_KEY]),
  additionalProperties: false,
});

/** `tools[index]`, a custom tool, as an Anthropic tool; a grammar-format one is refused. */
export function customToolToAnthropic(tool: OpenaiCustomTool, index: number): AnthropicTool {
  const custom = tool.custom;
  if (custom.format?.type === 'grammar')
    throw new UnsentError(
      'invalid_request',
      `custom tool ${custom.name} has a ${custom.format.grammar.syntax} grammar, which an Anthropic ` +
        'model cannot be held to; send it to an OpenAI model, or give the tool a text format',
      { param: `tools[${index}].custom.format` },
    );
  const mapped: AnthropicTool = { name: custom.name };
  if (typeof custom.description === 'string') mapped.description = custom.description;
  mapped.input_schema = CUSTOM_INPUT_SCHEMA;
  return mapped;
}

/** A custom call's free-text input as an Anthropic tool_use input. */
export function customInputToAnthropic(input: string | null | undefined): Record<string, unknown> {
  return { [CUSTOM_INPUT_KEY]: typeof input === 'string' ? input : '' };
}

/** A call of the history or the answer (a function's or a custom tool's) as an Anthropic tool_use. */
export function toolUseOf(call: OpenaiToolCall): AnthropicToolUseBlock {
  return call.type === 'custom'
    ? {
        type: 'tool_use',
        id: call.id,
        name: call.custom.name,
        input: customInputToAnthropic(call.custom.input),
      }
    : {
        type: 'tool_use',
        id: call.id,
        name: call.function.name,
        input: parseToolArguments(call.function.arguments),
      };
}

/**
 * An Anthropic tool_use input of a custom tool as the call's free-text input: the string, when
 * the input is just that; otherwise (the model did not keep to the schema) the input's JSON text,
 * so nothing the model produced is lost (a text-format tool takes any text).
 */
export function customInputFromAnthropic(input: unknown): string {
  if (typeof input === 'object' && input !== null && !Array.isArray(input)) {
    let keys = 0;
    for (const _ in input) keys++;
    const text = (input as Record<string, unknown>)[CUSTOM_INPUT_KEY];
    if (keys === 1 && typeof text === 'string') return text;
  }
  return stringifyToolInput(input);
}

/** The names of a request's custom tools; undefined when it has none (the common case). */
export function customToolNames(tools: readonly OpenaiTool[] | null | undefined): Set<string> | undefined {
  if (!tools) return undefined;
  let names: Set<string> | undefined;
  for (const tool of tools) if (tool.type === 'custom') (names ??= new Set()).add(tool.custom.name);
  return names;
}
