import type { Embedding, EmbeddingResponse } from './openai-types.js';

/** Standard base64, padded or not: what a base64 `encoding_format` answer's embedding is. */
const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * An upstream's `/v1/embeddings` answer rebuilt from the fields the OpenAI format documents
 * (`object: "list"`, `data[]` of `{object: "embedding", index, embedding}`, `model`, `usage` with
 * `prompt_tokens` and `total_tokens`), or why it is not one. Nothing else the upstream sent is
 * kept: a provider pointed at another service must not have that service's answer handed on
 * whole. `base64`: the call asked for `encoding_format: "base64"`, so each embedding is base64
 * text, else an array of numbers. The reason names fields, never values: it goes to the agent.
 */
export function embeddingResponse(value: unknown, base64: boolean): EmbeddingResponse | string {
  if (!isObject(value)) return 'the answer is not a JSON object';
  if (value.object !== 'list') return 'object is not "list"';
  if (!Array.isArray(value.data)) return 'data is not an array';
  if (typeof value.model !== 'string') return 'model is not a string';
  const usage = value.usage;
  if (!isObject(usage)) return 'usage is not an object';
  if (!isCount(usage.prompt_tokens)) return 'usage.prompt_tokens is not a count';
  if (!isCount(usage.total_tokens)) return 'usage.total_tokens is not a count';
  const data: Embedding[] = [];
  for (const [i, item] of (value.data as unknown[]).entries()) {
    if (!isObject(item)) return `data[${i}] is not an object`;
    if (item.object !== 'embedding') return `data[${i}].object is not "embedding"`;
    if (!isCount(item.index) || !Number.isInteger(item.index)) return `data[${i}].index is not an index`;
    const embedding = item.embedding;
    if (base64) {
      if (typeof embedding !== 'string' || !BASE64_RE.test(embedding))
        return `data[${i}].embedding is not base64 text (encoding_format is base64)`;
    } else if (!isVector(embedding)) return `data[${i}].embedding is not an array of numbers`;
    data.push({
      object: 'embedding',
      index: item.index as number,
      embedding: embedding as number[] | string,
    });
  }
  return {
    object: 'list',
    data,
    model: value.model,
    usage: { prompt_tokens: usage.prompt_tokens as number, total_tokens: usage.total_tokens as number },
  };
}

type Loose = Record<string, unknown>;

function isObject(value: unknown): value is Loose {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A token count or an index: a finite number, not negative. */
function isCount(value: unknown): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

function isVector(value: unknown): value is number[] {
  if (!Array.isArray(value)) return false;
  for (const x of value as unknown[]) if (typeof x !== 'number' || !Number.isFinite(x)) return false;
  return true;
}
