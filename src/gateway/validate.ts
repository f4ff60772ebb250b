import { ServiceError } from '../core/errors.js';
import type {
  AnthropicMessagesRequest,
  ChatCompletionRequest,
  EmbeddingRequest,
} from '../providers/wire/index.js';
import { isReasoningModel } from '../providers/wire/index.js';

export const LIMITS = {
  maxMessages: 500,
  maxTools: 200,
  minTemperature: 0,
  maxTemperature: 2,
  defaultTemperature: 0.7,
  anthropicDefaultMaxTokens: 4096,
  maxEmbeddingInputs: 2048,
  /**
   * A custom tool's grammar: the provider compiles it and the detectors scan it whole, so it is
   * bounded like a text rather than only by the body limit (real grammars are a few KB).
   */
  maxGrammarDefinition: 100_000,
  /** OpenAI's own limit on `n`. */
  maxChoices: 128,
} as const;

const CHAT_ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);

function bad(message: string, param: string): never {
  throw new ServiceError('invalid_request', message, { param });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * A model id as providers spell them (`gpt-4o`, `ft:gpt-4o-mini:org:x:id`, `claude-3-5-sonnet@20240620`,
 * `accounts/fireworks/models/…`, `llama3:8b`): it goes into the summary a human approver reads
 * and into the audit event, so free text (spaces, line breaks) is refused.
 */
const MODEL_ID = /^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$/;

function checkModel(body: Record<string, unknown>): string {
  const model = body.model;
  if (typeof model !== 'string' || model === '')
    bad('model is required and must be a non-empty string', 'model');
  if (!MODEL_ID.test(model))
    bad(
      'model must be a model id: 1-256 letters, digits and . _ : / @ + - (starting with a letter or digit)',
      'model',
    );
  return model;
}

function checkTools(tools: unknown, openaiShape: boolean): void {
  if (tools === undefined || tools === null) return;
  if (!Array.isArray(tools)) bad('tools must be an array', 'tools');
  if (tools.length > LIMITS.maxTools) bad(`tools may hold at most ${LIMITS.maxTools} items`, 'tools');
  for (let i = 0; i < tools.length; i++) {
    const t = tools[i] as unknown;
    if (!isObject(t)) bad('each tool must be an object', `tools[${i}]`);
    if (openaiShape && t.type === 'custom') checkCustomTool(t.custom, `tools[${i}].custom`);
    else if (openaiShape) {
      const fn = t.function;
      if (!isObject(fn) || typeof fn.name !== 'string' || fn.name === '') {
        bad('each tool needs function.name', `tools[${i}].function.name`);
      }
    } else if (typeof t.name !== 'string' || t.name === '') {
      bad('each tool needs a name', `tools[${i}].name`);
    }
  }
}

/**
 * An OpenAI custom (freeform) tool: named as a function is; its format, when given, is free text
 * or a grammar (Lark or a regular expression) of bounded size. The description and the grammar
 * are scanned, so they must be strings.
 */
function checkCustomTool(custom: unknown, at: string): void {
  if (!isObject(custom)) bad('a custom tool needs a custom object', at);
  if (typeof custom.name !== 'string' || custom.name === '') bad('each tool needs custom.name', `${at}.name`);
  const description = custom.description;
  if (description !== undefined && description !== null && typeof description !== 'string')
    bad('custom.description must be a string', `${at}.description`);
  const format = custom.format;
  if (format === undefined || format === null) return;
  if (!isObject(format)) bad('custom.format must be an object', `${at}.format`);
  if (format.type === 'text') return;
  if (format.type !== 'grammar') bad('custom.format.type must be text or grammar', `${at}.format.type`);
  const grammar = format.grammar;
  if (!isObject(grammar)) bad('a grammar format needs a grammar object', `${at}.format.grammar`);
  if (grammar.syntax !== 'lark' && grammar.syntax !== 'regex')
    bad('grammar.syntax must be lark or regex', `${at}.format.grammar.syntax`);
  const definition = grammar.definition;
  if (typeof definition !== 'string' || definition === '' || definition.length > LIMITS.maxGrammarDefinition)
    bad(
      `grammar.definition must be a string of 1 to ${LIMITS.maxGrammarDefinition} characters`,
      `${at}.format.grammar.definition`,
    );
}

function checkOptional(
  body: Record<string, unknown>,
  field: string,
  type: 'boolean' | 'string' | 'number',
): void {
  const v = body[field];
  if (v !== undefined && v !== null && typeof v !== type) bad(`${field} must be a ${type}`, field);
}

/** `v` is an object with a string `type` (a content block or part); returns the type. */
function checkTyped(v: unknown, param: string, what: string): string {
  if (!isObject(v)) bad(`each ${what} must be an object`, param);
  if (typeof v.type !== 'string') bad(`each ${what} needs a string type`, `${param}.type`);
  return v.type;
}

/** OpenAI content parts: objects with a type; text parts hold a string text. */
function checkParts(parts: unknown[], param: string): void {
  for (let j = 0; j < parts.length; j++) {
    const p = parts[j];
    const at = `${param}[${j}]`;
    if (checkTyped(p, at, 'content part') === 'text' && typeof (p as { text?: unknown }).text !== 'string')
      bad('a text part needs a string text', `${at}.text`);
  }
}

/**
 * An assistant message's tool calls: each names a function, or a custom tool; arguments (input,
 * for a custom tool), when present, are a string.
 */
function checkToolCalls(calls: unknown, param: string): void {
  if (calls === undefined || calls === null) return;
  if (!Array.isArray(calls)) bad('tool_calls must be an array', param);
  for (let k = 0; k < calls.length; k++) {
    const c = calls[k] as unknown;
    const at = `${param}[${k}]`;
    if (!isObject(c)) bad('each tool call must be an object', at);
    if (c.type === 'custom') {
      const custom = c.custom;
      if (!isObject(custom)) bad('a custom tool call needs a custom object', `${at}.custom`);
      if (typeof custom.name !== 'string') bad('a custom tool call needs custom.name', `${at}.custom.name`);
      if (custom.input !== undefined && custom.input !== null && typeof custom.input !== 'string')
        bad('custom.input must be a string', `${at}.custom.input`);
      continue;
    }
    const fn = c.function;
    if (!isObject(fn)) bad('a tool call needs a function object', `${at}.function`);
    if (typeof fn.name !== 'string') bad('a tool call needs function.name', `${at}.function.name`);
    if (fn.arguments !== undefined && fn.arguments !== null && typeof fn.arguments !== 'string')
      bad('function.arguments must be a JSON string', `${at}.function.arguments`);
  }
}

const TOOL_CHOICE_MODES = new Set(['none', 'auto', 'required']);

/** A tool_choice that names one tool: `{type: function, function: {name}}` or the custom form. */
function checkNamedToolChoice(choice: Record<string, unknown>, at: string): string {
  if (choice.type === 'function') {
    const fn = choice.function;
    if (!isObject(fn) || typeof fn.name !== 'string')
      bad('a function tool_choice needs function.name', `${at}.function.name`);
    return fn.name;
  }
  if (choice.type === 'custom') {
    const custom = choice.custom;
    if (!isObject(custom) || typeof custom.name !== 'string')
      bad('a custom tool_choice needs custom.name', `${at}.custom.name`);
    return custom.name;
  }
  bad('a tool_choice type is function, custom or allowed_tools', `${at}.type`);
}

/**
 * OpenAI tool_choice: none, auto or required; an object naming a function or custom tool; or
 * allowed_tools, a subset of the declared tools (mode auto or required) that the call may use.
 * Anything else is refused, as OpenAI would: a value passed on unread to an Anthropic model
 * would be dropped, and with it the restriction it asked for.
 */
function checkOpenaiToolChoice(choice: unknown, tools: unknown): void {
  if (choice === undefined || choice === null) return;
  if (typeof choice === 'string') {
    if (!TOOL_CHOICE_MODES.has(choice))
      bad('tool_choice is none, auto, required or an object', 'tool_choice');
    return;
  }
  if (!isObject(choice)) bad('tool_choice must be a string or an object', 'tool_choice');
  if (choice.type !== 'allowed_tools') {
    checkNamedToolChoice(choice, 'tool_choice');
    return;
  }
  const allowed = choice.allowed_tools;
  if (!isObject(allowed))
    bad('an allowed_tools tool_choice needs allowed_tools', 'tool_choice.allowed_tools');
  if (allowed.mode !== 'auto' && allowed.mode !== 'required')
    bad('allowed_tools.mode is auto or required', 'tool_choice.allowed_tools.mode');
  const list = allowed.tools;
  if (!Array.isArray(list) || list.length === 0 || list.length > LIMITS.maxTools)
    bad(`allowed_tools.tools lists 1 to ${LIMITS.maxTools} tools`, 'tool_choice.allowed_tools.tools');
  const declared = new Set<string>();
  if (Array.isArray(tools))
    for (const t of tools) {
      const name = isObject(t)
        ? isObject(t.function)
          ? t.function.name
          : isObject(t.custom)
            ? t.custom.name
            : undefined
        : undefined;
      if (typeof name === 'string') declared.add(name);
    }
  for (let i = 0; i < list.length; i++) {
    const at = `tool_choice.allowed_tools.tools[${i}]`;
    const item: unknown = list[i];
    if (!isObject(item)) bad('an allowed tool is an object', at);
    const name = checkNamedToolChoice(item, at);
    if (!declared.has(name)) bad(`allowed tool ${JSON.stringify(name.slice(0, 64))} is not among tools`, at);
  }
}

/** Spec 2.1. Unknown fields are ignored (they flow through to the provider). */
export function validateChatRequest(value: unknown): ChatCompletionRequest {
  if (!isObject(value)) bad('the request body must be a JSON object', 'body');
  checkModel(value);
  const messages = value.messages;
  if (!Array.isArray(messages)) bad('messages is required and must be an array', 'messages');
  if (messages.length < 1 || messages.length > LIMITS.maxMessages) {
    bad(`messages must hold 1 to ${LIMITS.maxMessages} items (got ${messages.length})`, 'messages');
  }
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as unknown;
    if (!isObject(m)) bad('each message must be an object', `messages[${i}]`);
    if (typeof m.role !== 'string' || !CHAT_ROLES.has(m.role)) {
      bad('role must be one of system, developer, user, assistant, tool', `messages[${i}].role`);
    }
    const c = m.content;
    if (c !== undefined && c !== null && typeof c !== 'string' && !Array.isArray(c)) {
      bad('content must be a string or an array of content parts', `messages[${i}].content`);
    }
    if ((c === undefined || c === null) && !(m.role === 'assistant'))
      bad('content is required', `messages[${i}].content`);
    if (Array.isArray(c)) checkParts(c, `messages[${i}].content`);
    if (m.role === 'assistant') checkToolCalls(m.tool_calls, `messages[${i}].tool_calls`);
    if (m.role === 'tool' && typeof m.tool_call_id !== 'string') {
      bad('a tool message needs tool_call_id', `messages[${i}].tool_call_id`);
    }
  }
  const t = value.temperature;
  if (t !== undefined && t !== null) {
    if (
      typeof t !== 'number' ||
      !Number.isFinite(t) ||
      t < LIMITS.minTemperature ||
      t > LIMITS.maxTemperature
    ) {
      bad(
        `temperature must be a number from ${LIMITS.minTemperature} to ${LIMITS.maxTemperature}`,
        'temperature',
      );
    }
  }
  const n = value.n;
  // Each choice is generated (and paid for) in full: the budget prices n of them.
  if (
    n !== undefined &&
    n !== null &&
    (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > LIMITS.maxChoices)
  )
    bad(`n must be an integer from 1 to ${LIMITS.maxChoices}`, 'n');
  checkTools(value.tools, true);
  checkOpenaiToolChoice(value.tool_choice, value.tools);
  checkOptional(value, 'parallel_tool_calls', 'boolean');
  checkOptional(value, 'reasoning_effort', 'string');
  checkOptional(value, 'stream', 'boolean');
  checkOptional(value, 'user', 'string');
  return value as ChatCompletionRequest;
}

