/**
 * OpenAI `chat.completion.chunk` objects → Anthropic stream events, one chunk at a time.
 * No I/O: the caller parses SSE, pushes each chunk, writes out the events returned, and calls
 * finish() when the upstream stream ends (`data: [DONE]` or end of body).
 *
 * - The first push emits `message_start` (usage zeros: OpenAI reports usage only at the end).
 * - Text (and refusal) deltas go into a text block; each tool call gets its own `tool_use` block,
 *   opened when a new tool-call `index` (or a new `id`) appears, its argument fragments sent as
 *   `input_json_delta.partial_json`. A block is closed (`content_block_stop`) when another opens
 *   or the choice finishes. OpenAI streams tool calls one after the other; should a fragment for
 *   an already closed call arrive, it is still sent against that call's block index.
 * - A custom tool call's free-text input is collected while its block is open and sent, when the
 *   block closes, as one `input_json_delta` of `{"input": "<text>"}` (custom-tools.ts); a fragment
 *   for a custom call whose block was closed cannot be sent any more and fails the stream.
 * - The end (`message_delta` with the mapped stop reason and usage, then `message_stop`) is sent
 *   as soon as both a `finish_reason` and a `usage` have been seen (OpenAI's usage comes in a
 *   last chunk with `choices: []`), or else by finish(). Later chunks are ignored. The stop is the
 *   one an Anthropic upstream said when the finish chunk carries it (ANTHROPIC_STOP).
 * - Only the choice with index 0 is translated (Anthropic has no `n`).
 */
import { ANTHROPIC_STOP, type AnthropicStop } from './anthropic-stop.js';
import type { AnthropicMessageDeltaEvent, AnthropicStreamEvent } from './anthropic-types.js';
import { anthropicStopOf, openaiUsageToAnthropic } from './conversions.js';
import { customInputToAnthropic } from './custom-tools.js';
import type {
  ChatCompletionChunk,
  OpenaiFinishReason,
  OpenaiToolCallDelta,
  OpenaiUsage,
} from './openai-types.js';
import { WireStreamError } from './wire-stream-error.js';

export interface OpenaiStreamToAnthropicOptions {
  /** The Anthropic message id (`msg_…`). */
  id: string;
  /** The model the agent asked for. */
  model: string;
}

/** The kind of content block currently open. */
type OpenBlock = 'none' | 'text' | 'tool';

export class OpenaiStreamToAnthropic {
  readonly #id: string;
  readonly #model: string;
  #started = false;
  #done = false;
  #open: OpenBlock = 'none';
  /** Anthropic index of the open block; the next block gets #nextBlock. */
  #openBlock = -1;
  #nextBlock = 0;
  #openToolIndex = -1;
  #openToolId = '';
  /** Anthropic block index per OpenAI tool-call index. */
  readonly #toolBlocks = new Map<number, number>();
  /** The input of the open block's custom tool call, so far (undefined: not a custom call). */
  #customInput: string | undefined;
  /** The blocks of custom tool calls. */
  #customBlocks: Set<number> | undefined;
  #finishReason: OpenaiFinishReason | null | undefined;
  #stop: AnthropicStop | undefined;
  #usage: OpenaiUsage | undefined;

  constructor(opts: OpenaiStreamToAnthropicOptions) {
    this.#id = opts.id;
    this.#model = opts.model;
  }

