/**
 * OpenAI Chat Completions request → Anthropic Messages request (the agent spoke OpenAI, the model
 * is served by Anthropic).
 *
 * Notes on the mapping:
 * - System and developer messages, wherever they appear, are hoisted into `system`: parts of one
 *   message are joined by a newline, messages by a blank line.
 * - Anthropic requires user/assistant alternation, so consecutive messages with the same role
 *   are merged; `tool` messages become `tool_result` blocks of a user message, and within a user
 *   message tool results are kept ahead of other blocks (Anthropic requires them first).
 * - A tool message starting with TOOL_ERROR_PREFIX becomes `is_error: true` without the prefix.
 * - `image_url` data URLs become base64 image sources, http(s) URLs become url sources; other
 *   URLs, audio and non-PDF files are dropped. Empty text is dropped (Anthropic rejects it).
 * - Temperature is the same number, clamped to Anthropic's 0..1 (OpenAI allows 0..2): 0.7 means
 *   0.7 to both, and an Anthropic request that went through OpenAI's shape comes back unchanged.
 * - max_tokens is `max_completion_tokens`, else `max_tokens`, else `opts.defaultMaxTokens`.
 * - tool_choice and parallel_tool_calls are only sent along with at least one tool.
 * - An `allowed_tools` tool_choice sends only the tools it allows, with `any` (mode required) or
 *   `auto`: Anthropic has no such choice, and a tool it is not shown cannot be called.
 * - Custom (freeform) tools: a text-format one becomes a tool taking one string, a grammar-format
 *   one is refused with a 400 (custom-tools.ts); their calls become tool_use blocks.
 * - OpenAI-only fields (n, seed, logprobs, response_format, penalties, ...) are not forwarded.
 */
import type {
  AnthropicContentBlockParam,
  AnthropicImageBlock,
  AnthropicMessageParam,
  AnthropicMessagesRequest,
  AnthropicTool,
  AnthropicToolChoice,
  AnthropicToolResultBlock,
} from './anthropic-types.js';
import { isHttpUrl, parseBase64DataUrl } from './conversions.js';
import { customToolToAnthropic, toolUseOf } from './custom-tools.js';
import type {
  ChatCompletionRequest,
  OpenaiAssistantMessage,
  OpenaiTextPart,
  OpenaiTool,
  OpenaiToolChoice,
  OpenaiToolMessage,
  OpenaiUserContentPart,
} from './openai-types.js';
import { TOOL_ERROR_PREFIX } from './tool-arguments.js';

export interface OpenaiRequestToAnthropicOptions {
  /** Used when the request sets neither max_completion_tokens nor max_tokens. */
  defaultMaxTokens: number;
}

interface PendingMessage {
  role: 'user' | 'assistant';
  blocks: AnthropicContentBlockParam[];
  /** Number of leading tool_result blocks. */
  toolResults: number;
}

const EMPTY_INPUT_SCHEMA: Record<string, unknown> = Object.freeze({ type: 'object', properties: {} });

