import {
  type DetectionCategory,
  type DetectionResult,
  type DetectionSummary,
  type DetectOptions,
  detect,
  type Finding,
  redact,
} from '../detect/index.js';
import type { InjectionScores } from '../detect/types.js';
import { ServiceError } from '../errors.js';

/**
 * Where a text outside message content sits (absent: the content of `messages[message]`, the
 * whole string when `part` is -1, else `content[part].text`):
 * - `refusal`: `content[part].refusal` of `messages[message]`, or its `refusal` when part is -1;
 * - `arguments`: `tool_calls[part].function.arguments` of `messages[message]`, or its legacy
 *   `function_call.arguments` when part is -1;
 * - `custom_input`: `tool_calls[part].custom.input` of `messages[message]` (a custom tool's
 *   call: free text, not JSON);
 * - `description`: `tools[message].function.description`, or `tools[message].custom.description`
 *   of a custom tool;
 * - `user`: the request's `user` (the end-user id);
 * - `parameters`: every string of `tools[message].function.parameters`, joined by newlines;
 * - `request`: every string of the top-level field `key`, joined by newlines (or, in an
 *   Anthropic request, of the value at path `key`);
 * - `path`: the string at path `key` of an Anthropic request (anthropic-content.ts);
 * - `input`: the JSON text of the object at path `key` (an Anthropic tool_use block's input).
 * `parameters` and `request` cannot be redacted in place (see redactRequest).
 */
export type TextField =
  | 'refusal'
  | 'arguments'
  | 'custom_input'
  | 'description'
  | 'user'
  | 'parameters'
  | 'request'
  | 'path'
  | 'input';

/** A text to scan and where it came from. */
export interface TextItem {
  readonly message: number;
  readonly part: number;
  readonly text: string;
  readonly field?: TextField | undefined;
  /** The top-level field, for `field: 'request'`. */
  readonly key?: string | undefined;
}

/** One scanned text and where it came from. */
export interface ScannedText extends TextItem {
  readonly findings: readonly Finding[];
}

export interface ContentScan {
  readonly texts: readonly ScannedText[];
  readonly summary: DetectionSummary;
  /** Number of findings per category, for the audit trail. */
  readonly counts: Readonly<Record<DetectionCategory, number>>;
}

interface MessageLike {
  role?: unknown;
  content?: unknown;
  refusal?: unknown;
  tool_calls?: unknown;
  function_call?: unknown;
}

interface ToolCallLike {
  type?: unknown;
  function?: { arguments?: unknown };
  custom?: { input?: unknown };
}

/** A declared tool: a function, or a custom (freeform) tool. */
interface ToolLike {
  type?: unknown;
  function?: { description?: unknown; parameters?: unknown };
  custom?: { description?: unknown; format?: { grammar?: { definition?: unknown } | null } | null };
}

interface RequestLike {
  messages: MessageLike[];
  tools?: unknown;
  user?: unknown;
  [key: string]: unknown;
}

const NO_FINDINGS: readonly Finding[] = [];

/**
 * Scans one text list, merging summaries: one detect() pass per text, or, when `results` are
 * given, the detectors' results for `items` already run elsewhere (ScanPool: one per item, null
 * for an empty text).
 */
export function scanTexts(
  items: readonly TextItem[],
  opts: DetectOptions,
  results?: readonly (DetectionResult | null)[],
): ContentScan {
  const pii = new Set<string>();
  const secrets = new Set<string>();
  const unicode = new Set<string>();
  const injection: Record<string, number> = {};
  const counts: Record<DetectionCategory, number> = { pii: 0, secret: 0, injection: 0, unicode: 0 };
  const texts: ScannedText[] = [];
  for (let i = 0; i < items.length; i++) {
    const item = items[i] as TextItem;
    if (item.text.length === 0) continue;
    const result = results === undefined ? detect(item.text, opts) : (results[i] as DetectionResult);
    for (const f of result.findings) {
      counts[f.category]++;
      if (f.category === 'pii') pii.add(f.type);
      else if (f.category === 'secret') secrets.add(f.type);
      else if (f.category === 'unicode') unicode.add(f.type);
    }
    const scores = result.injection as InjectionScores;
    for (const k in scores) {
      const v = scores[k as keyof InjectionScores];
      if (v > (injection[k] ?? 0)) injection[k] = v;
    }
    // Fields named, not `{ ...item, findings }`: a spread plus a member is V8's slow path on Node 20.
    texts.push({
      message: item.message,
      part: item.part,
      text: item.text,
      field: item.field,
      key: item.key,
      findings: result.findings.length === 0 ? NO_FINDINGS : result.findings,
    });
  }
  return {
    texts,
    summary: { pii: [...pii], secrets: [...secrets], injection, unicode: [...unicode] },
    counts,
  };
}

