export {
  type ContentScan,
  messageTexts,
  redactMessages,
  type ScannedText,
  scanTexts,
  stringsIn,
} from './content.js';
export {
  type ActionIdentity,
  actionFingerprint,
  actionIdentity,
  argsDigest,
  type FingerprintInput,
} from './fingerprint.js';
export { type FindingAction, type OutputGuard, outputGuard, REDACTABLE } from './output.js';
export { ASSUMED_COMPLETION_TOKENS, costOf, estimateCost, type Price, priceOf } from './pricing.js';
export { type GuardStep, guardText, StreamGuard } from './stream-guard.js';
