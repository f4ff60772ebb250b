// Shared shapes of the content detectors: findings, options, results and the policy summary.

export type DetectionCategory = 'pii' | 'secret' | 'injection' | 'unicode';

export const PII_TYPES = ['email', 'phone', 'card', 'iban', 'ssn', 'ipv4', 'ipv6', 'dob'] as const;
export type PiiType = (typeof PII_TYPES)[number];

export const SECRET_TYPES = [
  'aws_access_key',
  'aws_secret_key',
  'gcp_api_key',
  'azure_key',
  'github_token',
  'slack_token',
  'openai_key',
  'anthropic_key',
  'private_key',
  'jwt',
  'connection_string',
  'generic_secret',
  'govgate_key',
] as const;
export type SecretType = (typeof SECRET_TYPES)[number];

export const INJECTION_TYPES = [
  'direct',
  'indirect',
  'jailbreak',
  'role_hijack',
  'context_manipulation',
] as const;
export type InjectionType = (typeof INJECTION_TYPES)[number];

export const UNICODE_TYPES = ['invisible', 'bidi', 'mixed_script'] as const;
export type UnicodeType = (typeof UNICODE_TYPES)[number];

/** One detected span. Offsets are UTF-16 code-unit indexes into the scanned text; `end` is exclusive. */
export interface Finding {
  category: DetectionCategory;
  type: string;
  start: number;
  end: number;
  /** Injection findings only: the weight (0..1) of the phrase pattern that matched. */
  score?: number;
}

export interface DetectOptions {
  /** `true` (default) for every PII type, `false` for none, or the list of types to report. */
  pii?: boolean | readonly string[];
  secrets?: boolean;
  injection?: boolean;
  unicode?: boolean;
}

export type InjectionScores = Record<InjectionType, number>;

export interface DetectionResult {
  /** Sorted by `start` (then longest first). */
  findings: Finding[];
  /** Combined 0..1 score per injection category (0 when nothing matched). */
  injection: InjectionScores;
}

/** What the policy engine consumes: types and scores only, never values. */
export interface DetectionSummary {
  pii: readonly string[];
  secrets: readonly string[];
  injection: Readonly<Record<string, number>>;
  unicode: readonly string[];
}