/** Reasoning models refuse any temperature but their own; they keep the provider's default. */
export function takesDefaultTemperature(req: ChatCompletionRequest): boolean {
  return (
    (req.temperature === undefined || req.temperature === null) &&
    req.reasoning_effort == null &&
    !isReasoningModel(req.model)
  );
}

/**
 * Anthropic content blocks: objects with a type; the fields the translation reads are checked
 * (text, a source, a tool's id and name, a tool result's inner blocks). Unknown types pass: the
 * translation drops them.
 */
function checkBlocks(blocks: unknown[], param: string, inner = false): void {
  for (let j = 0; j < blocks.length; j++) {
    const b = blocks[j] as Record<string, unknown>;
    const at = `${param}[${j}]`;
    switch (checkTyped(b, at, 'content block')) {
      case 'text':
        if (typeof b.text !== 'string') bad('a text block needs a string text', `${at}.text`);
        break;
      case 'image':
      case 'document':
        if (!isObject(b.source)) bad(`a ${b.type} block needs a source object`, `${at}.source`);
        break;
      case 'tool_use':
        if (inner) break;
        if (typeof b.id !== 'string') bad('a tool_use block needs a string id', `${at}.id`);
        if (typeof b.name !== 'string') bad('a tool_use block needs a string name', `${at}.name`);
        break;
      case 'tool_result': {
        if (inner) break;
        if (typeof b.tool_use_id !== 'string')
          bad('a tool_result block needs a string tool_use_id', `${at}.tool_use_id`);
        const content = b.content;
        if (Array.isArray(content)) checkBlocks(content, `${at}.content`, true);
        else if (content !== undefined && content !== null && typeof content !== 'string')
          bad('tool_result content must be a string or an array of blocks', `${at}.content`);
        break;
      }
    }
  }
}

