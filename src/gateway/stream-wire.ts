// What GatewayService.stream needs of one streamed answer, whatever its wire: where the events
// come from, how they are governed, what the audit trail records of them, and how they are
// written. Two wires: canonical chunks (any provider, rendered for the caller's format) and an
// Anthropic upstream's own events for an Anthropic caller (anthropic-forward.ts).

import { ServiceError } from '../core/errors.js';
import type { OutputGuard } from '../core/guardrails/index.js';
import type { Cancellation, Provider } from '../providers/types.js';
import { scrubbed } from '../providers/upstream.js';
import {
  type AnthropicStreamEvent,
  type AnthropicUsage,
  anthropicStopToOpenai,
  anthropicUsageToOpenai,
  type ChatCompletionChunk,
  type ChatCompletionRequest,
  type OpenaiUsage,
} from '../providers/wire/index.js';
import { AnthropicStreamGovernor } from './anthropic-output.js';
import { blockedChunks } from './blocked.js';
import type { ServiceEnvelope } from './envelope.js';
import { OutputStreamGovernor, type StreamBlock } from './output-stream.js';
import { anthropicStreamError, type FrontEnd, sseEvent } from './renderers.js';

export interface StreamWire<E> {
  /** The answer's events in batches, one per network read. */
  readonly events: AsyncIterator<readonly E[]>;
  /** Holds and scans the events when output is guarded. */
  readonly governor:
    | {
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
  usage(): OpenaiUsage | null | undefined;
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
    finish: (service) => renderer.finish(service),
    error: (err, requestId) => renderer.error(err, requestId),
    blocked(text, service) {
      let out = '';
      for (const c of blockedChunks(request.model, text).slice(1)) out += renderer.chunk(c);
      return out + renderer.finish(service);
    },
    usage: () => usage,
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
  let stop: string | null = null;
  const toolCalls: string[] = [];
  const held: AnthropicStreamEvent[] = [];
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
          if (e.delta?.stop_reason) stop = e.delta.stop_reason;
          break;
        case 'content_block_start': {
          const block = e.content_block as { type?: string; name?: unknown };
          if (block?.type === 'tool_use' && typeof block.name === 'string') toolCalls.push(block.name);
          break;
        }
        case 'error':
          throw new ServiceError(
            'upstream_error',
            `provider anthropic stream failed: ${scrubbed(String(e.error?.message ?? 'upstream stream error'))}`,
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
    error: (err) => anthropicStreamError(err),
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
    usage: () => (usage ? anthropicUsageToOpenai(usage as AnthropicUsage) : null),
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
