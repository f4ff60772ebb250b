/**
 * List prices in USD per million tokens (input, output), matched by model-name prefix, longest
 * first. Defaults from the providers' public price pages; they change, so treat them as
 * estimates. `mock-*` is free.
 */
type Row = readonly [prefix: string, input: number, output: number];

const TABLE: readonly Row[] = [
  ['gpt-4o-mini', 0.15, 0.6],
  ['gpt-4o', 2.5, 10],
  ['gpt-4.1-nano', 0.1, 0.4],
  ['gpt-4.1-mini', 0.4, 1.6],
  ['gpt-4.1', 2, 8],
  ['o4-mini', 1.1, 4.4],
  ['o3-mini', 1.1, 4.4],
  ['o3', 2, 8],
  ['o1', 15, 60],
  ['text-embedding-3-small', 0.02, 0],
  ['text-embedding-3-large', 0.13, 0],
  ['claude-3-5-haiku', 0.8, 4],
  ['claude-3-5-sonnet', 3, 15],
  ['claude-3-7-sonnet', 3, 15],
  ['claude-sonnet-4', 3, 15],
  ['claude-opus-4', 15, 75],
  ['claude-haiku', 0.8, 4],
  ['mock-', 0, 0],
];
const PRICES: readonly Row[] = [...TABLE].sort((a, b) => b[0].length - a[0].length);

export interface Price {
  readonly input: number;
  readonly output: number;
}

export function priceOf(model: string): Price | undefined {
  for (const [prefix, input, output] of PRICES) if (model.startsWith(prefix)) return { input, output };
  return undefined;
}

export function costOf(price: Price, promptTokens: number, completionTokens: number): number {
  return (promptTokens * price.input + completionTokens * price.output) / 1_000_000;
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
): number | undefined {
  const price = priceOf(model);
  if (!price) return undefined;
  return costOf(price, Math.ceil(promptChars / 4), maxTokens ?? ASSUMED_COMPLETION_TOKENS);
}