/** Anthropic tool_choice: an object with a type; a `tool` choice names the tool. */
function checkAnthropicToolChoice(choice: unknown): void {
  if (choice === undefined || choice === null) return;
  if (!isObject(choice) || typeof choice.type !== 'string')
    bad('tool_choice must be an object with a type (auto, any, tool, none)', 'tool_choice');
  if (choice.type === 'tool' && typeof choice.name !== 'string')
    bad('a tool tool_choice needs a name', 'tool_choice.name');
}

/** Spec 2.3: Anthropic Messages; max_tokens defaults to 4096. */
export function validateMessagesRequest(value: unknown): AnthropicMessagesRequest {
  if (!isObject(value)) bad('the request body must be a JSON object', 'body');
  checkModel(value);
  const messages = value.messages;
  if (!Array.isArray(messages)) bad('messages is required and must be an array', 'messages');
  if (messages.length < 1 || messages.length > LIMITS.maxMessages) {
    bad(`messages must hold 1 to ${LIMITS.maxMessages} items (got ${messages.length})`, 'messages');
  }
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as unknown;
    if (!isObject(m)) bad('each message must be an object', `messages[${i}]`);
    if (m.role !== 'user' && m.role !== 'assistant')
      bad('role must be user or assistant', `messages[${i}].role`);
    if (typeof m.content !== 'string' && !Array.isArray(m.content)) {
      bad('content must be a string or an array of content blocks', `messages[${i}].content`);
    }
    if (Array.isArray(m.content)) checkBlocks(m.content, `messages[${i}].content`);
  }
  const maxTokens = value.max_tokens;
  if (maxTokens === undefined || maxTokens === null) value.max_tokens = LIMITS.anthropicDefaultMaxTokens;
  else if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) {
    bad('max_tokens must be a positive integer', 'max_tokens');
  }
  const system = value.system;
  if (system !== undefined && system !== null && typeof system !== 'string' && !Array.isArray(system)) {
    bad('system must be a string or an array of text blocks', 'system');
  }
  if (Array.isArray(system)) checkBlocks(system, 'system', true);
  const t = value.temperature;
  if (t !== undefined && t !== null && (typeof t !== 'number' || !Number.isFinite(t) || t < 0 || t > 1)) {
    bad('temperature must be a number from 0 to 1', 'temperature');
  }
  checkTools(value.tools, false);
  checkAnthropicToolChoice(value.tool_choice);
  checkOptional(value, 'stream', 'boolean');
  return value as AnthropicMessagesRequest;
}

