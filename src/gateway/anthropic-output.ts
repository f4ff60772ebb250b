// Output governance for an Anthropic answer passed to an Anthropic client as the provider gave it
// (the forwarded path, providers/wire/anthropic-forward.ts): the same guard as the canonical path
// (output-stream.ts), over Anthropic's content blocks. What goes out is rebuilt from the fields
// the Messages API documents, so nothing the guard did not look at reaches the agent.
//
// - text: the answer's text blocks are scanned as one text (a value split across two is found)
//   and redacted within each; streamed, through a StreamGuard window seeded with the end of the
//   previous text block (a value split across blocks blocks, its first part being out already);
// - tool_use input: scanned as its decoded JSON text, held whole when streamed, and rewritten with
//   the redacted text parsed back (a redaction that breaks the JSON, or merges two keys, blocks);
// - thinking: its signature seals the text, so a finding that would be redacted blocks instead;
// - redacted_thinking: opaque, passed on;
// - any other block (the forwarded request asks for none): held, scanned as the SDK would
//   assemble it, passed on only when nothing in it would be redacted or blocked.

import type { Finding } from '../core/detect/index.js';
import { ServiceError } from '../core/errors.js';
import {
  cachedGuard,
  decodedJson,
  type GuardStep,
  guardJoined,
  guardText,
  type OutputGuard,
  type Prescans,
  redactedJson,
  StreamGuard,
} from '../core/guardrails/index.js';
import { OFFLOAD_CHARS, type ScanPool } from '../govern/scan-pool.js';
import type {
  AnthropicContentBlock,
  AnthropicMessage,
  AnthropicStreamEvent,
} from '../providers/wire/index.js';
import { large, type StreamBlock } from './output-stream.js';

type Note = (findings: readonly Finding[]) => void;
type Json = Record<string, unknown>;

/** The finding that blocks a text that may not be rewritten: any to block or to redact. */
function sealedCheck(guard: OutputGuard, text: string, note: Note): Finding | undefined {
  const r = guardText(guard, text);
  note(r.findings);
  if (r.kind === 'block') return r.finding;
  if (r.text === text) return undefined;
  return r.findings.find((f) => guard.classify(f) === 'redact');
}

/** A tool input's JSON text guarded: the JSON to send, or the finding that blocks. */
function guardedInput(guard: OutputGuard, raw: string, note: Note): { input: string } | { block: Finding } {
  const json = decodedJson(raw);
  const r = guardText(guard, json);
  note(r.findings);
  if (r.kind === 'block') return { block: r.finding };
  if (r.text === json) return { input: json };
  if (redactedJson(json, r.text) === undefined)
    return { block: r.findings.find((x) => guard.classify(x) === 'redact') as Finding };
  return { input: r.text };
}

/** `usage` with its counts only. */
function counts(usage: unknown): Json {
  const out: Json = {};
  if (usage === null || typeof usage !== 'object') return out;
  for (const [k, v] of Object.entries(usage)) if (typeof v === 'number') out[k] = v;
  return out;
}

/** The message's documented members, `content` given (unknown members are not passed on). */
function messageShell(message: AnthropicMessage, content: unknown[]): AnthropicMessage {
  return {
    id: message.id,
    type: 'message',
    role: 'assistant',
    model: message.model,
    content: content as AnthropicContentBlock[],
    stop_reason: message.stop_reason,
    stop_sequence: message.stop_sequence,
    usage: counts(message.usage) as unknown as AnthropicMessage['usage'],
  };
}

/**
 * Guards a whole Anthropic answer; returns the message to send (rebuilt from its documented
 * members) or the finding that blocks it. `types` collects the PII types seen (for the audit).
 */
