/**
 * Wire formats and translation between OpenAI Chat Completions (govgate's canonical format) and
 * Anthropic Messages. Everything here is pure and synchronous: no I/O, no clocks.
 */

export { forwardedAnthropicRequest } from './anthropic-forward.js';
export { anthropicRequestToOpenai } from './anthropic-request-to-openai.js';
export { anthropicResponseToOpenai } from './anthropic-response-to-openai.js';
export { ANTHROPIC_STOP, type AnthropicStop, CACHE_WRITE_TOKENS } from './anthropic-stop.js';
export {
  AnthropicStreamToOpenai,
  type AnthropicStreamToOpenaiOptions,
} from './anthropic-stream-to-openai.js';
export type * from './anthropic-types.js';
export {
  anthropicIdToOpenai,
  anthropicStopOf,
  anthropicStopToOpenai,
  anthropicUsageToOpenai,
  carriedAnthropicStop,
  openaiFinishToAnthropic,
  openaiIdToAnthropic,
  openaiUsageToAnthropic,
  parseBase64DataUrl,
} from './conversions.js';
export {
  CUSTOM_INPUT_KEY,
  customInputFromAnthropic,
  customInputToAnthropic,
  customToolNames,
  customToolToAnthropic,
} from './custom-tools.js';
export { embeddingResponse } from './embedding-response.js';
export {
  type OpenaiRequestToAnthropicOptions,
  openaiRequestToAnthropic,
} from './openai-request-to-anthropic.js';
export { openaiResponseToAnthropic } from './openai-response-to-anthropic.js';
export {
  OpenaiStreamToAnthropic,
  type OpenaiStreamToAnthropicOptions,
} from './openai-stream-to-anthropic.js';
export type * from './openai-types.js';
export { isReasoningModel } from './reasoning.js';
export { formatSse, type SseEvent, SseParser } from './sse.js';
export {
  parseToolArguments,
  RAW_ARGUMENTS_KEY,
  stringifyToolInput,
  TOOL_ERROR_PREFIX,
} from './tool-arguments.js';
export { WireStreamError } from './wire-stream-error.js';
