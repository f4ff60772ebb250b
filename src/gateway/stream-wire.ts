// What GatewayService.stream needs of one streamed answer, whatever its wire: where the events
// come from, how they are governed, what the audit trail records of them, and how they are
// written. Two wires: canonical chunks (any provider, rendered for the caller's format) and an
// Anthropic upstream's own events for an Anthropic caller (anthropic-forward.ts).

import { ServiceError } from '../core/errors.js';
import type { OutputGuard } from '../core/guardrails/index.js';
import { tokensOfChars } from '../core/guardrails/pricing.js';
import type { ScanPool } from '../govern/scan-pool.js';
import type { Cancellation, Provider } from '../providers/types.js';
import { scrubbed } from '../providers/upstream.js';
import {
  type AnthropicStreamEvent,
  type AnthropicUsage,
  anthropicStopToOpenai,
  anthropicUsageToOpenai,
  type ChatCompletionChoice,
  type ChatCompletionChunk,
  type ChatCompletionChunkDelta,
  type ChatCompletionRequest,
  type OpenaiUsage,
} from '../providers/wire/index.js';
import { AnthropicStreamGovernor } from './anthropic-output.js';
import { blockedChunks } from './blocked.js';
import type { ServiceEnvelope } from './envelope.js';
import { OutputStreamGovernor, type StreamBlock } from './output-stream.js';
import { anthropicStreamError, type FrontEnd, sseEvent } from './renderers.js';

/**
 * What of an answer was written to the client: its output characters (text, refusal, thinking,
 * tool-call arguments or custom tool input, as sent) and whether the answer's end went with them
 * (OpenAI format: a finish_reason for every choice). An Anthropic client's message_delta and
 * message_stop wait for the close that carries the envelope, so they never count here.
 */
export interface Delivered {
  readonly chars: number;
  readonly ended: boolean;
}

/** The output characters of one canonical delta (text, refusal, tool-call arguments or input). */
function deltaChars(d: ChatCompletionChunkDelta): number {
  let n = 0;
  if (typeof d.content === 'string') n += d.content.length;
  if (typeof d.refusal === 'string') n += d.refusal.length;
  const calls = d.tool_calls;
  if (calls !== undefined)
    for (let i = 0; i < calls.length; i++) {
      const tc = calls[i] as (typeof calls)[number];
      const args = tc.custom?.input ?? tc.function?.arguments;
      if (typeof args === 'string') n += args.length;
    }
  const legacy = d.function_call;
  if (legacy && typeof legacy.arguments === 'string') n += legacy.arguments.length;
  return n;
}

/** The output characters of one Anthropic event (a text, thinking or tool-input delta). */
function eventChars(e: AnthropicStreamEvent): number {
  if (e.type !== 'content_block_delta') return 0;
  const d = e.delta;
  switch (d?.type) {
    case 'text_delta':
      return typeof d.text === 'string' ? d.text.length : 0;
    case 'input_json_delta':
      return typeof d.partial_json === 'string' ? d.partial_json.length : 0;
    case 'thinking_delta':
      return typeof d.thinking === 'string' ? d.thinking.length : 0;
    default:
      return 0;
  }
}

/** The characters of a request's texts, as the budget counts them (for `estimate`). */
export function promptChars(texts: readonly { readonly text: string }[]): number {
  let chars = 0;
  for (const t of texts) chars += t.text.length;
  return chars;
}