export function guardAnthropicMessage(
  guard: OutputGuard,
  message: AnthropicMessage,
  types: Set<string>,
): { message: AnthropicMessage } | { blocked: StreamBlock } {
  const note: Note = (findings) => {
    for (const f of findings) if (f.category === 'pii') types.add(f.type);
  };
  const blocks = message.content as unknown as Json[];
  const texts: string[] = [];
  for (const b of blocks) if (b.type === 'text') texts.push(typeof b.text === 'string' ? b.text : '');
  const joined = guardJoined(guard, texts);
  note(joined.findings);
  if (joined.kind === 'block') return { blocked: { finding: joined.finding, where: 'content' } };
  const out: Json[] = [];
  let t = 0;
  for (const b of blocks) {
    switch (b.type) {
      case 'text': {
        const block: Json = { type: 'text', text: joined.texts[t++] };
        if (Array.isArray(b.citations)) {
          const f = sealedCheck(guard, JSON.stringify(b.citations), note);
          if (f) return { blocked: { finding: f, where: 'content' } };
          block.citations = b.citations;
        }
        out.push(block);
        break;
      }
      case 'tool_use': {
        const r = guardedInput(guard, JSON.stringify(b.input ?? {}), note);
        if ('block' in r) return { blocked: { finding: r.block, where: 'tool_call' } };
        out.push({ type: 'tool_use', id: b.id, name: b.name, input: JSON.parse(r.input) });
        break;
      }
      case 'thinking': {
        const f = sealedCheck(guard, typeof b.thinking === 'string' ? b.thinking : '', note);
        if (f) return { blocked: { finding: f, where: 'thinking' } };
        out.push({ type: 'thinking', thinking: b.thinking, signature: b.signature });
        break;
      }
      case 'redacted_thinking':
        out.push({ type: 'redacted_thinking', data: b.data });
        break;
      default: {
        const f = sealedCheck(guard, JSON.stringify(b), note);
        if (f) return { blocked: { finding: f, where: 'content' } };
        out.push(b);
      }
    }
  }
  return { message: messageShell(message, out) };
}

/** The block being streamed, while it is held or windowed. */
type Open =
  | { readonly kind: 'text'; readonly index: number; readonly window: StreamGuard; started: boolean }
  | {
      readonly kind: 'tool_use' | 'thinking' | 'other';
      readonly index: number;
      readonly start: Json;
      /** The tool input came in the start (deltas may not add to it). */
      readonly seeded: boolean;
      json: string;
      thinking: string;
      signature: string;
      readonly held: AnthropicStreamEvent[];
    };

const upstream = (what: string): ServiceError =>
  new ServiceError('upstream_error', `provider anthropic sent ${what}`);

/**
 * Governs an Anthropic event stream: text deltas pass through a StreamGuard window; a tool_use,
 * thinking or unknown block is held from its start to its stop and released whole once scanned.
 * Blocks are streamed one at a time, so one block is open at most. Events are rebuilt from their
 * documented members and unknown events dropped: no unscanned byte is emitted. After a block,
 * `blocked` is set and nothing more is emitted.
 */
export class AnthropicStreamGovernor {
  blocked: StreamBlock | undefined;
  /** Content blocks started on the way out (the index a block's explanation goes to). */
  nextIndex = 0;
  /** A text block that was started on the way out and not yet stopped. */
  openText: number | undefined;
  private open: Open | undefined;
  /** The end of the last text block, to seed the next one's window with. */
  private carry = '';
  /** The types of the PII found in the answer (redacted, unless `blocked`), for the audit trail. */
  readonly pii = new Set<string>();
  private readonly note: Note = (findings) => {
    for (const f of findings) if (f.category === 'pii') this.pii.add(f.type);
  };

  /** Large texts scanned in the worker, for `guard` to answer from (see `prescan`). */
  private readonly prescans: Prescans = { cache: new Map(), offloading: false };
  private readonly guard: OutputGuard;

  constructor(guard: OutputGuard) {
    this.guard = cachedGuard(guard, this.prescans, OFFLOAD_CHARS);
  }

