import type { KeyScrub } from './upstream.js';
import type {
  AnthropicMessage,
  AnthropicMessagesRequest,
  AnthropicStreamEvent,
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionRequest,
  EmbeddingRequest,
  EmbeddingResponse,
} from './wire/index.js';

export const PROVIDER_NAMES = ['openai', 'anthropic', 'mock'] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];

export interface ChatCall {
  /** The request in the canonical (OpenAI chat) format. */
  readonly request: ChatCompletionRequest;
  /**
   * The caller's exact bytes when they equal `request` for this provider (an OpenAI-format request
   * to an OpenAI-format upstream), so the provider can forward them without re-serialising.
   */
  readonly rawBody?: Buffer | string | undefined;
  /** The call is cancelled when the client goes away (the gateway passes its server response). */
  readonly cancel: Cancellation;
}

/** Cancellation without an AbortController per call: `aborted`, and a listener for when it happens. */
export interface Cancellation {
  readonly aborted: boolean;
  onAbort(listener: () => void): void;
}

/** One configured upstream of one org. Translation to and from its wire format happens inside. */
export interface Provider {
  readonly name: ProviderName;
  chat(call: ChatCall): Promise<ChatCompletion>;
  /**
   * The answer as chunks, in batches: each item holds the chunks decoded from one read of the
   * upstream (never empty), so a consumer pays one await per network read, not one per chunk.
   */
  chatStream(call: ChatCall): AsyncIterable<readonly ChatCompletionChunk[]>;
  embed(request: EmbeddingRequest, signal: AbortSignal): Promise<EmbeddingResponse>;
  listModels(signal: AbortSignal): Promise<string[]>;
  /** Anthropic upstreams only: the Messages API itself, for callers that speak it. */
  readonly messagesApi?: MessagesApi;
  /** What replaces the provider's own key in its answers (none for a provider without a key). */
  readonly keyScrub?: KeyScrub;
}

/**
 * An Anthropic request forwarded as the caller sent it (providers/wire/anthropic-forward.ts) and
 * the answer as the provider gave it, so nothing the canonical shape cannot say is lost.
 */
export interface MessagesApi {
  create(request: AnthropicMessagesRequest, call: MessagesCall): Promise<AnthropicMessage>;
  /** The stream's events in batches, one per network read (never empty), through message_stop. */
  stream(
    request: AnthropicMessagesRequest,
    call: MessagesCall,
  ): AsyncIterable<readonly AnthropicStreamEvent[]>;
}

export interface MessagesCall {
  readonly cancel: Cancellation;
  /** The caller's `anthropic-beta` header (the beta features it asks the provider for). */
  readonly beta: string | undefined;
}

/** A provider entry as stored in org settings (the key itself sealed in the vault). */
export interface ProviderSettings {
  readonly name: ProviderName;
  readonly base_url: string | null;
  readonly models: readonly string[];
  /** Vault slot of the API key, or null (mock). */
  readonly key_ref: string | null;
  readonly key_last4: string | null;
}

export const DEFAULT_BASE_URL: Record<ProviderName, string | null> = {
  openai: 'https://api.openai.com/v1',
  anthropic: 'https://api.anthropic.com',
  mock: null,
};

export const DEFAULT_MODELS: Record<ProviderName, readonly string[]> = {
  openai: ['gpt-*', 'o*', 'text-embedding-*', 'chatgpt-*'],
  anthropic: ['claude-*'],
  mock: ['mock-*'],
};

export const MOCK_MODELS = ['mock-echo', 'mock-tools'] as const;
