// Output governance for an Anthropic answer passed to an Anthropic client as the provider gave it
// (the forwarded path, providers/wire/anthropic-forward.ts): the same guard as the canonical path
// (output-stream.ts), over Anthropic's content blocks.
//
// - text: scanned and redacted (streamed text through a StreamGuard window);
// - tool_use input: scanned as its JSON text, held whole when streamed, and rewritten with the
//   redacted text parsed back (a redaction that breaks the JSON blocks instead);
// - thinking: its signature seals the text, so a finding that would be redacted blocks instead;
// - redacted_thinking: opaque, passed on;
// - any other block (the forwarded request asks for none): held, scanned as its JSON, passed on
//   only when nothing in it would be redacted or blocked.

import type { Finding } from '../core/detect/index.js';
import { ServiceError } from '../core/errors.js';
import { type GuardStep, guardText, type OutputGuard, StreamGuard } from '../core/guardrails/index.js';
import type {
  AnthropicContentBlock,
  AnthropicMessage,
  AnthropicStreamEvent,
} from '../providers/wire/index.js';
import type { StreamBlock } from './output-stream.js';

type Note = (findings: readonly Finding[]) => void;

/** The guarded text, or the finding that blocks (also for a text that may not be rewritten). */
function sealedCheck(guard: OutputGuard, text: string, note: Note): Finding | undefined {
  const r = guardText(guard, text);
  note(r.findings);
  if (r.kind === 'block') return r.finding;
  if (r.text === text) return undefined;
  return r.findings.find((f) => guard.classify(f) === 'redact');
}

/** A tool input's JSON text guarded: the input to send, or the finding that blocks. */
function guardedInput(guard: OutputGuard, json: string, note: Note): { input: string } | { block: Finding } {
  const r = guardText(guard, json);
  note(r.findings);
  if (r.kind === 'block') return { block: r.finding };
  if (r.text === json) return { input: json };
  try {
    JSON.parse(r.text);
  } catch {
    const f = r.findings.find((x) => guard.classify(x) === 'redact') as Finding;
    return { block: f };
  }
  return { input: r.text };
}

/**
 * Scans a whole Anthropic answer in place; returns the blocking finding, if any. `types` collects
 * the PII types seen (for the audit trail).
 */
export function guardAnthropicMessage(
  guard: OutputGuard,
  message: AnthropicMessage,
  types: Set<string>,
): StreamBlock | undefined {
  const note: Note = (findings) => {
    for (const f of findings) if (f.category === 'pii') types.add(f.type);
  };
  for (const block of message.content as (AnthropicContentBlock | { type: string })[]) {
    const b = block as Record<string, unknown>;
    switch (b.type) {
      case 'text': {
        const r = guardText(guard, b.text as string);
        note(r.findings);
        if (r.kind === 'block') return { finding: r.finding, where: 'content' };
        b.text = r.text;
        if (Array.isArray(b.citations)) {
          const f = sealedCheck(guard, JSON.stringify(b.citations), note);
          if (f) return { finding: f, where: 'content' };
        }
        break;
      }
      case 'tool_use': {
        const json = JSON.stringify(b.input ?? {});
        const r = guardedInput(guard, json, note);
        if ('block' in r) return { finding: r.block, where: 'tool_call' };
        if (r.input !== json) b.input = JSON.parse(r.input);
        break;
      }
      case 'thinking': {
        const f = sealedCheck(guard, typeof b.thinking === 'string' ? b.thinking : '', note);
        if (f) return { finding: f, where: 'thinking' };
        break;
      }
      case 'redacted_thinking':
        break;
      default: {
        const f = sealedCheck(guard, JSON.stringify(b), note);
        if (f) return { finding: f, where: 'content' };
      }
    }
  }
  return undefined;
}

/** The block being streamed, while it is held or windowed. */
type Open =
  | { readonly kind: 'text'; readonly index: number; readonly window: StreamGuard }
  | {
      readonly kind: 'tool_use' | 'thinking' | 'other';
      readonly index: number;
      readonly start: AnthropicStreamEvent & { type: 'content_block_start' };
      json: string;
      thinking: string;
      signature: string;
      readonly held: AnthropicStreamEvent[];
    };

/**
 * Governs an Anthropic event stream: text deltas pass through a StreamGuard window; a tool_use,
 * thinking or unknown block is held from its start to its stop and released whole once scanned.
 * Blocks are streamed one at a time, so one block is open at most. No unscanned byte is emitted;
 * after a block, `blocked` is set and nothing more is emitted.
 */
export class AnthropicStreamGovernor {
  blocked: StreamBlock | undefined;
  /** The index after the last block started on the way out (where a block's explanation goes). */
  nextIndex = 0;
  /** A text block was started and not yet stopped (it must be closed before an explanation). */
  openText: number | undefined;
  private open: Open | undefined;
  private readonly note: Note = () => {};

  constructor(private readonly guard: OutputGuard) {}