  /**
   * Before `push(event)`: the texts of at least OFFLOAD_CHARS it will scan are scanned in
   * `scans`' worker first, and a large text it did not foresee fails the answer (as
   * OutputStreamGovernor.prescan; `end()` scans nothing).
   */
  prescan(event: AnthropicStreamEvent | undefined, scans: ScanPool): Promise<void> | undefined {
    this.prescans.offloading = true;
    if (this.blocked || event === undefined) return undefined;
    const texts = this.largeTexts(event);
    if (texts === undefined) return undefined;
    const cache = this.prescans.cache;
    return scans.detectAll(texts, this.guard.detectOptions).then((results) => {
      for (let i = 0; i < texts.length; i++) cache.set(texts[i] as string, results[i] as Finding[]);
    });
  }

  /** The texts `push(event)` scans whole or as a window, when they may be large. */
  private largeTexts(event: AnthropicStreamEvent): string[] | undefined {
    const open = this.open;
    switch (event.type) {
      case 'content_block_start': {
        const block = event.content_block as unknown as Json;
        if (block.type !== 'text') return undefined;
        let out = large(undefined, extrasText(block));
        if (typeof block.text === 'string' && block.text !== '') {
          const window = new StreamGuard(this.guard);
          window.seed(this.carry);
          out = large(out, window.peek(block.text, OFFLOAD_CHARS));
        }
        return out;
      }
      case 'content_block_delta': {
        const d = event.delta;
        if (open?.kind !== 'text') return undefined;
        if (d.type === 'text_delta' && typeof d.text === 'string')
          return large(undefined, open.window.peek(d.text, OFFLOAD_CHARS));
        if (d.type === 'citations_delta') return large(undefined, JSON.stringify(d.citation));
        return undefined;
      }
      case 'content_block_stop':
        if (open === undefined || open.index !== event.index) return undefined;
        switch (open.kind) {
          case 'text':
            return large(undefined, open.window.peekEnd(OFFLOAD_CHARS));
          case 'tool_use': {
            // Decoding escapes can lengthen JSON (`1E20` is written out): decoded to see from an eighth on.
            const json = open.json === '' ? '{}' : open.json;
            return json.length < OFFLOAD_CHARS / 8 ? undefined : large(undefined, decodedJson(json));
          }
          case 'thinking':
            return large(undefined, open.thinking);
          default:
            try {
              return large(undefined, assembledText(open));
            } catch {
              return undefined; // the stop fails on it
            }
        }
      default:
        return undefined;
    }
  }

  push(event: AnthropicStreamEvent): AnthropicStreamEvent[] {
    try {
      return this.pushEvent(event);
    } finally {
      // Scanned for this push only: a text it did not take must not stay in memory.
      if (this.prescans.cache.size > 0) this.prescans.cache.clear();
    }
  }

  private pushEvent(event: AnthropicStreamEvent): AnthropicStreamEvent[] {
    if (this.blocked) return [];
    switch (event.type) {
      case 'content_block_start':
        return this.start(event);
      case 'content_block_delta':
        return this.delta(event);
      case 'content_block_stop':
        return this.stop(event);
      case 'message_start': {
        const m = event.message;
        if (Array.isArray(m?.content) && m.content.length > 0) throw upstream('content in message_start');
        return [{ type: 'message_start', message: messageShell(m, []) }];
      }
      case 'message_delta':
        return [
          {
            type: 'message_delta',
            delta: {
              stop_reason: event.delta?.stop_reason ?? null,
              stop_sequence: event.delta?.stop_sequence ?? null,
            },
            usage: counts(event.usage) as { output_tokens: number },
          },
        ];
      case 'message_stop':
      case 'ping':
        return [{ type: event.type }];
      default:
        return []; // an event the API does not document: not passed on unseen
    }
  }

  /** The upstream ended: a block left open was never finished, so its held part cannot go out. */
  end(): AnthropicStreamEvent[] {
    if (this.open && !this.blocked) throw upstream('no end to a content block');
    return [];
  }