/**
 * The texts of chat messages: string content, text and refusal parts, a message's refusal, and
 * its tool-call arguments (and legacy function_call arguments) or custom tool-call input.
 */
export function messageTexts(messages: readonly MessageLike[]): TextItem[] {
  const out: TextItem[] = [];
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!m) continue;
    const content = m.content;
    if (typeof content === 'string') out.push({ message: i, part: -1, text: content });
    else if (Array.isArray(content)) {
      for (let j = 0; j < content.length; j++) {
        const p = content[j] as PartLike | null;
        if (!p || typeof p !== 'object') continue;
        if (typeof p.text === 'string') out.push({ message: i, part: j, text: p.text });
        else if (typeof p.refusal === 'string')
          out.push({ message: i, part: j, text: p.refusal, field: 'refusal' });
        else if (typeof p.image_url?.url === 'string' && /^https?:/i.test(p.image_url.url)) {
          // The provider fetches it: what the URL carries (a key in its query) leaves with it. A
          // URL cannot be rewritten and stay the same resource, so it is a `request` item.
          const key = `messages[${i}].content[${j}].image_url.url`;
          out.push({ message: -1, part: -1, text: p.image_url.url, field: 'request', key });
        }
        partRest(p, `messages[${i}].content[${j}]`, out);
      }
    }
    // Only assistant messages carry these; the checks cost a missing-property lookup elsewhere.
    if (typeof m.refusal === 'string') out.push({ message: i, part: -1, text: m.refusal, field: 'refusal' });
    const calls = m.tool_calls;
    if (Array.isArray(calls)) {
      for (let k = 0; k < calls.length; k++) {
        const call = calls[k] as ToolCallLike | null;
        if (!call || typeof call !== 'object') continue;
        const at = `messages[${i}].tool_calls[${k}]`;
        rest(call, TOOL_CALL_READ, at, out);
        if (call.type === 'custom') {
          // Free text, read by the tool as it is: no JSON escapes to decode.
          const input = call.custom?.input;
          if (typeof input === 'string')
            out.push({ message: i, part: k, text: input, field: 'custom_input' });
          if (call.custom) rest(call.custom, INPUT_READ, `${at}.custom`, out);
          if (call.function) rest(call.function, NOTHING_READ, `${at}.function`, out);
          continue;
        }
        const args = call.function?.arguments;
        if (typeof args === 'string') {
          out.push({ message: i, part: k, text: args, field: 'arguments' });
          if (args.includes('\\')) decodedArguments(args, `${at}.function.arguments`, out);
        }
        if (call.function) rest(call.function, ARGUMENTS_READ, `${at}.function`, out);
        if (call.custom) rest(call.custom, NOTHING_READ, `${at}.custom`, out);
      }
    }
    const legacyCall = m.function_call as { arguments?: unknown } | null | undefined;
    const legacy = legacyCall?.arguments;
    if (typeof legacy === 'string') {
      out.push({ message: i, part: -1, text: legacy, field: 'arguments' });
      if (legacy.includes('\\')) decodedArguments(legacy, `messages[${i}].function_call.arguments`, out);
    }
    if (legacyCall && typeof legacyCall === 'object')
      rest(legacyCall, ARGUMENTS_READ, `messages[${i}].function_call`, out);
    // Most messages hold only what is read above: no path string is built for them.
    if (hasUnread(m, MESSAGE_READ)) rest(m, MESSAGE_READ, `messages[${i}]`, out);
  }
  return out;
}

/**
 * Whatever else the caller put in a message, a content part, a tool call or a tool travels to an
 * OpenAI-compatible provider with the caller's bytes: a participant `name`, a `tool_call_id`, a
 * member govgate does not know. Its strings (keys included) are scanned as a `request` item,
 * refused rather than rewritten. Each set names the members read above, or carrying no free text.
 */
