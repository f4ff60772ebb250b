/**
 * Anthropic stream events → OpenAI `chat.completion.chunk` objects, one event at a time.
 * No I/O: the caller parses SSE, pushes each event and writes out the chunks returned.
 *
 * - message_start → a first chunk with `delta: {role: 'assistant', content: ''}`.
 * - text → content deltas. A `tool_use` block start → a tool call delta with `index` (counting
 *   only tool_use blocks), `id`, `type` and `function: {name, arguments: ''}`; its
 *   `input_json_delta`s → `function.arguments` deltas.
 * - A `tool_use` block of one of the request's custom tools (`custom`) → a custom call delta
 *   (`type: 'custom'`, `custom: {name, input: ''}`); its input JSON is collected and, at
 *   content_block_stop, its string sent as one `custom.input` delta (custom-tools.ts): the JSON
 *   must be whole to read the string out of it.
 * - message_delta → a chunk with the mapped `finish_reason`, then one with `choices: []` and the
 *   usage totals, as OpenAI sends them with `stream_options.include_usage` (input counts come
 *   from message_start unless message_delta repeats them). A stop `finish_reason` cannot say
 *   (stop_sequence and its sequence, pause_turn, …) is carried on its choice under ANTHROPIC_STOP.
 * - ping, content_block_stop (but a custom tool's), message_stop, thinking and unknown events →
 *   nothing.
 * - error → throws WireStreamError.
 */
import { ANTHROPIC_STOP } from './anthropic-stop.js';
import type { AnthropicStreamEvent } from './anthropic-types.js';
import {
  anthropicIdToOpenai,
  anthropicStopToOpenai,
  anthropicUsageToOpenai,
  carriedAnthropicStop,
} from './conversions.js';
import { customInputFromAnthropic } from './custom-tools.js';
import type {
  ChatCompletionChunk,
  ChatCompletionChunkChoice,
  ChatCompletionChunkDelta,
  OpenaiFinishReason,
  OpenaiUsage,
} from './openai-types.js';
import { stringifyToolInput } from './tool-arguments.js';
import { WireStreamError } from './wire-stream-error.js';

export interface AnthropicStreamToOpenaiOptions {
  /** Chunk id; by default derived from the message_start id (`msg_X` → `chatcmpl-X`). */
  id?: string;
  /** Unix seconds, stamped on every chunk. */
  created: number;
  model: string;
  /** The names of the request's custom tools (customToolNames), whose tool_use become custom calls. */
  custom?: ReadonlySet<string> | undefined;
}

export class AnthropicStreamToOpenai {
  #id: string | undefined;
  readonly #created: number;
  readonly #model: string;
  /** OpenAI tool-call index per Anthropic content block index (undefined: not a tool block). */
  readonly #toolIndexByBlock: Array<number | undefined> = [];
  #toolCount = 0;
  readonly #custom: ReadonlySet<string> | undefined;
  /** The input JSON collected so far per Anthropic block index of a custom tool's tool_use. */
  #customJson: Map<number, string> | undefined;
  #inputTokens = 0;
  #cacheCreationTokens = 0;
  #cacheReadTokens = 0;

  constructor(opts: AnthropicStreamToOpenaiOptions) {
    this.#id = opts.id;
    this.#created = opts.created;
    this.#model = opts.model;
    this.#custom = opts.custom;
  }

