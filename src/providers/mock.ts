import { createHash } from 'node:crypto';
import { ServiceError } from '../core/errors.js';
import { newId } from '../util/ids.js';
import { type ChatCall, MOCK_MODELS, type Provider } from './types.js';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  EmbeddingRequest,
  EmbeddingResponse,
  OpenaiFunctionTool,
  OpenaiMessage,
  OpenaiToolCall,
  OpenaiToolCallDelta,
  OpenaiUsage,
} from './wire/index.js';
import { embeddingResponse } from './wire/index.js';

/** Rough token count (about four characters a token), enough for usage figures. */
function tokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

function textOf(message: OpenaiMessage | undefined): string {
  if (!message) return '';
  const content = (message as { content?: unknown }).content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p) =>
        typeof p === 'object' && p !== null && typeof (p as { text?: unknown }).text === 'string'
          ? (p as { text: string }).text
          : '',
      )
      .join('');
  }
  return '';
}

function promptTokens(request: ChatCompletionRequest): number {
  let n = 0;
  for (const m of request.messages) n += tokens(textOf(m)) + 3;
  return n;
}

/** Arguments that satisfy a tool's JSON schema in the simplest way: one value per required field. */
function exampleArguments(tool: OpenaiFunctionTool): Record<string, unknown> {
  const schema = tool.function.parameters as
    | { properties?: Record<string, { type?: unknown }>; required?: unknown }
    | undefined;
  const out: Record<string, unknown> = {};
  const props = schema?.properties ?? {};
  const required = Array.isArray(schema?.required) ? (schema.required as string[]) : Object.keys(props);
  for (const name of required) {
    const type = props[name]?.type;
    out[name] =
      type === 'number' || type === 'integer'
        ? 1
        : type === 'boolean'
          ? true
          : type === 'array'
            ? []
            : type === 'object'
              ? {}
              : 'example';
  }
  return out;
}

interface MockAnswer {
  content: string | null;
  toolCalls: OpenaiToolCall[] | undefined;
  finish: 'stop' | 'tool_calls';
}

function lastUserText(request: ChatCompletionRequest): string {
  for (let i = request.messages.length - 1; i >= 0; i--) {
    const m = request.messages[i];
    if (m?.role === 'user') return textOf(m);
  }
  return '';
}

/**
 * `mock-echo` answers with the last user message. `mock-tools` calls the first offered tool
 * (a function with arguments built from its schema; a custom tool with the last user message as
 * its free-text input, a grammar not enforced) and, once given the tool's result, answers with it.
 */
function answer(request: ChatCompletionRequest): MockAnswer {
  const last = request.messages[request.messages.length - 1];
  if (request.model === 'mock-tools') {
    const tool = request.tools?.[0];
    if (last?.role === 'tool')
      return { content: `The tool returned: ${textOf(last)}`, toolCalls: undefined, finish: 'stop' };
    if (tool && request.tool_choice !== 'none') {
      const id = newId('call_', 24);
      const call: OpenaiToolCall =
        tool.type === 'custom'
          ? {
              id,
              type: 'custom',
              custom: { name: tool.custom.name, input: lastUserText(request) || 'example' },
            }
          : {
              id,
              type: 'function',
              function: { name: tool.function.name, arguments: JSON.stringify(exampleArguments(tool)) },
            };
      return { content: null, toolCalls: [call], finish: 'tool_calls' };
    }
  }
  return { content: lastUserText(request), toolCalls: undefined, finish: 'stop' };
}