const isTokenId = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/**
 * An array `input` is one of OpenAI's three forms, all of its items alike: strings (each
 * non-empty), token ids (one input), or arrays of token ids (one input each).
 */
function checkEmbeddingItems(input: readonly unknown[]): void {
  const first = input[0];
  const form =
    typeof first === 'string'
      ? 'strings'
      : isTokenId(first)
        ? 'tokens'
        : Array.isArray(first)
          ? 'token arrays'
          : undefined;
  for (let i = 0; i < input.length; i++) {
    const item = input[i];
    const fits =
      form === 'strings'
        ? typeof item === 'string' && item.length > 0
        : form === 'tokens'
          ? isTokenId(item)
          : form === 'token arrays' && Array.isArray(item) && item.length > 0 && item.every(isTokenId);
    if (!fits)
      bad(
        'input is a string, or an array of non-empty strings, of token ids, or of arrays of token ids (one form throughout)',
        `input[${i}]`,
      );
  }
}

export function validateEmbeddingRequest(value: unknown): EmbeddingRequest {
  if (!isObject(value)) bad('the request body must be a JSON object', 'body');
  checkModel(value);
  const input = value.input;
  const ok =
    (typeof input === 'string' && input.length > 0) ||
    (Array.isArray(input) && input.length > 0 && input.length <= LIMITS.maxEmbeddingInputs);
  if (!ok)
    bad(`input must be a non-empty string or an array of 1 to ${LIMITS.maxEmbeddingInputs} items`, 'input');
  if (Array.isArray(input)) checkEmbeddingItems(input);
  const dims = value.dimensions;
  if (dims != null && (typeof dims !== 'number' || !Number.isInteger(dims) || dims < 1)) {
    bad('dimensions must be a positive integer', 'dimensions');
  }
  return value as EmbeddingRequest;
}
