/**
 * List prices in USD per million tokens (input, output), matched by model-name prefix, longest
 * first, with what a prompt-cache read costs as a share of the input price. Defaults from the
 * providers' public price pages; they change, so treat them as estimates. `mock-*` is free.
 */
type Row = readonly [prefix: string, input: number, output: number, cachedRead: number];

const TABLE: readonly Row[] = [
  ['gpt-4o-mini', 0.15, 0.6, 0.5],
  ['gpt-4o', 2.5, 10, 0.5],
  ['gpt-4.1-nano', 0.1, 0.4, 0.25],
  ['gpt-4.1-mini', 0.4, 1.6, 0.25],
  ['gpt-4.1', 2, 8, 0.25],
  ['o4-mini', 1.1, 4.4, 0.25],
  ['o3-mini', 1.1, 4.4, 0.5],
  ['o3', 2, 8, 0.25],
  ['o1', 15, 60, 0.5],
  ['text-embedding-3-small', 0.02, 0, 1],
  ['text-embedding-3-large', 0.13, 0, 1],
  ['claude-3-5-haiku', 0.8, 4, 0.1],
  ['claude-3-5-sonnet', 3, 15, 0.1],
  ['claude-3-7-sonnet', 3, 15, 0.1],
  ['claude-sonnet-4', 3, 15, 0.1],
  ['claude-opus-4', 15, 75, 0.1],
  ['claude-haiku', 0.8, 4, 0.1],
  ['mock-', 0, 0, 1],
];
const PRICES: readonly Row[] = [...TABLE].sort((a, b) => b[0].length - a[0].length);

export interface Price {
  readonly input: number;
  readonly output: number;
  /** A prompt-cache read, as a share of `input`. */
  readonly cachedRead: number;
  /** A prompt-cache write, as a share of `input` (Anthropic's five-minute cache: 1.25). */
  readonly cacheWrite: number;
}

export function priceOf(model: string): Price | undefined {
  for (const [prefix, input, output, cachedRead] of PRICES)
    if (model.startsWith(prefix))
      return { input, output, cachedRead, cacheWrite: prefix.startsWith('claude') ? 1.25 : 1 };
  return undefined;
}

/**
 * What a call cost: `promptTokens` includes the `cached` tokens read from the prompt cache and
 * the `written` ones written to it, each priced at its own share of the input price.
 */
export function costOf(
  price: Price,
  promptTokens: number,
  completionTokens: number,
  cached = 0,
  written = 0,
): number {
  const plain = Math.max(0, promptTokens - cached - written);
  const input = plain + cached * price.cachedRead + written * price.cacheWrite;
  return (input * price.input + completionTokens * price.output) / 1_000_000;
}

/**
 * Tokens in `chars` characters of text, at four characters a token: the rule of every estimate
 * (a budget's prompt, a stream's usage when the provider's did not arrive).
 */
export function tokensOfChars(chars: number): number {
  return Math.ceil(chars / 4);
}

/** Completion tokens assumed when a request sets no max_tokens. */
export const ASSUMED_COMPLETION_TOKENS = 1024;

/**
 * The most a call can cost before it runs: prompt tokens estimated at four characters each, the
 * completion at its max_tokens (or ASSUMED_COMPLETION_TOKENS). Undefined when the model's price
 * is unknown.
 */
export function estimateCost(
  model: string,
  promptChars: number,
  maxTokens: number | null | undefined,
  choices = 1,
): number | undefined {
  const price = priceOf(model);
  if (!price) return undefined;
  // Each of `n` choices may write up to the limit; the prompt is read once.
  return costOf(price, tokensOfChars(promptChars), (maxTokens ?? ASSUMED_COMPLETION_TOKENS) * choices);
}
