// The texts of an Anthropic Messages request that goes to an Anthropic upstream as it is (the
// forwarded request, providers/wire/anthropic-forward.ts), and their redaction in place. Each text
// names its place by a path (`messages[2].content[0].text`); what cannot be rewritten there
// (thinking, which its signature seals; schemas; citations; stop sequences) is a `request` item,
// and a finding to redact in one refuses the call, as in content.ts.

import { type DetectionCategory, redact } from '../detect/index.js';
import type { ContentScan, Redaction, TextItem } from './content.js';
import { joinedStrings } from './content.js';

type Json = Record<string, unknown>;

interface AnthropicRequestLike {
  messages: unknown[];
  system?: unknown;
  tools?: unknown;
  metadata?: unknown;
  stop_sequences?: unknown;
}

/**
 * Every forwarded text: the system prompt, each message's text, tool_use input, tool_result
 * content, document text and title, thinking, citations; each tool's description and schema; the
 * end-user id; the stop sequences. Images, redacted thinking and ids are not text.
 */
export function anthropicRequestTexts(req: AnthropicRequestLike): TextItem[] {
  const out: TextItem[] = [];
  const system = req.system;
  if (typeof system === 'string') out.push(at(-1, -1, system, 'system'));
  else if (Array.isArray(system))
    for (let i = 0; i < system.length; i++) blockTexts(system[i], -1, i, `system[${i}]`, out);
  const messages = req.messages;
  for (let m = 0; m < messages.length; m++) {
    const content = (messages[m] as { content?: unknown }).content;
    if (typeof content === 'string') out.push(at(m, -1, content, `messages[${m}].content`));
    else if (Array.isArray(content))
      for (let p = 0; p < content.length; p++)
        blockTexts(content[p], m, p, `messages[${m}].content[${p}]`, out);
  }
  if (Array.isArray(req.tools)) {
    for (let t = 0; t < req.tools.length; t++) {
      const tool = req.tools[t] as Json;
      if (typeof tool.description === 'string')
        out.push(at(t, -1, tool.description, `tools[${t}].description`));
      sealed(tool.input_schema, t, -1, `tools[${t}].input_schema`, out);
    }
  }
  const userId = (req.metadata as Json | null | undefined)?.user_id;
  if (typeof userId === 'string') out.push(at(-1, -1, userId, 'metadata.user_id'));
  sealed(req.stop_sequences, -1, -1, 'stop_sequences', out);
  return out;
}

function at(message: number, part: number, text: string, key: string): TextItem {
  return { message, part, text, field: 'path', key };
}

/** The strings of a value that cannot be rewritten in place, as one `request` item. */
function sealed(value: unknown, message: number, part: number, key: string, out: TextItem[]): void {
  if (value === undefined || value === null) return;
  const text = joinedStrings(value, key);
  if (text !== '') out.push({ message, part, text, field: 'request', key });
}

function blockTexts(value: unknown, m: number, p: number, path: string, out: TextItem[]): void {
  const b = value as Json;
  switch (b.type) {
    case 'text':
      if (typeof b.text === 'string') out.push(at(m, p, b.text, `${path}.text`));
      sealed(b.citations, m, p, `${path}.citations`, out);
      return;
    case 'tool_use':
      // Scanned as the JSON text an OpenAI upstream would get as arguments, so one policy sees
      // the same text whichever provider serves the model.
      out.push({
        message: m,
        part: p,
        text: JSON.stringify(b.input ?? {}),
        field: 'input',
        key: `${path}.input`,
      });
      return;
    case 'tool_result': {
      const content = b.content;
      if (typeof content === 'string') out.push(at(m, p, content, `${path}.content`));
      else if (Array.isArray(content))
        for (let q = 0; q < content.length; q++) blockTexts(content[q], m, p, `${path}.content[${q}]`, out);
      return;
    }
    case 'image':
      sourceUrl(b, m, p, path, out);
      return;
    case 'document': {
      sourceUrl(b, m, p, path, out);
      const source = b.source as Json | undefined;
      if (source?.type === 'text' && typeof source.data === 'string')
        out.push(at(m, p, source.data, `${path}.source.data`));
      else if (source?.type === 'content') {
        const content = source.content;
        if (typeof content === 'string') out.push(at(m, p, content, `${path}.source.content`));
        else if (Array.isArray(content))
          for (let q = 0; q < content.length; q++)
            blockTexts(content[q], m, p, `${path}.source.content[${q}]`, out);
      }
      if (typeof b.title === 'string') out.push(at(m, p, b.title, `${path}.title`));
      if (typeof b.context === 'string') out.push(at(m, p, b.context, `${path}.context`));
      return;
    }
    case 'thinking':
      // Its signature covers the text: a rewritten thinking block is refused by the provider.
      if (typeof b.thinking === 'string' && b.thinking !== '')
        out.push({ message: m, part: p, text: b.thinking, field: 'request', key: `${path}.thinking` });
      return;
    default:
      return; // redacted_thinking: opaque (forwardedAnthropicRequest keeps no other type)
  }
}

