export { anthropicRequestTexts, redactAnthropicRequest, redactedJson } from './anthropic-content.js';
export {
  type ContentScan,
  embeddingTexts,
  messageTexts,
  type Redaction,
  redactRequest,
  requestTexts,
  type ScannedText,
  scanTexts,
  stringsIn,
  type TextField,
  type TextItem,
} from './content.js';
export {
  type ActionIdentity,
  actionFingerprint,
  actionIdentity,
  argsDigest,
  type FingerprintInput,
  NULL_ARGS_SHA256,
} from './fingerprint.js';
export {
  cachedGuard,
  type FindingAction,
  type KeyScrub,
  KeyWatch,
  type OutputGuard,
  outputGuard,
  PROVIDER_KEY_TYPE,
  type Prescans,
  prescannedGuard,
  REDACTABLE,
  recordingGuard,
} from './output.js';
export { ASSUMED_COMPLETION_TOKENS, costOf, estimateCost, type Price, priceOf } from './pricing.js';
export { recordable, recordableName } from './recorded.js';
export { decodedJson, type GuardStep, guardJoined, guardText, StreamGuard } from './stream-guard.js';
