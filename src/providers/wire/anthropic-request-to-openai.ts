/**
 * Anthropic Messages request → OpenAI Chat Completions request (the agent spoke Anthropic, the
 * upstream provider speaks OpenAI).
 *
 * Notes on the mapping:
 * - `system` (a string or text blocks, joined by a blank line) becomes a leading system message.
 * - In a user message, `tool_result` blocks become `role: 'tool'` messages and every other block
 *   (text, images, PDFs, images inside tool results) goes, in its original order, into one user
 *   message placed after those tool messages: OpenAI requires the tool answers to follow the
 *   assistant's `tool_calls` directly.
 * - A failed tool result (`is_error`) keeps its text, prefixed with TOOL_ERROR_PREFIX.
 * - Thinking blocks, server tools and unknown block types are dropped.
 * - `temperature` is copied as is (Anthropic's 0..1 is inside OpenAI's 0..2; the way back clamps).
 * - A streamed request asks for `stream_options.include_usage`, so the translated stream can
 *   report usage as Anthropic streams always do.
 */
import type {
  AnthropicContentBlockParam,
  AnthropicDocumentBlock,
  AnthropicImageBlock,
  AnthropicMessagesRequest,
  AnthropicTool,
  AnthropicToolChoice,
  AnthropicToolResultBlock,
} from './anthropic-types.js';
import { toBase64DataUrl } from './conversions.js';
import type {
  ChatCompletionRequest,
  OpenaiAssistantMessage,
  OpenaiFilePart,
  OpenaiFunctionTool,
  OpenaiImagePart,
  OpenaiMessage,
  OpenaiToolCall,
  OpenaiToolChoice,
  OpenaiUserContentPart,
} from './openai-types.js';
import { isReasoningModel } from './reasoning.js';
import { stringifyToolInput, TOOL_ERROR_PREFIX } from './tool-arguments.js';

export function anthropicRequestToOpenai(req: AnthropicMessagesRequest): ChatCompletionRequest {
  const messages: OpenaiMessage[] = [];
  const system = systemText(req.system);
  if (system !== '') messages.push({ role: 'system', content: system });
  for (const message of req.messages) {
    if (message.role === 'assistant') messages.push(assistantMessage(message.content));
    else appendUserMessages(message.content, messages);
  }

  const out: ChatCompletionRequest = { model: req.model, messages };
  if (typeof req.max_tokens === 'number') {
    if (isReasoningModel(req.model)) out.max_completion_tokens = req.max_tokens;
    else out.max_tokens = req.max_tokens;
  }
  if (typeof req.temperature === 'number') out.temperature = req.temperature;
  if (typeof req.top_p === 'number') out.top_p = req.top_p;
  if (Array.isArray(req.stop_sequences) && req.stop_sequences.length > 0)
    out.stop = req.stop_sequences.slice();
  if (req.stream === true) {
    out.stream = true;
    out.stream_options = { include_usage: true };
  } else if (req.stream === false) {
    out.stream = false;
  }
  const userId = req.metadata?.user_id;
  if (typeof userId === 'string' && userId !== '') out.user = userId;

  const tools = req.tools ? mapTools(req.tools) : [];
  if (tools.length > 0) {
    out.tools = tools;
    if (req.tool_choice) {
      out.tool_choice = mapToolChoice(req.tool_choice);
      if (
        'disable_parallel_tool_use' in req.tool_choice &&
        req.tool_choice.disable_parallel_tool_use === true
      ) {
        out.parallel_tool_calls = false;
      }
    }
  }
  return out;
}

function systemText(system: AnthropicMessagesRequest['system']): string {
  if (system === undefined || system === null) return '';
  if (typeof system === 'string') return system;
  let text = '';
  let first = true;
  for (const block of system) {
    if (block.type !== 'text') continue;
    text = first ? block.text : `${text}\n\n${block.text}`;
    first = false;
  }
  return text;
}

function imagePart(block: AnthropicImageBlock): OpenaiImagePart | undefined {
  const source = block.source;
  if (source.type === 'base64') {
    return { type: 'image_url', image_url: { url: toBase64DataUrl(source.media_type, source.data) } };
  }
  if (source.type === 'url') return { type: 'image_url', image_url: { url: source.url } };
  return undefined;
}

function documentPart(block: AnthropicDocumentBlock): OpenaiFilePart | undefined {
  const source = block.source;
  if (source.type !== 'base64' || source.media_type !== 'application/pdf' || !source.data) return undefined;
  const file: OpenaiFilePart['file'] = { file_data: toBase64DataUrl(source.media_type, source.data) };
  file.filename = block.title ? block.title : 'document.pdf';
  return { type: 'file', file };
}

/** Adds a translatable non-tool block to `parts`; other block types are dropped. */
function pushUserPart(block: AnthropicContentBlockParam, parts: OpenaiUserContentPart[]): void {
  let part: OpenaiUserContentPart | undefined;
  if (block.type === 'text') part = { type: 'text', text: block.text };
  else if (block.type === 'image') part = imagePart(block);
  else if (block.type === 'document') part = documentPart(block);
  if (part) parts.push(part);
}

function appendUserMessages(content: string | AnthropicContentBlockParam[], out: OpenaiMessage[]): void {
  if (typeof content === 'string') {
    out.push({ role: 'user', content });
    return;
  }
  const parts: OpenaiUserContentPart[] = [];
  for (const block of content) {
    if (block.type === 'tool_result') out.push(toolMessage(block, parts));
    else pushUserPart(block, parts);
  }
  if (parts.length === 0) return;
  const only = parts.length === 1 ? parts[0] : undefined;
  out.push({ role: 'user', content: only?.type === 'text' ? only.text : parts });
}

function toolMessage(block: AnthropicToolResultBlock, parts: OpenaiUserContentPart[]): OpenaiMessage {
  let text = '';
  const content = block.content;
  if (typeof content === 'string') {
    text = content;
  } else if (Array.isArray(content)) {
    let first = true;
    for (const inner of content) {
      if (inner.type === 'text') {
        text = first ? inner.text : `${text}\n${inner.text}`;
        first = false;
      } else {
        // OpenAI tool messages hold text only: images and documents follow in the user message.
        pushUserPart(inner, parts);
      }
    }
  }
  if (block.is_error === true) text = TOOL_ERROR_PREFIX + text;
  return { role: 'tool', tool_call_id: block.tool_use_id, content: text };
}

function assistantMessage(content: string | AnthropicContentBlockParam[]): OpenaiAssistantMessage {
  if (typeof content === 'string') return { role: 'assistant', content };
  let text = '';
  let toolCalls: OpenaiToolCall[] | undefined;
  for (const block of content) {
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
  if (!toolCalls) return { role: 'assistant', content: text };
  return { role: 'assistant', content: text === '' ? null : text, tool_calls: toolCalls };
}

function mapTools(tools: AnthropicTool[]): OpenaiFunctionTool[] {
  const out: OpenaiFunctionTool[] = [];
  for (const tool of tools) {
    // Server tools (web search, bash, ...) have no input_schema and no OpenAI equivalent.
    if (!tool.input_schema) continue;
    const fn: OpenaiFunctionTool['function'] = { name: tool.name };
    if (typeof tool.description === 'string') fn.description = tool.description;
    fn.parameters = tool.input_schema;
    out.push({ type: 'function', function: fn });
  }
  return out;
}

function mapToolChoice(choice: AnthropicToolChoice): OpenaiToolChoice {
  switch (choice.type) {
    case 'any':
      return 'required';
    case 'tool':
      return { type: 'function', function: { name: choice.name } };
    case 'none':
      return 'none';
    default:
      return 'auto';
  }
}