export function openaiRequestToAnthropic(
  req: ChatCompletionRequest,
  opts: OpenaiRequestToAnthropicOptions,
): AnthropicMessagesRequest {
  let system = '';
  const pending: PendingMessage[] = [];
  for (const message of req.messages) {
    switch (message.role) {
      case 'system':
      case 'developer': {
        const text = joinText(message.content, '\n');
        if (text !== '') system = system === '' ? text : `${system}\n\n${text}`;
        break;
      }
      case 'user':
        addUserContent(pending, message.content);
        break;
      case 'assistant':
        addAssistant(pending, message);
        break;
      case 'tool':
        addToolResult(pending, toolResult(message));
        break;
    }
  }

  const messages: AnthropicMessageParam[] = new Array(pending.length);
  for (let i = 0; i < pending.length; i++) {
    const { role, blocks } = pending[i]!;
    const only = blocks.length === 1 ? blocks[0] : undefined;
    messages[i] = { role, content: only?.type === 'text' ? only.text : blocks };
  }

  const out: AnthropicMessagesRequest = { model: req.model, messages, max_tokens: maxTokens(req, opts) };
  if (system !== '') out.system = system;
  if (typeof req.temperature === 'number') out.temperature = Math.min(1, Math.max(0, req.temperature));
  if (typeof req.top_p === 'number') out.top_p = req.top_p;
  const stop = stopSequences(req.stop);
  if (stop) out.stop_sequences = stop;
  if (typeof req.stream === 'boolean') out.stream = req.stream;
  if (typeof req.user === 'string' && req.user !== '') out.metadata = { user_id: req.user };

  const tools = req.tools ? mapTools(allowedTools(req.tools, req.tool_choice)) : [];
  if (tools.length > 0) {
    out.tools = tools;
    const choice = mapToolChoice(req.tool_choice, req.parallel_tool_calls === false);
    if (choice) out.tool_choice = choice;
  }
  return out;
}

function maxTokens(req: ChatCompletionRequest, opts: OpenaiRequestToAnthropicOptions): number {
  if (typeof req.max_completion_tokens === 'number') return req.max_completion_tokens;
  if (typeof req.max_tokens === 'number') return req.max_tokens;
  return opts.defaultMaxTokens;
}

function stopSequences(stop: ChatCompletionRequest['stop']): string[] | undefined {
  if (typeof stop === 'string') return stop === '' ? undefined : [stop];
  if (!Array.isArray(stop)) return undefined;
  const out: string[] = [];
  for (const s of stop) if (typeof s === 'string' && s !== '') out.push(s);
  return out.length > 0 ? out : undefined;
}

function joinText(content: string | OpenaiTextPart[] | null | undefined, separator: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let text = '';
  let first = true;
  for (const part of content) {
    if (part.type !== 'text') continue;
    text = first ? part.text : text + separator + part.text;
    first = false;
  }
  return text;
}

/** Appends to the last message when it has the same role, else starts a new message. */
function target(pending: PendingMessage[], role: 'user' | 'assistant'): PendingMessage {
  const last = pending[pending.length - 1];
  if (last && last.role === role) return last;
  const created: PendingMessage = { role, blocks: [], toolResults: 0 };
  pending.push(created);
  return created;
}

function addBlock(pending: PendingMessage[], role: 'user' | 'assistant', block: AnthropicContentBlockParam) {
  target(pending, role).blocks.push(block);
}

function addToolResult(pending: PendingMessage[], block: AnthropicToolResultBlock): void {
  const message = target(pending, 'user');
  if (message.toolResults === message.blocks.length) message.blocks.push(block);
  else message.blocks.splice(message.toolResults, 0, block);
  message.toolResults++;
}

function imageBlock(url: string): AnthropicImageBlock | undefined {
  const parsed = parseBase64DataUrl(url);
  if (parsed)
    return { type: 'image', source: { type: 'base64', media_type: parsed.mediaType, data: parsed.data } };
  if (isHttpUrl(url)) return { type: 'image', source: { type: 'url', url } };
  return undefined;
}

function userPartBlock(part: OpenaiUserContentPart): AnthropicContentBlockParam | undefined {
  switch (part.type) {
    case 'text':
      return part.text === '' ? undefined : { type: 'text', text: part.text };
    case 'image_url':
      return typeof part.image_url?.url === 'string' ? imageBlock(part.image_url.url) : undefined;
    case 'file': {
      const data = part.file?.file_data;
      const parsed = typeof data === 'string' ? parseBase64DataUrl(data) : undefined;
      if (parsed?.mediaType !== 'application/pdf') return undefined;
      return {
        type: 'document',
        source: { type: 'base64', media_type: parsed.mediaType, data: parsed.data },
      };
    }
    default:
      return undefined;
  }
}

