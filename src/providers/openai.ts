import { ServiceError } from '../core/errors.js';
import { HOP_HEADER, HOP_ID } from '../http/hop.js';
import type { ChatCall, Provider } from './types.js';
import { keyScrub, type PoolSource, requestJson, requestStream, scrubbed, splitBaseUrl } from './upstream.js';
import {
  type ChatCompletion,
  type ChatCompletionChunk,
  type EmbeddingRequest,
  embeddingResponse,
  type SseEvent,
  SseParser,
} from './wire/index.js';

/** An OpenAI-compatible upstream (`base_url` ends in /v1, as in the official SDK). */
export function openaiProvider(pools: PoolSource, baseUrl: string, apiKey: string): Provider {
  const { origin, prefix } = splitBaseUrl(baseUrl);
  // Every request says it comes from govgate: one that leads back to a govgate is refused there.
  const headers = {
    'content-type': 'application/json',
    authorization: `Bearer ${apiKey}`,
    [HOP_HEADER]: HOP_ID,
  };
  const getHeaders = { authorization: `Bearer ${apiKey}`, [HOP_HEADER]: HOP_ID };
  const chatPath = `${prefix}/chat/completions`;

  return {
    name: 'openai',
    keyScrub: keyScrub(apiKey),
    async chat(call: ChatCall) {
      const body = call.rawBody ?? JSON.stringify(call.request);
      const res = await requestJson('openai', pools.get(origin), {
        path: chatPath,
        method: 'POST',
        headers,
        body,
        cancel: call.cancel,
        key: apiKey,
      });
      if (!isChatCompletion(res))
        throw new ServiceError('upstream_error', 'provider openai sent an unexpected answer');
      return res;
    },
    async *chatStream(call: ChatCall) {
      // Ask for usage so the audit trail records tokens for streams too. Plain copies, then
      // members set: a spread followed by members is V8's slow path on Node 20, and
      // Object.assign would drop a client's `__proto__` member (docs/ops.md).
      const request = { ...call.request };
      request.stream = true;
      const options = { ...call.request.stream_options };
      options.include_usage = true;
      request.stream_options = options;
      const text = await requestStream('openai', pools.get(origin), {
        path: chatPath,
        headers,
        body: JSON.stringify(request),
        cancel: call.cancel,
        key: apiKey,
      });
      const parser = new SseParser('provider openai');
      // After [DONE] the body is read to its end (not abandoned), so the keep-alive connection
      // goes back to the pool instead of being destroyed.
      let done = false;
      try {
        for await (const piece of text) {
          if (done) continue;
          const batch: ChatCompletionChunk[] = [];
          done = decodeEvents(parser.push(piece), batch, apiKey);
          if (batch.length > 0) yield batch;
        }
      } catch (err) {
        // What fails after [DONE] (the rest cut at the stream bound, a reset) ends a whole answer.
        if (!done) throw err;
      }
      if (done) return;
      // The body ended: an event without its blank line counts, but a stream without [DONE]
      // (cut short, or no event stream at all) is a failure, not a complete answer.
      const batch: ChatCompletionChunk[] = [];
      done = decodeEvents(parser.end(), batch, apiKey);
      if (!done) throw new ServiceError('upstream_error', 'provider openai ended its stream before [DONE]');
      if (batch.length > 0) yield batch;
    },
    async embed(request: EmbeddingRequest, signal: AbortSignal) {
      const res = await requestJson('openai', pools.get(origin), {
        path: `${prefix}/embeddings`,
        method: 'POST',
        headers,
        body: JSON.stringify(request),
        cancel: signal,
        key: apiKey,
      });
      // Rebuilt from the documented fields: the upstream's object is never handed on as it came.
      const answer = embeddingResponse(res, request.encoding_format === 'base64');
      if (typeof answer === 'string')
        throw new ServiceError(
          'upstream_error',
          `provider openai sent an unexpected embeddings answer: ${answer}`,
        );
      return answer;
    },
    async listModels(signal: AbortSignal) {
      const res = (await requestJson('openai', pools.get(origin), {
        path: `${prefix}/models`,
        method: 'GET',
        headers: getHeaders,
        cancel: signal,
        key: apiKey,
      })) as {
        data?: { id?: unknown }[];
      };
      return (res.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === 'string');
    },
  };
}

/**
 * Adds the chunks of `events` to `batch`; true at [DONE] (what follows it is ignored). An error
 * event fails the stream with its message, without the provider's key `key`.
 */
function decodeEvents(events: readonly SseEvent[], batch: ChatCompletionChunk[], key: string): boolean {
  for (const event of events) {
    if (event.data === '[DONE]') return true;
    let chunk: ChatCompletionChunk;
    try {
      chunk = JSON.parse(event.data) as ChatCompletionChunk;
    } catch (err) {
      throw new ServiceError('upstream_error', 'provider openai sent an unreadable stream event', {
        cause: err,
      });
    }
    const error = (chunk as { error?: { message?: string } }).error;
    if (error)
      throw new ServiceError(
        'upstream_error',
        `provider openai stream failed: ${scrubbed(String(error.message ?? 'error'), key)}`,
      );
    batch.push(chunk);
  }
  return false;
}

type Loose = Record<string, unknown>;

function isObject(value: unknown): value is Loose {
  return typeof value === 'object' && value !== null;
}

/** Absent, or a number: a token count the audit trail and the cost are computed from. */
function isCount(value: unknown): boolean {
  return value === undefined || value === null || (typeof value === 'number' && Number.isFinite(value));
}

/** `usage` absent, or token counts that are numbers. */
export function isUsage(value: unknown): boolean {
  if (value === undefined || value === null) return true;
  return (
    isObject(value) &&
    isCount(value.prompt_tokens) &&
    isCount(value.completion_tokens) &&
    isCount(value.total_tokens)
  );
}

/**
 * The answer has the shape the gateway reads and guards: every choice has a message whose
 * content and refusal are text or null and whose tool calls are function calls with a string
 * name and arguments, or custom tool calls with a string name and input; usage counts are
 * numbers. Anything else is refused rather than passed on unscanned.
 */
function isChatCompletion(value: unknown): value is ChatCompletion {
  if (!isObject(value) || !Array.isArray(value.choices) || !isUsage(value.usage)) return false;
  for (const choice of value.choices as unknown[]) {
    if (!isObject(choice)) return false;
    const message = choice.message;
    if (!isObject(message)) return false;
    const content = message.content;
    if (content !== undefined && content !== null && typeof content !== 'string') return false;
    const refusal = message.refusal;
    if (refusal !== undefined && refusal !== null && typeof refusal !== 'string') return false;
    const legacy = message.function_call;
    if (legacy !== undefined && legacy !== null) {
      if (!isObject(legacy) || typeof legacy.name !== 'string' || typeof legacy.arguments !== 'string')
        return false;
    }
    const calls = message.tool_calls;
    if (calls === undefined || calls === null) continue;
    if (!Array.isArray(calls)) return false;
    for (const call of calls as unknown[]) {
      if (!isObject(call)) return false;
      if (call.type === 'custom') {
        const custom = call.custom;
        if (!isObject(custom) || typeof custom.name !== 'string' || typeof custom.input !== 'string')
          return false;
        continue;
      }
      const fn = call.function;
      if (!isObject(fn) || typeof fn.name !== 'string' || typeof fn.arguments !== 'string') return false;
    }
  }
  return true;
}