  push(chunk: ChatCompletionChunk): AnthropicStreamEvent[] {
    const out: AnthropicStreamEvent[] = [];
    if (this.#done) return out;
    if (!this.#started) this.#start(out);
    const choices = chunk.choices;
    if (Array.isArray(choices)) {
      for (const choice of choices) {
        if ((choice.index ?? 0) !== 0) continue;
        const delta = choice.delta;
        if (delta) {
          if (typeof delta.content === 'string' && delta.content !== '') this.#text(delta.content, out);
          if (typeof delta.refusal === 'string' && delta.refusal !== '') this.#text(delta.refusal, out);
          const calls = delta.tool_calls;
          if (Array.isArray(calls)) for (const call of calls) this.#toolDelta(call, out);
        }
        if (choice.finish_reason) {
          this.#finishReason = choice.finish_reason;
          this.#stop = choice[ANTHROPIC_STOP];
          this.#close(out);
        }
      }
    }
    if (chunk.usage) {
      this.#usage = chunk.usage;
      if (this.#finishReason) this.#end(out);
    }
    return out;
  }

  /** Ends the message if push() has not already done so; idempotent. */
  finish(): AnthropicStreamEvent[] {
    const out: AnthropicStreamEvent[] = [];
    if (this.#done) return out;
    if (!this.#started) this.#start(out);
    this.#end(out);
    return out;
  }

  #start(out: AnthropicStreamEvent[]): void {
    this.#started = true;
    out.push({
      type: 'message_start',
      message: {
        id: this.#id,
        type: 'message',
        role: 'assistant',
        model: this.#model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 0, output_tokens: 0 },
      },
    });
  }

  #text(text: string, out: AnthropicStreamEvent[]): void {
    if (this.#open !== 'text') {
      this.#close(out);
      this.#open = 'text';
      this.#openBlock = this.#nextBlock++;
      out.push({
        type: 'content_block_start',
        index: this.#openBlock,
        content_block: { type: 'text', text: '' },
      });
    }
    out.push({ type: 'content_block_delta', index: this.#openBlock, delta: { type: 'text_delta', text } });
  }

  #toolDelta(call: OpenaiToolCallDelta, out: AnthropicStreamEvent[]): void {
    const index = typeof call.index === 'number' ? call.index : 0;
    const id = typeof call.id === 'string' && call.id !== '' ? call.id : undefined;
    let block = this.#openBlock;
    const continues =
      this.#open === 'tool' && index === this.#openToolIndex && (id === undefined || id === this.#openToolId);
    if (!continues) {
      const earlier = id === undefined ? this.#toolBlocks.get(index) : undefined;
      if (earlier !== undefined) {
        block = earlier;
      } else {
        this.#close(out);
        this.#open = 'tool';
        block = this.#openBlock = this.#nextBlock++;
        this.#openToolIndex = index;
        this.#openToolId = id ?? `toolu_${this.#id}_${block}`;
        this.#toolBlocks.set(index, block);
        const custom = call.type === 'custom' || call.custom !== undefined;
        if (custom) {
          this.#customInput = '';
          (this.#customBlocks ??= new Set()).add(block);
        }
        const name = custom ? call.custom?.name : call.function?.name;
        out.push({
          type: 'content_block_start',
          index: block,
          content_block: {
            type: 'tool_use',
            id: this.#openToolId,
            name: typeof name === 'string' ? name : '',
            input: {},
          },
        });
      }
    }
    if (this.#customBlocks?.has(block)) {
      const input = call.custom?.input;
      if (typeof input !== 'string' || input === '') return;
      if (block !== this.#openBlock || this.#customInput === undefined)
        throw new WireStreamError('api_error', 'a custom tool call went on after its block was closed');
      this.#customInput += input;
      return;
    }
    const args = call.function?.arguments;
    if (typeof args === 'string' && args !== '') {
      out.push({
        type: 'content_block_delta',
        index: block,
        delta: { type: 'input_json_delta', partial_json: args },
      });
    }
  }

  #close(out: AnthropicStreamEvent[]): void {
    if (this.#open === 'none') return;
    if (this.#customInput !== undefined) {
      const partial_json = JSON.stringify(customInputToAnthropic(this.#customInput));
      out.push({
        type: 'content_block_delta',
        index: this.#openBlock,
        delta: { type: 'input_json_delta', partial_json },
      });
      this.#customInput = undefined;
    }
    out.push({ type: 'content_block_stop', index: this.#openBlock });
    this.#open = 'none';
  }

  #end(out: AnthropicStreamEvent[]): void {
    this.#close(out);
    this.#done = true;
    const usage = openaiUsageToAnthropic(this.#usage);
    const stop = anthropicStopOf(this.#finishReason, this.#stop);
    const event: AnthropicMessageDeltaEvent = {
      type: 'message_delta',
      delta: { stop_reason: stop.stop_reason, stop_sequence: stop.stop_sequence },
      usage: { output_tokens: usage.output_tokens },
    };
    if (this.#usage) {
      event.usage.input_tokens = usage.input_tokens;
      if (usage.cache_read_input_tokens) event.usage.cache_read_input_tokens = usage.cache_read_input_tokens;
    }
    out.push(event, { type: 'message_stop' });
  }
}