function addUserContent(pending: PendingMessage[], content: string | OpenaiUserContentPart[]): void {
  if (typeof content === 'string') {
    if (content !== '') addBlock(pending, 'user', { type: 'text', text: content });
    return;
  }
  if (!Array.isArray(content)) return;
  for (const part of content) {
    const block = userPartBlock(part);
    if (block) addBlock(pending, 'user', block);
  }
}

function addAssistant(pending: PendingMessage[], message: OpenaiAssistantMessage): void {
  const content = message.content;
  if (typeof content === 'string') {
    if (content !== '') addBlock(pending, 'assistant', { type: 'text', text: content });
  } else if (Array.isArray(content)) {
    for (const part of content) {
      const text = part.type === 'text' ? part.text : part.type === 'refusal' ? part.refusal : '';
      if (typeof text === 'string' && text !== '') addBlock(pending, 'assistant', { type: 'text', text });
    }
  } else if (typeof message.refusal === 'string' && message.refusal !== '') {
    addBlock(pending, 'assistant', { type: 'text', text: message.refusal });
  }
  const calls = message.tool_calls;
  if (!Array.isArray(calls)) return;
  for (const call of calls) addBlock(pending, 'assistant', toolUseOf(call));
}

function toolResult(message: OpenaiToolMessage): AnthropicToolResultBlock {
  let text = joinText(message.content, '\n');
  const block: AnthropicToolResultBlock = { type: 'tool_result', tool_use_id: message.tool_call_id };
  if (text.startsWith(TOOL_ERROR_PREFIX)) {
    text = text.slice(TOOL_ERROR_PREFIX.length);
    block.is_error = true;
  }
  if (text !== '') block.content = text;
  return block;
}

function mapTools(tools: OpenaiTool[]): AnthropicTool[] {
  const out: AnthropicTool[] = [];
  for (let i = 0; i < tools.length; i++) {
    const tool = tools[i] as OpenaiTool;
    if (tool.type === 'custom') {
      out.push(customToolToAnthropic(tool, i));
      continue;
    }
    if (tool.type !== 'function' || !tool.function) continue;
    const fn = tool.function;
    const mapped: AnthropicTool = { name: fn.name };
    if (typeof fn.description === 'string') mapped.description = fn.description;
    mapped.input_schema = fn.parameters ?? EMPTY_INPUT_SCHEMA;
    out.push(mapped);
  }
  return out;
}

/** The declared tools an `allowed_tools` choice leaves (Anthropic has no such choice: the rest are not sent). */
function allowedTools(tools: OpenaiTool[], choice: OpenaiToolChoice | undefined): OpenaiTool[] {
  if (typeof choice !== 'object' || choice === null || choice.type !== 'allowed_tools') return tools;
  const names = new Set(
    choice.allowed_tools.tools.map((t) => (t.type === 'custom' ? t.custom.name : t.function.name)),
  );
  return tools.filter((t) => names.has(t.type === 'custom' ? t.custom.name : t.function.name));
}

function mapToolChoice(
  choice: OpenaiToolChoice | undefined,
  disableParallel: boolean,
): AnthropicToolChoice | undefined {
  if (choice === 'none') return { type: 'none' };
  let mapped: Exclude<AnthropicToolChoice, { type: 'none' }> | undefined;
  if (choice === 'required') mapped = { type: 'any' };
  else if (choice === 'auto') mapped = { type: 'auto' };
  else if (typeof choice === 'object' && choice !== null && choice.type === 'allowed_tools') {
    mapped = { type: choice.allowed_tools.mode === 'required' ? 'any' : 'auto' };
  } else if (typeof choice === 'object' && choice !== null && choice.type === 'function') {
    mapped = { type: 'tool', name: choice.function.name };
  } else if (typeof choice === 'object' && choice !== null && choice.type === 'custom') {
    mapped = { type: 'tool', name: choice.custom.name };
  }
  if (!disableParallel) return mapped;
  if (!mapped) mapped = { type: 'auto' };
  mapped.disable_parallel_tool_use = true;
  return mapped;
}
