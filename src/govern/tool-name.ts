import { ServiceError } from '../core/errors.js';

/**
 * A tool or server name an agent governs, executes or an admin configures: 1-200 characters of
 * letters, digits and `_ - . : /`, the first not `.`, `:` or `/`. It takes every OpenAI function
 * name (`[A-Za-z0-9_-]{1,64}`) and MCP's dotted, slashed and prefixed names (`mcp:github/create_issue`).
 * A name is shown to a human approver (an approval's `tool` and `summary`), so it is an identifier,
 * never free text: no spaces, line breaks or other characters that could pass for a message.
 */
const TOOL_NAME_RE = /^[A-Za-z0-9_-][A-Za-z0-9_.:/-]{0,199}$/;

export const TOOL_NAME_RULE = '1-200 characters of letters, digits and _ - . : /, the first not . : or /';

/** `value` when it is a tool or server name, else 400 `invalid_request` naming `param`. */
export function toolName(value: unknown, param: string): string {
  if (typeof value !== 'string')
    throw new ServiceError('invalid_request', `${param} must be a string`, { param });
  if (!TOOL_NAME_RE.test(value))
    throw new ServiceError('invalid_request', `${param} must be ${TOOL_NAME_RULE}`, { param });
  return value;
}
