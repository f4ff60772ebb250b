import { ServiceError } from '../core/errors.js';
import { HOP_HEADER, HOP_ID } from '../http/hop.js';
import type { Cancellation, ChatCall, Provider } from './types.js';
import {
  keyScrub,
  type PoolSource,
  requestJson,
  requestStream,
  scrubbed,
  splitBaseUrl,
  withoutProviderKey,
} from './upstream.js';
import {
  type AnthropicMessage,
  type AnthropicMessagesRequest,
  type AnthropicStreamEvent,
  AnthropicStreamToOpenai,
  anthropicResponseToOpenai,
  type ChatCompletionChunk,
  customToolNames,
  openaiRequestToAnthropic,
  type SseEvent,
  SseParser,
  WireStreamError,
} from './wire/index.js';

export const ANTHROPIC_VERSION = '2023-06-01';
export const DEFAULT_MAX_TOKENS = 4096;

/** An Anthropic Messages upstream (`base_url` is the API root, as in the official SDK). */
export function anthropicProvider(pools: PoolSource, baseUrl: string, apiKey: string): Provider {
  const { origin, prefix } = splitBaseUrl(baseUrl);
  // Every request says it comes from govgate: one that leads back to a govgate is refused there.
  const headers = {
    'content-type': 'application/json',
    'x-api-key': apiKey,
    'anthropic-version': ANTHROPIC_VERSION,
    [HOP_HEADER]: HOP_ID,
  };
  const getHeaders = { 'x-api-key': apiKey, 'anthropic-version': ANTHROPIC_VERSION, [HOP_HEADER]: HOP_ID };
  const messagesPath = `${prefix}/v1/messages`;

  /** The request headers, with the caller's `anthropic-beta` when it sent one. */
  const headersFor = (beta: string | undefined): Record<string, string> =>
    beta === undefined ? headers : { ...headers, 'anthropic-beta': beta };

  const create = async (
    request: AnthropicMessagesRequest,
    cancel: Cancellation,
    beta?: string,
  ): Promise<AnthropicMessage> => {
    const res = await requestJson('anthropic', pools.get(origin), {
      path: messagesPath,
      method: 'POST',
      headers: headersFor(beta),
      body: JSON.stringify(request),
      cancel,
      key: apiKey,
    });
    if (!isMessage(res))
      throw new ServiceError('upstream_error', 'provider anthropic sent an unexpected answer');
    return res;
  };

  /** The upstream's events, batched per read, through message_stop (a stream cut short throws). */
  async function* events(
    request: AnthropicMessagesRequest,
    cancel: Cancellation,
    beta?: string,
  ): AsyncGenerator<AnthropicStreamEvent[]> {
    const text = await requestStream('anthropic', pools.get(origin), {
      path: messagesPath,
      headers: headersFor(beta),
      body: JSON.stringify(request),
      cancel,
      key: apiKey,
    });
    const parser = new SseParser('provider anthropic');
    let done = false;
    try {
      for await (const piece of text) {
        if (done) continue; // read to the end so the connection is reused
        const batch: AnthropicStreamEvent[] = [];
        done = decodeEvents(parser.push(piece), batch, apiKey);
        if (batch.length > 0) yield batch;
      }
    } catch (err) {
      // What fails after message_stop (the rest cut at the stream bound, a reset) ends a whole answer.
      if (!done) throw err;
    }
    if (done) return;
    // The body ended: an event without its blank line counts, but a stream without
    // message_stop (cut short, or no event stream at all) is a failure, not a complete answer.
    const batch: AnthropicStreamEvent[] = [];
    done = decodeEvents(parser.end(), batch, apiKey);
    if (!done)
      throw new ServiceError('upstream_error', 'provider anthropic ended its stream before message_stop');
    if (batch.length > 0) yield batch;
  }

  return {
    name: 'anthropic',
    keyScrub: keyScrub(apiKey),
    async chat(call: ChatCall) {
      const request = openaiRequestToAnthropic(call.request, { defaultMaxTokens: DEFAULT_MAX_TOKENS });
      request.stream = false;
      // The model's calls of the caller's custom tools go back to it as custom calls.
      return anthropicResponseToOpenai(
        await create(request, call.cancel),
        Math.floor(Date.now() / 1000),
        customToolNames(call.request.tools),
      );
    },
    async *chatStream(call: ChatCall) {
      const request = openaiRequestToAnthropic(call.request, { defaultMaxTokens: DEFAULT_MAX_TOKENS });
      request.stream = true;
      const convert = new AnthropicStreamToOpenai({
        created: Math.floor(Date.now() / 1000),
        model: call.request.model,
        custom: customToolNames(call.request.tools),
      });
      for await (const batch of events(request, call.cancel)) {
        const chunks: ChatCompletionChunk[] = [];
        for (const event of batch) {
          try {
            for (const c of convert.push(event)) chunks.push(c);
          } catch (err) {
            if (err instanceof WireStreamError) {
              throw new ServiceError(
                'upstream_error',
                `provider anthropic stream failed: ${scrubbed(err.message, apiKey)}`,
                {
                  cause: err,
                },
              );
            }
            throw err;
          }
        }
        if (chunks.length > 0) yield chunks;
      }
    },
    messagesApi: {
      create(request, call) {
        return create({ ...request, stream: false }, call.cancel, call.beta);
      },
      stream(request, call) {
        return events({ ...request, stream: true }, call.cancel, call.beta);
      },
    },
    async embed() {
      throw new ServiceError('invalid_request', 'provider anthropic does not offer embeddings', {
        param: 'model',
      });
    },
    async listModels(signal: AbortSignal) {
      const res = (await requestJson('anthropic', pools.get(origin), {
        path: `${prefix}/v1/models`,
        method: 'GET',
        headers: getHeaders,
        cancel: signal,
        key: apiKey,
      })) as { data?: { id?: unknown }[] };
      return (res.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string');
    },
  };
}

/**
 * Adds the parsed `events` to `batch`; true at message_stop (the rest is ignored). An `error`
 * event (overloaded, ...) fails the stream: its message has the provider's key `key` removed
 * here, as the messages API's stream hands the event on, and the caller repeats the message.
 */
function decodeEvents(events: readonly SseEvent[], batch: AnthropicStreamEvent[], key: string): boolean {
  for (const event of events) {
    let parsed: AnthropicStreamEvent;
    try {
      parsed = JSON.parse(event.data) as AnthropicStreamEvent;
    } catch (err) {
      throw new ServiceError('upstream_error', 'provider anthropic sent an unreadable stream event', {
        cause: err,
      });
    }
    if (parsed === null || typeof parsed !== 'object')
      throw new ServiceError('upstream_error', 'provider anthropic sent an unreadable stream event');
    // Whatever its type: the wire repeats String(message), and an array holding the key is a key.
    if (parsed.type === 'error' && parsed.error?.message !== undefined)
      parsed.error.message = withoutProviderKey(String(parsed.error.message), key);
    batch.push(parsed);
    if (parsed.type === 'message_stop') return true;
  }
  return false;
}

/**
 * The answer has the shape the translation reads: content blocks that are objects with a type,
 * text blocks with text, tool_use blocks with a string id and name.
 */
function isMessage(value: unknown): value is AnthropicMessage {
  if (typeof value !== 'object' || value === null) return false;
  const content = (value as { content?: unknown }).content;
  if (!Array.isArray(content)) return false;
  for (const block of content as unknown[]) {
    if (typeof block !== 'object' || block === null) return false;
    const b = block as { type?: unknown; text?: unknown; id?: unknown; name?: unknown };
    if (typeof b.type !== 'string') return false;
    if (b.type === 'text' && typeof b.text !== 'string') return false;
    if (b.type === 'tool_use' && (typeof b.id !== 'string' || typeof b.name !== 'string')) return false;
  }
  return true;
}