const MESSAGE_READ: ReadonlySet<string> = new Set([
  'role',
  'content',
  'refusal',
  'tool_calls',
  'function_call',
]);
const TOOL_CALL_READ: ReadonlySet<string> = new Set(['type', 'function', 'custom']);
const ARGUMENTS_READ: ReadonlySet<string> = new Set(['arguments']);
const INPUT_READ: ReadonlySet<string> = new Set(['input']);
const NOTHING_READ: ReadonlySet<string> = new Set();
const PART_READ: ReadonlySet<string> = new Set([
  'type',
  'text',
  'refusal',
  'image_url',
  'input_audio',
  'file',
]);
const IMAGE_URL_READ: ReadonlySet<string> = new Set(['url']);
/** Audio and file contents are base64: scanning the encoding finds nothing it carries. */
const AUDIO_READ: ReadonlySet<string> = new Set(['data']);
const FILE_READ: ReadonlySet<string> = new Set(['file_data']);

interface PartLike {
  text?: unknown;
  refusal?: unknown;
  image_url?: { url?: unknown } | null;
  input_audio?: unknown;
  file?: unknown;
}

/** Whether `obj` has a member not in `read`. */
function hasUnread(obj: object, read: ReadonlySet<string>): boolean {
  for (const key in obj) if (!read.has(key)) return true;
  return false;
}

/** The members of `obj` not in `read`: their strings, and keys, as one `request` item each. */
function rest(obj: object, read: ReadonlySet<string>, path: string, out: TextItem[]): void {
  for (const key in obj) {
    if (read.has(key)) continue;
    const at = path === '' ? key : `${path}.${key}`;
    const text = joinedStrings((obj as Record<string, unknown>)[key], at);
    const all = text === '' ? key : `${key}\n${text}`;
    out.push({ message: -1, part: -1, text: all, field: 'request', key: at });
  }
}

function partRest(p: PartLike, path: string, out: TextItem[]): void {
  rest(p, PART_READ, path, out);
  const nested: [unknown, ReadonlySet<string>, string][] = [
    [p.image_url, IMAGE_URL_READ, 'image_url'],
    [p.input_audio, AUDIO_READ, 'input_audio'],
    [p.file, FILE_READ, 'file'],
  ];
  for (const [value, read, key] of nested) {
    if (value === undefined || value === null) continue;
    if (typeof value === 'object' && !Array.isArray(value)) rest(value, read, `${path}.${key}`, out);
    else {
      const text = joinedStrings(value, `${path}.${key}`);
      if (text !== '') out.push({ message: -1, part: -1, text, field: 'request', key: `${path}.${key}` });
    }
  }
  const url = p.image_url?.url;
  // A data: URL is base64 content, like audio; any other non-http(s) URL is text to scan.
  if (typeof url === 'string' && !/^(?:https?|data):/i.test(url))
    out.push({ message: -1, part: -1, text: url, field: 'request', key: `${path}.image_url.url` });
}

/**
 * Arguments with JSON escapes (`\u0041KIA…` spells `AKIA…`) are scanned decoded as well: a value
 * the raw text hides is still the value the tool, or an Anthropic upstream, receives. A finding
 * there cannot be redacted in the caller's text, so it is a `request` item (refused, not rewritten).
 */
function decodedArguments(args: string, path: string, out: TextItem[]): void {
  let parsed: unknown;
  try {
    parsed = JSON.parse(args);
  } catch {
    return; // not JSON: forwarded as the raw text already scanned
  }
  const text = joinedStrings(parsed, path);
  if (text !== '') out.push({ message: -1, part: -1, text, field: 'request', key: path });
}

/**
 * Top-level chat request fields whose strings are not scanned here: scanned on their own
 * (messages, tools, user), or checked by validation to hold no text (temperature a number, stream
 * and parallel_tool_calls booleans), or the model, which routes the call. Every other field is
 * forwarded as is to OpenAI-compatible providers, so its strings are scanned, enums included (an
 * unchecked `service_tier` can carry anything): prediction, response_format, stop, metadata,
 * tool_choice, legacy functions, ...
 */
const NO_FREE_TEXT = new Set([
  'model',
  'messages',
  'tools',
  'user',
  'temperature',
  'stream',
  'parallel_tool_calls',
]);

/**
 * Every text of a chat request that is forwarded and can carry data (docs/policy.md, "What is
 * scanned"): messageTexts, then each tool's description and the strings of its parameters (a
 * custom tool's grammar), the end-user id, and the strings of any other top-level field not in
 * NO_FREE_TEXT.
 */