  push(event: AnthropicStreamEvent): AnthropicStreamEvent[] {
    if (this.blocked) return [];
    switch (event.type) {
      case 'content_block_start':
        return this.start(event);
      case 'content_block_delta':
        return this.delta(event);
      case 'content_block_stop':
        return this.stop(event);
      default:
        return [event];
    }
  }

  /** The upstream ended: a block left open was never finished, so its held part cannot go out. */
  end(): AnthropicStreamEvent[] {
    if (this.open && !this.blocked)
      throw new ServiceError('upstream_error', 'provider anthropic ended its stream inside a content block');
    return [];
  }

  private start(event: AnthropicStreamEvent & { type: 'content_block_start' }): AnthropicStreamEvent[] {
    const block = event.content_block as { type: string; text?: unknown; thinking?: unknown };
    if (block.type === 'redacted_thinking') {
      this.nextIndex = event.index + 1;
      return [event];
    }
    if (block.type === 'text') {
      this.nextIndex = event.index + 1;
      const window = new StreamGuard(this.guard);
      this.open = { kind: 'text', index: event.index, window };
      this.openText = event.index;
      const first = typeof block.text === 'string' ? block.text : '';
      const out: AnthropicStreamEvent[] = [
        {
          type: 'content_block_start',
          index: event.index,
          content_block: { ...event.content_block, text: '' } as AnthropicContentBlock,
        },
      ];
      if (first !== '') this.release(window.push(first), event.index, out);
      return this.blocked ? [] : out;
    }
    const kind = block.type === 'tool_use' ? 'tool_use' : block.type === 'thinking' ? 'thinking' : 'other';
    this.open = {
      kind,
      index: event.index,
      start: event,
      json: '',
      thinking: typeof block.thinking === 'string' ? block.thinking : '',
      signature: '',
      held: [],
    };
    return [];
  }

  private delta(event: AnthropicStreamEvent & { type: 'content_block_delta' }): AnthropicStreamEvent[] {
    const open = this.open;
    const d = event.delta;
    if (!open || open.index !== event.index) return this.unexpected(event);
    if (open.kind === 'text') {
      const out: AnthropicStreamEvent[] = [];
      if (d.type === 'text_delta') this.release(open.window.push(d.text), open.index, out);
      else if (d.type === 'citations_delta') {
        const f = sealedCheck(this.guard, JSON.stringify(d.citation), this.note);
        if (f) this.blocked = { finding: f, where: 'content' };
        else out.push(event);
      } else return this.unexpected(event);
      return this.blocked ? [] : out;
    }
    if (d.type === 'input_json_delta' && open.kind === 'tool_use') open.json += d.partial_json;
    else if (d.type === 'thinking_delta' && open.kind === 'thinking') open.thinking += d.thinking;
    else if (d.type === 'signature_delta' && open.kind === 'thinking') open.signature += d.signature;
    else if (open.kind === 'other') open.held.push(event);
    else return this.unexpected(event);
    return [];
  }

  private stop(event: AnthropicStreamEvent & { type: 'content_block_stop' }): AnthropicStreamEvent[] {
    const open = this.open;
    if (!open) return [event]; // redacted_thinking
    if (open.index !== event.index) return this.unexpected(event);
    this.open = undefined;
    const index = open.index;
    const out: AnthropicStreamEvent[] = [];
    if (open.kind === 'text') {
      this.release(open.window.end(), index, out);
      this.openText = undefined;
    } else if (open.kind === 'tool_use') {
      out.push(open.start);
      if (open.json !== '') {
        const r = guardedInput(this.guard, open.json, this.note);
        if ('block' in r) this.blocked = { finding: r.block, where: 'tool_call' };
        else
          out.push({
            type: 'content_block_delta',
            index,
            delta: { type: 'input_json_delta', partial_json: r.input },
          });
      }
    } else if (open.kind === 'thinking') {
      const f = sealedCheck(this.guard, open.thinking, this.note);
      if (f) this.blocked = { finding: f, where: 'thinking' };
      out.push({
        type: 'content_block_start',
        index,
        content_block: { ...(open.start.content_block as object), thinking: '' } as AnthropicContentBlock,
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
      const f = sealedCheck(this.guard, JSON.stringify([open.start, ...open.held]), this.note);
      if (f) this.blocked = { finding: f, where: 'content' };
      out.push(open.start, ...open.held);
    }
    if (this.blocked) return [];
    this.nextIndex = index + 1;
    out.push(event);
    return out;
  }

  /** A window step's text as a text delta of the open block, or the block it found. */
  private release(step: GuardStep, index: number, out: AnthropicStreamEvent[]): void {
    if (step.kind === 'block') {
      this.blocked = { finding: step.finding, where: 'content' };
      return;
    }
    if (step.text !== '')
      out.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: step.text } });
  }

  /** An event the stream's grammar does not allow here: the provider's answer cannot be governed. */
  private unexpected(event: AnthropicStreamEvent): never {
    throw new ServiceError('upstream_error', `provider anthropic sent ${event.type} out of order`);
  }
}
