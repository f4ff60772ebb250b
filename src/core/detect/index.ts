// Public face of the content detectors: detect(), redact(), summarize() and their types.

export { detect } from './detect.js';
export { REDACTION_PLACEHOLDERS, redact } from './redact.js';
export { MIN_SECRET_LENGTH, SECRET_ENTROPY_THRESHOLD } from './secrets-generic.js';
export { summarize } from './summarize.js';
export type {
  DetectionCategory,
  DetectionResult,
  DetectionSummary,
  DetectOptions,
  Finding,
  InjectionScores,
  InjectionType,
  PiiType,
  SecretType,
  UnicodeType,
} from './types.js';
export { INJECTION_TYPES, PII_TYPES, SECRET_TYPES, UNICODE_TYPES } from './types.js';
export { cardPrefixValid, ibanMod97, ibanValid, luhnValid, shannonEntropy, ssnValid } from './validators.js';