  push(event: AnthropicStreamEvent): ChatCompletionChunk[] {
    switch (event.type) {
      case 'message_start': {
        const message = event.message;
        if (this.#id === undefined) {
          this.#id = anthropicIdToOpenai(typeof message?.id === 'string' ? message.id : '');
        }
        const usage = message?.usage;
        if (usage) {
          this.#inputTokens = usage.input_tokens ?? 0;
          this.#cacheCreationTokens = usage.cache_creation_input_tokens ?? 0;
          this.#cacheReadTokens = usage.cache_read_input_tokens ?? 0;
        }
        return [this.#chunk({ role: 'assistant', content: '' }, null)];
      }
      case 'content_block_start': {
        const block = event.content_block;
        if (block.type === 'text') {
          return block.text ? [this.#chunk({ content: block.text }, null)] : [];
        }
        if (block.type !== 'tool_use') return [];
        const index = this.#toolCount++;
        this.#toolIndexByBlock[event.index] = index;
        if (this.#custom?.has(block.name)) {
          this.#customJson ??= new Map();
          this.#customJson.set(event.index, hasKeys(block.input) ? JSON.stringify(block.input) : '');
          const call = {
            index,
            id: block.id,
            type: 'custom' as const,
            custom: { name: block.name, input: '' },
          };
          return [this.#chunk({ tool_calls: [call] }, null)];
        }
        const args = hasKeys(block.input) ? stringifyToolInput(block.input) : '';
        const call = {
          index,
          id: block.id,
          type: 'function' as const,
          function: { name: block.name, arguments: args },
        };
        return [this.#chunk({ tool_calls: [call] }, null)];
      }
      case 'content_block_delta': {
        const delta = event.delta;
        if (delta.type === 'text_delta') {
          return delta.text === '' ? [] : [this.#chunk({ content: delta.text }, null)];
        }
        if (delta.type !== 'input_json_delta' || delta.partial_json === '') return [];
        const index = this.#toolIndexByBlock[event.index];
        if (index === undefined) return [];
        const json = this.#customJson?.get(event.index);
        if (json !== undefined) {
          this.#customJson?.set(event.index, json + delta.partial_json);
          return [];
        }
        return [this.#chunk({ tool_calls: [{ index, function: { arguments: delta.partial_json } }] }, null)];
      }
      case 'content_block_stop': {
        const input = this.#customInput(event.index);
        return input === undefined ? [] : [input];
      }
      case 'message_delta': {
        const usage = event.usage;
        const totals = anthropicUsageToOpenai({
          input_tokens: usage?.input_tokens ?? this.#inputTokens,
          cache_creation_input_tokens: usage?.cache_creation_input_tokens ?? this.#cacheCreationTokens,
          cache_read_input_tokens: usage?.cache_read_input_tokens ?? this.#cacheReadTokens,
          output_tokens: usage?.output_tokens ?? 0,
        });
        const finish = this.#chunk({}, anthropicStopToOpenai(event.delta?.stop_reason));
        const stop = carriedAnthropicStop(event.delta?.stop_reason, event.delta?.stop_sequence);
        if (stop) (finish.choices[0] as ChatCompletionChunkChoice)[ANTHROPIC_STOP] = stop;
        const out: ChatCompletionChunk[] = [];
        // A custom tool's block the upstream never closed still gives its input, before the finish.
        if (this.#customJson)
          for (const block of [...this.#customJson.keys()]) {
            const input = this.#customInput(block);
            if (input) out.push(input);
          }
        out.push(finish, this.#usageChunk(totals));
        return out;
      }
      case 'error': {
        const error = event.error;
        throw new WireStreamError(
          typeof error?.type === 'string' ? error.type : 'api_error',
          typeof error?.message === 'string' ? error.message : 'upstream stream error',
        );
      }
      default:
        return [];
    }
  }

  /** The input delta of the custom tool call in Anthropic block `block`, which ends; undefined if none. */
  #customInput(block: number): ChatCompletionChunk | undefined {
    const json = this.#customJson?.get(block);
    const index = this.#toolIndexByBlock[block];
    if (json === undefined || index === undefined) return undefined;
    this.#customJson?.delete(block);
    let input: string;
    try {
      input = json === '' ? '' : customInputFromAnthropic(JSON.parse(json));
    } catch {
      input = json; // not JSON: the model's text as it came, nothing lost
    }
    return input === '' ? undefined : this.#chunk({ tool_calls: [{ index, custom: { input } }] }, null);
  }

  #chunk(delta: ChatCompletionChunkDelta, finishReason: OpenaiFinishReason | null): ChatCompletionChunk {
    return {
      id: this.#id ?? 'chatcmpl-',
      object: 'chat.completion.chunk',
      created: this.#created,
      model: this.#model,
      choices: [{ index: 0, delta, finish_reason: finishReason }],
    };
  }

  #usageChunk(usage: OpenaiUsage): ChatCompletionChunk {
    return {
      id: this.#id ?? 'chatcmpl-',
      object: 'chat.completion.chunk',
      created: this.#created,
      model: this.#model,
      choices: [],
      usage,
    };
  }
}

function hasKeys(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  for (const _ in value) return true;
  return false;
}