/**
 * An image's or document's URL: the provider fetches it, so whatever the URL carries (a key in its
 * query) leaves through it. It cannot be rewritten and stay the same resource: sealed.
 */
function sourceUrl(b: Json, m: number, p: number, path: string, out: TextItem[]): void {
  const source = b.source as Json | undefined;
  if (source?.type === 'url' && typeof source.url === 'string')
    out.push({ message: m, part: p, text: source.url, field: 'request', key: `${path}.source.url` });
}

/** Number of object keys at every level of a JSON value. */
function keyCount(v: unknown): number {
  if (Array.isArray(v)) {
    let n = 0;
    for (const x of v) n += keyCount(x);
    return n;
  }
  if (v === null || typeof v !== 'object') return 0;
  let n = 0;
  for (const k in v) n += 1 + keyCount((v as Json)[k]);
  return n;
}

/**
 * The value of a JSON text after redaction, when it still is the same call: undefined when the
 * placeholders broke the JSON, or made two of its keys one (the tool would get another call).
 * Used for tool input both ways (the request's history and the model's answer).
 */
export function redactedJson(original: string, redacted: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(redacted);
  } catch {
    return undefined;
  }
  return keyCount(value) === keyCount(JSON.parse(original)) ? value : undefined;
}

/**
 * Rewrites the request's texts in place, replacing findings of `categories` with placeholders. A
 * tool_use input is rewritten as its redacted JSON text parsed back (see redactedJson; when that
 * is not the same call, the input is left where it was, stuck).
 */
export function redactAnthropicRequest(
  req: AnthropicRequestLike,
  scan: ContentScan,
  categories: readonly DetectionCategory[],
): Redaction {
  let changed = 0;
  let stuck: Redaction['stuck'] = null;
  for (const t of scan.texts) {
    const finding = t.findings.find((f) => categories.includes(f.category));
    if (!finding) continue;
    const path = t.key ?? '';
    if (t.field === 'request') {
      stuck ??= { path, category: finding.category };
      continue;
    }
    const next = redact(t.text, t.findings, categories);
    if (next === t.text) continue;
    if (t.field === 'input') {
      const input = redactedJson(t.text, next);
      if (input === undefined) {
        stuck ??= { path, category: finding.category };
        continue;
      }
      setAt(req, path, input);
    } else setAt(req, path, next);
    changed++;
  }
  return { changed, stuck };
}

/** Sets the value at `path` (`a.b[2].c`); the objects on the way are copied, not changed. */
function setAt(root: object, path: string, value: unknown): void {
  const keys = path.match(/[^.[\]]+/g) ?? [];
  let node = root as Json;
  for (let i = 0; i < keys.length - 1; i++) {
    const key = keys[i] as string;
    const child = node[key];
    // Copied: the caller's message objects may be shared with the canonical request.
    const copy = Array.isArray(child) ? child.slice() : { ...(child as Json) };
    node[key] = copy;
    node = copy as Json;
  }
  node[keys[keys.length - 1] as string] = value;
}
