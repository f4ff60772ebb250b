import type { ServiceError } from '../core/errors.js';
import { errorBody } from '../core/errors.js';
import {
  type AnthropicStreamEvent,
  type ChatCompletion,
  type ChatCompletionChunk,
  OpenaiStreamToAnthropic,
  type OpenaiUsage,
  openaiResponseToAnthropic,
} from '../providers/wire/index.js';
import type { ServiceEnvelope } from './envelope.js';

/** Turns canonical (OpenAI-format) results into one wire format for the agent. */
export interface FrontEnd {
  readonly format: 'openai' | 'anthropic';
  readonly endpoint: string;
  renderCompletion(completion: ChatCompletion, service: ServiceEnvelope, requestModel: string): unknown;
  streamRenderer(requestModel: string, wantsUsage: boolean): StreamRenderer;
}

export interface StreamRenderer {
  /** SSE text for one canonical chunk ('' when held back). */
  chunk(chunk: ChatCompletionChunk): string;
  /** SSE text that closes a complete stream, carrying the envelope. */
  finish(service: ServiceEnvelope): string;
  /** SSE text reporting a failure after the stream started. */
  error(err: ServiceError, requestId: string): string;
}

export const openaiFrontEnd: FrontEnd = {
  format: 'openai',
  endpoint: '/v1/chat/completions',
  renderCompletion(completion, service) {
    completion.service = service;
    return completion;
  },
  streamRenderer(requestModel, wantsUsage) {
    let id = '';
    let created = Math.floor(Date.now() / 1000);
    let model = requestModel;
    let usage: OpenaiUsage | null | undefined;
    return {
      chunk(c) {
        id = c.id;
        created = c.created;
        model = c.model || model;
        if (c.usage) {
          // Usage goes out as OpenAI sends it: only when asked for, on the last chunk (below),
          // however the upstream reported it (Anthropic's arrives with the finish).
          usage = c.usage;
          if (c.choices.length === 0) return '';
          return `data: ${JSON.stringify(Object.assign({}, c, { usage: undefined }))}\n\n`;
        }
        return `data: ${JSON.stringify(c)}\n\n`;
      },
      finish(service) {
        // The envelope rides on the last chunk before [DONE], a normal chunk with no choices,
        // which also carries the usage when the client asked (`stream_options.include_usage`).
        const last: ChatCompletionChunk = {
          id,
          object: 'chat.completion.chunk',
          created,
          model,
          choices: [],
        };
        if (wantsUsage && usage) last.usage = usage;
        last.service = service;
        return `data: ${JSON.stringify(last)}\n\ndata: [DONE]\n\n`;
      },
      error(err, requestId) {
        return `data: ${JSON.stringify(errorBody(err.code, err.message, requestId, err.param))}\n\n`;
      },
    };
  },
};

/** An Anthropic stream event as SSE. */
export function sseEvent(event: AnthropicStreamEvent): string {
  return `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
}

export const anthropicFrontEnd: FrontEnd = {
  format: 'anthropic',
  endpoint: '/v1/messages',
  renderCompletion(completion, service, requestModel) {
    const message = openaiResponseToAnthropic(completion, requestModel) as ReturnType<
      typeof openaiResponseToAnthropic
    > & {
      service?: ServiceEnvelope;
    };
    message.service = service;
    return message;
  },
  streamRenderer(requestModel) {
    let convert: OpenaiStreamToAnthropic | undefined;
    let held: AnthropicStreamEvent[] = [];
    const render = (events: AnthropicStreamEvent[]): string => {
      let out = '';
      for (const e of events) {
        // message_delta carries the envelope, so it and what follows wait for the end.
        if (held.length > 0 || e.type === 'message_delta' || e.type === 'message_stop') held.push(e);
        else out += sseEvent(e);
      }
      return out;
    };
    return {
      chunk(c) {
        convert ??= new OpenaiStreamToAnthropic({
          id: `msg_${c.id.replace(/^chatcmpl-/, '')}`,
          model: requestModel,
        });
        return render(convert.push(c));
      },
      finish(service) {
        convert ??= new OpenaiStreamToAnthropic({ id: 'msg_empty', model: requestModel });
        const events = [...held, ...convert.finish()];
        held = [];
        let out = '';
        for (const e of events) {
          if (e.type === 'message_delta')
            (e as AnthropicStreamEvent & { service?: ServiceEnvelope }).service = service;
          out += sseEvent(e);
        }
        return out;
      },
      error: anthropicStreamError,
    };
  },
};

/**
 * A failure after an Anthropic stream started: an `error` event, as Anthropic sends one
 * (`{type: "error", error: {type, message}}`), whose `error` is the contract's error object
 * (with its code and request id) like every other error govgate answers.
 */
export function anthropicStreamError(err: ServiceError, requestId: string): string {
  return `event: error\ndata: ${JSON.stringify(errorBody(err.code, err.message, requestId, err.param))}\n\n`;
}