/** An estimated usage of `prompt` and `completion` tokens. */
function estimated(prompt: number, completion: number): OpenaiUsage {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/**
 * The usage of a whole answer that came without one (an OpenAI-compatible server that sends
 * none): the prompt's `promptChars` and the characters of each choice's text, refusal and tool
 * calls, at four characters a token, as a stream's `estimate` counts them.
 */
export function estimatedUsage(promptChars: number, choices: readonly ChatCompletionChoice[]): OpenaiUsage {
  let chars = 0;
  for (const c of choices) {
    const m = c.message;
    if (typeof m.content === 'string') chars += m.content.length;
    if (typeof m.refusal === 'string') chars += m.refusal.length;
    for (const tc of m.tool_calls ?? [])
      chars += tc.type === 'custom' ? tc.custom.input.length : tc.function.arguments.length;
    const legacy = (m as { function_call?: { arguments?: unknown } }).function_call;
    if (typeof legacy?.arguments === 'string') chars += legacy.arguments.length;
  }
  return estimated(tokensOfChars(promptChars), tokensOfChars(chars));
}

export interface StreamWire<E> {
  /** The answer's events in batches, one per network read. */
  readonly events: AsyncIterator<readonly E[]>;
  /** Holds and scans the events when output is guarded. */
  readonly governor:
    | {
        /** Scans in the worker the large texts `push(e)` (`end()`, for undefined) will scan. */
        prescan(e: E | undefined, scans: ScanPool): Promise<void> | undefined;
        push(e: E): E[];
        end(): E[];
        readonly blocked: StreamBlock | undefined;
        /** The types of the PII the guard found. */
        readonly pii: ReadonlySet<string>;
      }
    | undefined;
  /** Sees every upstream event before it is governed (usage, stop, tools called). */
  observe(e: E): void;
  /** SSE text for one event ('' when held back). */
  render(e: E): string;
  /** SSE text that closes a complete stream, carrying the envelope. */
  finish(service: ServiceEnvelope): string;
  /** SSE text reporting a failure after the stream started. */
  error(err: ServiceError, requestId: string): string;
  /** SSE text that ends a stream the guard blocked: the explanation, then the close. */
  blocked(text: string, service: ServiceEnvelope): string;
  /**
   * The provider's own usage for the whole answer; null or undefined when the stream ended before
   * it came (an Anthropic upstream's message_start counts alone are not: its `output_tokens` is a
   * placeholder until message_delta).
   */
  usage(): OpenaiUsage | null | undefined;
  /**
   * The usage estimated from what the stream got, for when `usage()` has none: the prompt's
   * `promptChars` (or the input count the provider stated before the stream ended) and the output
   * characters read from the upstream, at four characters a token (`tokensOfChars`).
   */
  estimate(promptChars: number): OpenaiUsage;
  /** Counts `e`, just written to the client, into `delivered()`. */
  written(e: E): void;
  /** What was written to the client (see `Delivered`). */
  delivered(): Delivered;
  /** The finish reason, in OpenAI's terms (the audit trail's). */
  finishReason(): string | null;
  /** The tools the answer called, in order. */
  readonly toolCalls: string[];
}

/** A canonical chunk stream from any provider, rendered for the caller by `fe`. */
export function canonicalWire(
  fe: FrontEnd,
  provider: Provider,
  request: ChatCompletionRequest,
  cancel: Cancellation,
  guard: OutputGuard,
): StreamWire<ChatCompletionChunk> {
  const renderer = fe.streamRenderer(request.model, request.stream_options?.include_usage === true);
  let usage: OpenaiUsage | null | undefined;
  let finish: string | null = null;
  const toolCalls: string[] = [];
  // Output characters read from the upstream and written to the client, and the choices whose
  // finish was written (an OpenAI client's; an Anthropic client's end waits for the close).
  let read = 0;
  let sent = 0;
  let finished = 0;
  const endsOnFinish = fe.format === 'openai';
  const choices = request.n ?? 1;
  // One name per call (choice, index), read as the output guard holds calls: a call is a custom
  // tool's from its first fragment that says so, and then only `custom` names it; a name repeated
  // in a later fragment is the same call.
  let calls: Map<string, { name: string; custom: boolean }> | undefined;
  return {
    events: provider.chatStream({ request, cancel })[Symbol.asyncIterator](),
    governor: guard.active ? new OutputStreamGovernor(guard) : undefined,
    observe(c) {
      if (c.usage) usage = c.usage;
      for (const choice of c.choices) {
        read += deltaChars(choice.delta);
        if (choice.finish_reason && (finish === null || choice.index === 0)) finish = choice.finish_reason;
        for (const tc of choice.delta.tool_calls ?? []) {
          const key = `${choice.index}:${tc.index}`;
          calls ??= new Map();
          let call = calls.get(key);
          if (!call) calls.set(key, (call = { name: '', custom: false }));
          if (!call.custom && (tc.type === 'custom' || tc.custom)) {
            call.custom = true;
            call.name = '';
          }
          const name = call.custom ? tc.custom?.name : tc.function?.name;
          if (name) call.name = name;
        }
      }
    },
    render: (c) => renderer.chunk(c),
    written(c) {
      const list = c.choices;
      for (let i = 0; i < list.length; i++) {
        const choice = list[i] as (typeof list)[number];
        sent += deltaChars(choice.delta);
        if (choice.finish_reason && endsOnFinish) finished++;
      }
    },
    delivered: () => ({ chars: sent, ended: endsOnFinish && finished >= choices }),
    finish: (service) => renderer.finish(service),
    error: (err, requestId) => renderer.error(err, requestId),
    blocked(text, service) {
      let out = '';
      for (const c of blockedChunks(request.model, text).slice(1)) out += renderer.chunk(c);
      return out + renderer.finish(service);
    },
    usage: () => usage,
    estimate: (promptChars) => estimated(tokensOfChars(promptChars), tokensOfChars(read)),
    finishReason: () => finish,
    get toolCalls() {
      toolCalls.length = 0;
      for (const call of calls?.values() ?? []) if (call.name) toolCalls.push(call.name);
      return toolCalls;
    },
  };
}

type Usage = Partial<Record<keyof AnthropicUsage, number | null | undefined>>;

/** Copies the counts `from` states (cumulative in message_delta) onto `to`. */
function mergeUsage(to: Usage, from: Usage | null | undefined): void {
  if (!from) return;
  for (const k of [
    'input_tokens',
    'output_tokens',
    'cache_creation_input_tokens',
    'cache_read_input_tokens',
  ] as const) {
    const v = from[k];
    if (typeof v === 'number') to[k] = v;
  }
}

/**
 * An Anthropic upstream's events for an Anthropic caller, written as they came (guarded): only the
 * envelope is added, on message_delta, which waits with message_stop for the end of the stream.
 */
export function anthropicWire(
  events: AsyncIterable<readonly AnthropicStreamEvent[]>,
  guard: OutputGuard,
): StreamWire<AnthropicStreamEvent> {
  const governor = guard.active ? new AnthropicStreamGovernor(guard) : undefined;
  let usage: Usage | undefined;
  /** A message_delta stated the output count (message_start's is a placeholder). */
  let final = false;
  let stop: string | null = null;
  const toolCalls: string[] = [];
  const held: AnthropicStreamEvent[] = [];
  let read = 0;
  let sent = 0;
  return {
    events: events[Symbol.asyncIterator](),
    governor,
    observe(e) {
      switch (e.type) {
        case 'message_start':
          usage ??= {};
          mergeUsage(usage, e.message?.usage);
          break;
        case 'message_delta':
          usage ??= {};
          mergeUsage(usage, e.usage);
          if (typeof e.usage?.output_tokens === 'number') final = true;
          if (e.delta?.stop_reason) stop = e.delta.stop_reason;
          break;
        case 'content_block_delta':
          read += eventChars(e);
          break;
        case 'content_block_start': {
          const block = e.content_block as { type?: string; name?: unknown };
          if (block?.type === 'tool_use' && typeof block.name === 'string') toolCalls.push(block.name);
          break;
        }
        case 'error':
          // The provider took its key out of the event's message (providers/anthropic.ts).
          throw new ServiceError(
            'upstream_error',
            `provider anthropic stream failed: ${scrubbed(String(e.error?.message ?? 'upstream stream error'), undefined)}`,
          );
      }
    },
    render(e) {
      if (held.length > 0 || e.type === 'message_delta' || e.type === 'message_stop') {
        held.push(e);
        return '';
      }
      return sseEvent(e);
    },
    written(e) {
      sent += eventChars(e);
    },
    delivered: () => ({ chars: sent, ended: false }),
    finish(service) {
      let out = '';
      let enveloped = false;
      for (const e of held) {
        if (e.type === 'message_delta' && !enveloped) {
          e.service = service;
          enveloped = true;
        }
        if (e.type === 'message_stop' && !enveloped) {
          out += sseEvent(closing(service, stop, usage));
          enveloped = true;
        }
        out += sseEvent(e);
      }
      return out;
    },
    error: anthropicStreamError,
    blocked(text, service) {
      let out = '';
      const g = governor as AnthropicStreamGovernor;
      if (g.openText !== undefined) out += sseEvent({ type: 'content_block_stop', index: g.openText });
      const index = g.nextIndex;
      out += sseEvent({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
      out += sseEvent({ type: 'content_block_delta', index, delta: { type: 'text_delta', text } });
      out += sseEvent({ type: 'content_block_stop', index });
      return `${out}${sseEvent(closing(service, 'refusal', usage))}${sseEvent({ type: 'message_stop' })}`;
    },
    usage: () => (usage && final ? anthropicUsageToOpenai(usage as AnthropicUsage) : null),
    estimate(promptChars) {
      const output = tokensOfChars(read);
      // message_start's input counts are the provider's own; only its output count is a placeholder.
      if (typeof usage?.input_tokens === 'number')
        return anthropicUsageToOpenai(Object.assign({}, usage, { output_tokens: output }) as AnthropicUsage);
      return estimated(tokensOfChars(promptChars), output);
    },
    finishReason: () => (stop === null ? null : anthropicStopToOpenai(stop as never)),
    toolCalls,
  };
}

/** A message_delta of govgate's own (the stream had none, or it was blocked), with the envelope. */
function closing(
  service: ServiceEnvelope,
  stop: string | null,
  usage: Usage | undefined,
): AnthropicStreamEvent {
  return {
    type: 'message_delta',
    delta: { stop_reason: stop as never, stop_sequence: null },
    usage: { output_tokens: usage?.output_tokens ?? 0 },
    service,
  };
}