function usageFor(request: ChatCompletionRequest, a: MockAnswer): OpenaiUsage {
  const prompt = promptTokens(request);
  const completion = tokens(a.content ?? JSON.stringify(a.toolCalls ?? ''));
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

function checkModel(model: string): void {
  if (!(MOCK_MODELS as readonly string[]).includes(model)) {
    throw new ServiceError('model_not_found', `model ${model} is not offered by the mock provider`, {
      param: 'model',
    });
  }
}

export function mockProvider(): Provider {
  return {
    name: 'mock',
    async chat(call: ChatCall): Promise<ChatCompletion> {
      checkModel(call.request.model);
      const a = answer(call.request);
      const message: ChatCompletion['choices'][number]['message'] = { role: 'assistant', content: a.content };
      if (a.toolCalls) message.tool_calls = a.toolCalls;
      return {
        id: newId('chatcmpl-mock-', 20),
        object: 'chat.completion',
        created: Math.floor(Date.now() / 1000),
        model: call.request.model,
        choices: [{ index: 0, message, finish_reason: a.finish }],
        usage: usageFor(call.request, a),
      };
    },
    async *chatStream(call: ChatCall): AsyncIterable<readonly ChatCompletionChunk[]> {
      checkModel(call.request.model);
      const a = answer(call.request);
      const base = {
        id: newId('chatcmpl-mock-', 20),
        object: 'chat.completion.chunk' as const,
        created: Math.floor(Date.now() / 1000),
        model: call.request.model,
      };
      yield [
        {
          ...base,
          choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
        },
      ];
      if (a.content) {
        for (const piece of a.content.match(/\S+\s*|\s+/g) ?? []) {
          yield [{ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] }];
        }
      }
      const delta = (call: OpenaiToolCallDelta): ChatCompletionChunk[] => [
        { ...base, choices: [{ index: 0, delta: { tool_calls: [call] }, finish_reason: null }] },
      ];
      for (const [index, tc] of (a.toolCalls ?? []).entries()) {
        // The first fragment names the call, the next carries its arguments (or custom input).
        if (tc.type === 'custom') {
          yield delta({ index, id: tc.id, type: 'custom', custom: { name: tc.custom.name, input: '' } });
          yield delta({ index, custom: { input: tc.custom.input } });
        } else {
          yield delta({
            index,
            id: tc.id,
            type: 'function',
            function: { name: tc.function.name, arguments: '' },
          });
          yield delta({ index, function: { arguments: tc.function.arguments } });
        }
      }
      yield [{ ...base, choices: [{ index: 0, delta: {}, finish_reason: a.finish }] }];
      yield [{ ...base, choices: [], usage: usageFor(call.request, a) }];
    },
    async embed(request: EmbeddingRequest): Promise<EmbeddingResponse> {
      checkModel(request.model);
      const inputs =
        typeof request.input === 'string'
          ? [request.input]
          : (request.input as unknown[]).map((x) => (typeof x === 'string' ? x : JSON.stringify(x)));
      const dims =
        typeof request.dimensions === 'number' && request.dimensions > 0
          ? Math.min(request.dimensions, 3072)
          : 16;
      let total = 0;
      const data = inputs.map((text, index) => {
        total += tokens(text);
        return { object: 'embedding' as const, index, embedding: deterministicVector(text, dims) };
      });
      // As a provider's answer is: base64 when the call asks for it (the official SDKs do).
      return embeddingResponse(
        { object: 'list', data, model: request.model, usage: { prompt_tokens: total, total_tokens: total } },
        request.encoding_format === 'base64',
      ) as EmbeddingResponse;
    },
    async listModels() {
      return [...MOCK_MODELS];
    },
  };
}

/** A unit vector derived from the text's hash: the same text always embeds the same way. */
function deterministicVector(text: string, dims: number): number[] {
  const out: number[] = [];
  let block = createHash('sha256').update(text).digest();
  let norm = 0;
  for (let i = 0; i < dims; i++) {
    if (i > 0 && i % 16 === 0) block = createHash('sha256').update(block).digest();
    const v = (block.readUInt16BE((i % 16) * 2) / 65535) * 2 - 1;
    out.push(v);
    norm += v * v;
  }
  const scale = 1 / Math.sqrt(norm || 1);
  return out.map((v) => Math.round(v * scale * 1e6) / 1e6);
}