export function requestTexts(request: RequestLike): TextItem[] {
  const out = messageTexts(request.messages);
  const tools = request.tools;
  if (Array.isArray(tools)) {
    for (let t = 0; t < tools.length; t++) {
      const tool = tools[t] as ToolLike | null;
      if (!tool || typeof tool !== 'object') continue;
      rest(tool, TOOL_READ, `tools[${t}]`, out);
      if (tool.type === 'custom') {
        customToolTexts(tool, t, out);
        if (tool.function) rest(tool.function, NOTHING_READ, `tools[${t}].function`, out);
        continue;
      }
      if (tool.custom) rest(tool.custom, NOTHING_READ, `tools[${t}].custom`, out);
      const fn = tool.function;
      if (!fn || typeof fn !== 'object') continue;
      const at = `tools[${t}].function`;
      if (typeof fn.description === 'string')
        out.push({ message: t, part: -1, text: fn.description, field: 'description' });
      if (fn.parameters !== undefined && fn.parameters !== null) {
        const text = joinedStrings(fn.parameters, `${at}.parameters`);
        if (text !== '') out.push({ message: t, part: -1, text, field: 'parameters' });
      }
      rest(fn, typeof fn.description === 'string' ? FUNCTION_READ : PARAMETERS_READ, at, out);
    }
  }
  if (typeof request.user === 'string')
    out.push({ message: -1, part: -1, text: request.user, field: 'user' });
  for (const key in request) {
    if (NO_FREE_TEXT.has(key)) continue;
    const text = joinedStrings(request[key], key);
    if (text !== '') out.push({ message: -1, part: -1, text, field: 'request', key });
  }
  return out;
}

/**
 * A custom tool's description, and its grammar. A grammar is a constraint the provider enforces
 * on the model's input, as a parameters schema is: a placeholder written into it would change
 * what it accepts (`[EMAIL]` is a character class in a regex), so it is a `request` item, refused
 * rather than rewritten.
 */
function customToolTexts(tool: ToolLike, t: number, out: TextItem[]): void {
  const custom = tool.custom;
  if (!custom || typeof custom !== 'object') return;
  const at = `tools[${t}].custom`;
  if (typeof custom.description === 'string')
    out.push({ message: t, part: -1, text: custom.description, field: 'description' });
  const format = custom.format;
  const definition = format?.grammar?.definition;
  if (typeof definition === 'string') {
    const key = `${at}.format.grammar.definition`;
    out.push({ message: -1, part: -1, text: definition, field: 'request', key });
  }
  rest(custom, typeof custom.description === 'string' ? CUSTOM_READ : FORMAT_READ, at, out);
  if (format && typeof format === 'object') {
    rest(format, GRAMMAR_READ, `${at}.format`, out);
    const grammar = format.grammar;
    if (grammar && typeof grammar === 'object')
      rest(
        grammar,
        typeof definition === 'string' ? DEFINITION_READ : NOTHING_READ,
        `${at}.format.grammar`,
        out,
      );
  }
}

const TOOL_READ: ReadonlySet<string> = new Set(['type', 'function', 'custom']);
const FUNCTION_READ: ReadonlySet<string> = new Set(['description', 'parameters']);
/** A description that is not a string is not read above: its strings are scanned with the rest. */
const PARAMETERS_READ: ReadonlySet<string> = new Set(['parameters']);
const CUSTOM_READ: ReadonlySet<string> = new Set(['description', 'format']);
const FORMAT_READ: ReadonlySet<string> = new Set(['format']);
const GRAMMAR_READ: ReadonlySet<string> = new Set(['grammar']);
const DEFINITION_READ: ReadonlySet<string> = new Set(['definition']);

/** Every non-empty string of a JSON value (see `stringsIn`), joined by newlines. */
export function joinedStrings(value: unknown, path: string): string {
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object') return stringsIn(value, path).join('\n');
  let out = '';
  for (const v of stringsIn(value, path)) if (v !== '') out = out === '' ? v : `${out}\n${v}`;
  return out;
}

/** Embedding request members read on their own, or that carry no text (`dimensions` is checked). */
const EMBEDDING_READ: ReadonlySet<string> = new Set(['model', 'input', 'user', 'dimensions']);

/**
 * The texts of an embedding request: its string inputs, `user` (redacted in place), and the
 * strings of every other member (`encoding_format`, members govgate does not know), which are
 * forwarded as they are and so scanned as `request` items.
 */
