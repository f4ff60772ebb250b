/**
 * Tool-call arguments travel as a JSON string in OpenAI and as a parsed object in Anthropic.
 * Model output is not always valid JSON, and the translation must never throw on it.
 */

/**
 * When a tool call's `arguments` string is not a JSON object, the Anthropic side gets
 * `input: { _raw_arguments: "<the original string>" }`. Translating such an input back to
 * OpenAI restores the original string exactly.
 */
export const RAW_ARGUMENTS_KEY = '_raw_arguments';

/**
 * Anthropic marks failed tool results with `is_error: true`; OpenAI tool messages have no
 * such flag, so the content is prefixed with this marker (and the marker is read back).
 */
export const TOOL_ERROR_PREFIX = '[tool_error] ';

const EMPTY_ARGUMENTS = /^\s*$/;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Parses OpenAI `arguments` into an Anthropic `input` object; never throws. */
export function parseToolArguments(raw: string | undefined | null): Record<string, unknown> {
  if (raw === undefined || raw === null || EMPTY_ARGUMENTS.test(raw)) return {};
  try {
    const parsed: unknown = JSON.parse(raw);
    if (isPlainObject(parsed)) return parsed;
  } catch {
    // fall through: keep the raw text so nothing the model produced is lost
  }
  return { [RAW_ARGUMENTS_KEY]: raw };
}

/** Serialises an Anthropic `input` into OpenAI `arguments` (inverse of parseToolArguments). */
export function stringifyToolInput(input: unknown): string {
  if (!isPlainObject(input)) return '{}';
  const raw = input[RAW_ARGUMENTS_KEY];
  if (typeof raw === 'string') {
    let keys = 0;
    for (const _ in input) keys++;
    if (keys === 1) return raw;
  }
  return JSON.stringify(input);
}