  private start(event: AnthropicStreamEvent & { type: 'content_block_start' }): AnthropicStreamEvent[] {
    if (this.open) throw upstream('a content block inside another');
    const block = event.content_block as unknown as Json;
    const index = event.index;
    if (block.type === 'redacted_thinking') {
      this.nextIndex = index + 1;
      return [
        {
          type: 'content_block_start',
          index,
          content_block: { type: 'redacted_thinking', data: block.data } as AnthropicContentBlock,
        },
      ];
    }
    if (block.type === 'text') {
      const first = block.text;
      const extras = extrasText(block);
      if (extras !== undefined) {
        const f = sealedCheck(this.guard, extras, this.note);
        if (f) {
          this.blocked = { finding: f, where: 'content' };
          return [];
        }
      }
      const window = new StreamGuard(this.guard, { pii: this.pii });
      window.seed(this.carry);
      const open: Open = { kind: 'text', index, window, started: false };
      this.open = open;
      // The start goes out with the first released text (or the stop): a block found in the
      // text the start carries leaves nothing to close.
      const out: AnthropicStreamEvent[] = [];
      if (typeof first === 'string' && first !== '') this.release(window.push(first), open, out);
      return this.blocked ? [] : out;
    }
    const kind = block.type === 'tool_use' ? 'tool_use' : block.type === 'thinking' ? 'thinking' : 'other';
    const input = block.input;
    // A tool_use start normally holds `{}` and the input follows in deltas; one that holds it
    // already is scanned as such.
    const seeded =
      kind === 'tool_use' && input !== null && typeof input === 'object' && Object.keys(input).length > 0;
    this.open = {
      kind,
      index,
      start: block,
      seeded,
      json: seeded ? JSON.stringify(input) : '',
      thinking: typeof block.thinking === 'string' ? block.thinking : '',
      signature: typeof block.signature === 'string' ? block.signature : '',
      held: [],
    };
    return [];
  }

  private delta(event: AnthropicStreamEvent & { type: 'content_block_delta' }): AnthropicStreamEvent[] {
    const open = this.open;
    const d = event.delta;
    if (!open || open.index !== event.index) throw upstream(`${event.type} out of order`);
    if (open.kind === 'text') {
      const out: AnthropicStreamEvent[] = [];
      if (d.type === 'text_delta')
        this.release(open.window.push(typeof d.text === 'string' ? d.text : ''), open, out);
      else if (d.type === 'citations_delta') {
        const f = sealedCheck(this.guard, JSON.stringify(d.citation), this.note);
        if (f) this.blocked = { finding: f, where: 'content' };
        else {
          this.begin(open, out);
          out.push({
            type: 'content_block_delta',
            index: open.index,
            delta: { type: 'citations_delta', citation: d.citation },
          });
        }
      } else throw upstream(`${d.type} in a text block`);
      return this.blocked ? [] : out;
    }
    if (d.type === 'input_json_delta' && (open.kind === 'tool_use' || open.kind === 'other')) {
      if (open.seeded) throw upstream('tool input both in its start and in deltas');
      open.json += d.partial_json;
      open.held.push(event);
    } else if (d.type === 'thinking_delta' && open.kind === 'thinking') open.thinking += d.thinking;
    else if (d.type === 'signature_delta' && open.kind === 'thinking') open.signature += d.signature;
    else if (open.kind === 'other') open.held.push(event);
    else throw upstream(`${d.type} in a ${open.kind} block`);
    return [];
  }

