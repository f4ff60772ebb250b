import type { Embedding, EmbeddingResponse } from './openai-types.js';

/** Standard base64, padded or not: what a base64 `encoding_format` answer's embedding is. */
const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * An upstream's `/v1/embeddings` answer rebuilt from the fields the OpenAI format documents
 * (`object: "list"`, `data[]` of `{object: "embedding", index, embedding}`, `model`, `usage` with
 * `prompt_tokens` and `total_tokens`), or why it is not one. Nothing else the upstream sent is
 * kept: a provider pointed at another service must not have that service's answer handed on
 * whole. `base64`: the call asked for `encoding_format: "base64"`, so each embedding is base64
 * text, else an array of numbers. An OpenAI-compatible server that ignores the format and answers
 * numbers is answered for as OpenAI would: the numbers as float32, little-endian, in base64 (the
 * official SDKs ask for base64 by default). The reason names fields, never values: it goes to
 * the agent.
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
    let embedding = item.embedding;
    if (base64) {
      if (isVector(embedding)) embedding = float32Base64(embedding);
      else if (typeof embedding !== 'string' || !BASE64_RE.test(embedding))
        return `data[${i}].embedding is neither base64 text nor an array of numbers`;
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

/** A vector as OpenAI's base64 `encoding_format` gives it: float32, little-endian. */
function float32Base64(vector: readonly number[]): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i] as number, i * 4);
  return bytes.toString('base64');
}