export function embeddingTexts(request: Record<string, unknown>, inputs: readonly string[]): TextItem[] {
  const out: TextItem[] = inputs.map((text, i) => ({ message: i, part: -1, text }));
  if (typeof request.user === 'string')
    out.push({ message: -1, part: -1, text: request.user, field: 'user' });
  rest(request, EMBEDDING_READ, '', out);
  return out;
}

/** What redactRequest did. */
export interface Redaction {
  /** Number of texts rewritten. */
  readonly changed: number;
  /**
   * A finding to redact that sits where no text can be rewritten in place (a tool's parameters,
   * another top-level field): where, and its category. The call must then be refused.
   */
  readonly stuck: { readonly path: string; readonly category: DetectionCategory } | null;
}

/**
 * Rewrites the request's texts in place (the locations ScannedText records), replacing findings
 * of `categories` with placeholders.
 */
export function redactRequest(
  request: { messages: MessageLike[]; tools?: unknown; user?: unknown },
  scan: ContentScan,
  categories: readonly DetectionCategory[],
): Redaction {
  let changed = 0;
  let stuck: Redaction['stuck'] = null;
  for (const t of scan.texts) {
    const finding = t.findings.find((f) => categories.includes(f.category));
    if (!finding) continue;
    if (t.field === 'parameters' || t.field === 'request') {
      stuck ??= {
        path: t.field === 'parameters' ? `tools[${t.message}].function.parameters` : (t.key ?? 'request'),
        category: finding.category,
      };
      continue;
    }
    const next = redact(t.text, t.findings, categories);
    if (next === t.text) continue;
    changed++;
    if (t.field === 'user') {
      request.user = next;
      continue;
    }
    if (t.field === 'description') {
      const tool = (request.tools as ToolLike[] | undefined)?.[t.message];
      const holder = tool?.type === 'custom' ? tool.custom : tool?.function;
      if (holder) holder.description = next;
      continue;
    }
    const m = request.messages[t.message];
    if (!m) continue;
    if (t.field === 'custom_input') {
      const call = (m.tool_calls as { custom?: { input: string } }[])[t.part]?.custom;
      if (call) call.input = next;
    } else if (t.field === 'arguments') {
      const call =
        t.part < 0
          ? (m.function_call as { arguments: string })
          : (m.tool_calls as { function: { arguments: string } }[])[t.part]?.function;
      if (call) call.arguments = next;
    } else if (t.field === 'refusal') {
      if (t.part < 0) m.refusal = next;
      else if (Array.isArray(m.content)) m.content[t.part] = { ...m.content[t.part], refusal: next };
    } else if (t.part < 0) m.content = next;
    else if (Array.isArray(m.content)) {
      const part = m.content[t.part] as Record<string, unknown>;
      m.content[t.part] = { ...part, text: next };
    }
  }
  return { changed, stuck };
}

/** Nesting a governed value may have (JCS stops at 512; real arguments stay far below). */
export const MAX_VALUE_DEPTH = 64;

/**
 * Every string in a JSON value, object keys included (a key is forwarded as much as a value), for
 * the detectors (all of them: a cap would let a secret hide behind enough harmless strings), once
 * the value is checked to be something the audit trail can
 * carry: finite numbers only (JSON.parse reads 1e400 as Infinity, which canonical JSON refuses)
 * and at most MAX_VALUE_DEPTH levels. Otherwise a 400 naming `param`.
 */
export function stringsIn(value: unknown, param: string): string[] {
  const out: string[] = [];
  // Keys are scanned as one text after the values: each string of the result is its own detector
  // pass for some callers (/v1/govern's payload), and names are many and short.
  let keys = '';
  const walk = (v: unknown, depth: number): void => {
    if (typeof v === 'string') out.push(v);
    else if (typeof v === 'number') {
      if (!Number.isFinite(v))
        throw new ServiceError('invalid_request', `${param} holds a number JSON cannot carry`, { param });
    } else if (v !== null && typeof v === 'object') {
      if (depth >= MAX_VALUE_DEPTH)
        throw new ServiceError(
          'invalid_request',
          `${param} is nested deeper than ${MAX_VALUE_DEPTH} levels`,
          {
            param,
          },
        );
      if (Array.isArray(v)) for (const x of v) walk(x, depth + 1);
      else
        for (const k in v) {
          keys = keys === '' ? k : `${keys}\n${k}`;
          walk((v as Record<string, unknown>)[k], depth + 1);
        }
    }
  };
  walk(value, 0);
  if (keys !== '') out.push(keys);
  return out;
}