  private stop(event: AnthropicStreamEvent & { type: 'content_block_stop' }): AnthropicStreamEvent[] {
    const open = this.open;
    if (!open) {
      // redacted_thinking: started on the way out with nothing held
      if (event.index !== this.nextIndex - 1) throw upstream('content_block_stop out of order');
      return [{ type: 'content_block_stop', index: event.index }];
    }
    if (open.index !== event.index) throw upstream('content_block_stop out of order');
    this.open = undefined;
    const index = open.index;
    const out: AnthropicStreamEvent[] = [];
    if (open.kind === 'text') {
      this.release(open.window.end(), open, out);
      if (this.blocked) return [];
      this.begin(open, out);
      this.carry = open.window.carry();
      this.openText = undefined;
    } else if (open.kind === 'tool_use') {
      const r = guardedInput(this.guard, open.json === '' ? '{}' : open.json, this.note);
      if ('block' in r) {
        this.blocked = { finding: r.block, where: 'tool_call' };
        return [];
      }
      try {
        JSON.parse(r.input);
      } catch {
        throw upstream('tool input that is not JSON');
      }
      out.push({
        type: 'content_block_start',
        index,
        content_block: {
          type: 'tool_use',
          id: open.start.id,
          name: open.start.name,
          input: {},
        } as AnthropicContentBlock,
      });
      if (open.json !== '')
        out.push({
          type: 'content_block_delta',
          index,
          delta: { type: 'input_json_delta', partial_json: r.input },
        });
    } else if (open.kind === 'thinking') {
      const f = sealedCheck(this.guard, open.thinking, this.note);
      if (f) {
        this.blocked = { finding: f, where: 'thinking' };
        return [];
      }
      out.push({
        type: 'content_block_start',
        index,
        content_block: { type: 'thinking', thinking: '', signature: '' } as AnthropicContentBlock,
      });
      if (open.thinking !== '')
        out.push({
          type: 'content_block_delta',
          index,
          delta: { type: 'thinking_delta', thinking: open.thinking },
        });
      if (open.signature !== '')
        out.push({
          type: 'content_block_delta',
          index,
          delta: { type: 'signature_delta', signature: open.signature },
        });
    } else {
      const f = sealedCheck(this.guard, assembledText(open), this.note);
      if (f) {
        this.blocked = { finding: f, where: 'content' };
        return [];
      }
      out.push(
        { type: 'content_block_start', index, content_block: open.start as unknown as AnthropicContentBlock },
        ...open.held,
      );
    }
    this.nextIndex = index + 1;
    out.push({ type: 'content_block_stop', index });
    return out;
  }

  /** The text block's start, once, before the first thing it carries. */
  private begin(open: Open & { kind: 'text' }, out: AnthropicStreamEvent[]): void {
    if (open.started) return;
    open.started = true;
    this.openText = open.index;
    this.nextIndex = open.index + 1;
    out.push({ type: 'content_block_start', index: open.index, content_block: { type: 'text', text: '' } });
  }

  /** A window step's text as a text delta of the open block, or the block it found. */
  private release(step: GuardStep, open: Open & { kind: 'text' }, out: AnthropicStreamEvent[]): void {
    if (step.kind === 'block') {
      this.blocked = { finding: step.finding, where: 'content' };
      return;
    }
    if (step.text === '') return;
    this.begin(open, out);
    out.push({
      type: 'content_block_delta',
      index: open.index,
      delta: { type: 'text_delta', text: step.text },
    });
  }
}

/**
 * A block of another kind as the SDK assembles it (its start, with the JSON of its input deltas
 * parsed in), and its held deltas: the text its stop scans.
 */
function assembledText(open: Open & { kind: 'tool_use' | 'thinking' | 'other' }): string {
  const assembled: Json = { ...open.start };
  if (open.json !== '') {
    try {
      assembled.input = JSON.parse(open.json);
    } catch {
      throw upstream('block input that is not JSON');
    }
  }
  return JSON.stringify([assembled, ...open.held]);
}

/** What a text block's start carries besides its text (citations), as scanned; undefined if nothing. */
function extrasText(block: Json): string | undefined {
  const { text: _text, ...rest } = block;
  for (const k of Object.keys(rest))
    if (k !== 'type' && rest[k] !== undefined && rest[k] !== null) return JSON.stringify(rest);
  return undefined;
}
