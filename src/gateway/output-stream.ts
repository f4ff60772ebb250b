import type { Finding } from '../core/detect/index.js';
import { ServiceError } from '../core/errors.js';
import {
  cachedGuard,
  decodedJson,
  guardText,
  type OutputGuard,
  type Prescans,
  StreamGuard,
} from '../core/guardrails/index.js';
import { OFFLOAD_CHARS, type ScanPool } from '../govern/scan-pool.js';
import {
  ANTHROPIC_STOP,
  type AnthropicStop,
  type ChatCompletionChunk,
  type ChatCompletionChunkChoice,
  type ChatCompletionChunkDelta,
  type OpenaiFinishReason,
  type OpenaiToolCallDelta,
} from '../providers/wire/index.js';

export interface StreamBlock {
  readonly finding: Finding;
  readonly where: 'content' | 'refusal' | 'tool_call' | 'thinking';
}

/**
 * One tool call of a choice, as held until the choice finishes: a function call's arguments, or
 * (`custom`) a custom tool call's input, in `args`.
 */
interface HeldTool {
  id?: string;
  name?: string;
  custom?: true;
  args: string;
}

/**
 * What is held of one choice of the answer: its text window, its refusal's (made when a refusal
 * delta first arrives) and its tool-call fragments.
 */
interface ChoiceHold {
  readonly text: StreamGuard;
  refusal: StreamGuard | undefined;
  readonly tools: Map<number, HeldTool>;
  /** A legacy `function_call` (a request with `functions`), held like a tool call. */
  legacy?: { name: string; args: string };
  finished: boolean;
}

/**
 * Governs a canonical chunk stream: content and refusal deltas pass through a StreamGuard each
 * (held, scanned, redacted) and tool-call deltas (function arguments, custom tool input) are held
 * until the model finishes, then scanned whole. Each choice (`n` > 1) has its own windows and
 * tool buffer, and its chunks keep its index. No unscanned byte is emitted. After a block in any
 * choice, `blocked` is set and nothing more is emitted.
 */
export class OutputStreamGovernor {
  blocked: StreamBlock | undefined;
  /** The types of the PII found in the answer (redacted, unless `blocked`), for the audit trail. */
  readonly pii = new Set<string>();
  /** Choice 0, the only one unless the request asked for `n` > 1. */
  private readonly first: ChoiceHold;
  /** The other choices, by index, made when their first chunk arrives. */
  private others: Map<number, ChoiceHold> | undefined;
  private last: ChatCompletionChunk | undefined;
  /** Large texts scanned in the worker, for `guard` to answer from (see `prescan`). */
  private readonly prescans: Prescans = { cache: new Map(), offloading: false };
  private readonly guard: OutputGuard;

  constructor(guard: OutputGuard) {
    this.guard = cachedGuard(guard, this.prescans, OFFLOAD_CHARS);
    this.first = { text: this.window(), refusal: undefined, tools: new Map(), finished: false };
  }

  /**
   * Before `push(chunk)` (or `end()`, for undefined): the texts of at least OFFLOAD_CHARS it will
   * scan are scanned in `scans`' worker, so one large event does not hold the event loop (and
   * every other call) for its scan. Undefined when there are none: the usual case costs a few
   * length checks. From the first call on, a large text the push did not have scanned first fails
   * the answer instead of being scanned inline (cachedGuard), and what was scanned for one push
   * is dropped after it. A worker that fails rejects: the stream fails closed.
   */
  prescan(chunk: ChatCompletionChunk | undefined, scans: ScanPool): Promise<void> | undefined {
    this.prescans.offloading = true;
    if (this.blocked) return undefined;
    const texts = chunk === undefined ? this.endTexts() : this.pushTexts(chunk);
    if (texts === undefined) return undefined;
    const cache = this.prescans.cache;
    return scans.detectAll(texts, this.guard.detectOptions).then((results) => {
      for (let i = 0; i < texts.length; i++) cache.set(texts[i] as string, results[i] as Finding[]);
    });
  }

  private pushTexts(chunk: ChatCompletionChunk): string[] | undefined {
    let out: string[] | undefined;
    for (const choice of chunk.choices) {
      const hold = choice.index === 0 ? this.first : this.others?.get(choice.index);
      const delta = choice.delta;
      const text = hold?.text ?? this.window();
      const content = typeof delta.content === 'string' ? delta.content : '';
      if (content.length > 0) out = large(out, text.peek(content, OFFLOAD_CHARS));
      const refusal = typeof delta.refusal === 'string' ? delta.refusal : '';
      if (refusal.length > 0) out = large(out, (hold?.refusal ?? this.window()).peek(refusal, OFFLOAD_CHARS));
      if (choice.finish_reason) {
        // What flush's end() scans: what the window holds, when this chunk adds nothing to it.
        if (content.length === 0) out = large(out, text.peekEnd(OFFLOAD_CHARS));
        if (refusal.length === 0) out = large(out, hold?.refusal?.peekEnd(OFFLOAD_CHARS));
        out = this.toolTexts(out, hold, delta);
      }
    }
    return out;
  }

  private endTexts(): string[] | undefined {
    if (this.last === undefined) return undefined;
    let out: string[] | undefined;
    for (const hold of [this.first, ...(this.others?.values() ?? [])]) {
      if (hold.finished) continue;
      out = large(out, hold.text.peekEnd(OFFLOAD_CHARS));
      out = large(out, hold.refusal?.peekEnd(OFFLOAD_CHARS));
      out = this.toolTexts(out, hold, undefined);
    }
    return out;
  }

  /** The tool-call texts `flush` scans, with the fragments `delta` adds (by holdTool itself). */
  private toolTexts(
    out: string[] | undefined,
    hold: ChoiceHold | undefined,
    delta: ChatCompletionChunkDelta | undefined,
  ): string[] | undefined {
    const calls = delta?.tool_calls;
    let tools = hold?.tools;
    if (calls !== undefined && calls.length > 0) {
      // A copy, to add this delta's fragments to as pushChoice will.
      const scratch = {
        tools: new Map([...(tools ?? [])].map(([i, t]) => [i, Object.assign({}, t)])),
      } as unknown as ChoiceHold;
      for (const tc of calls) holdTool(scratch, tc);
      tools = scratch.tools;
    }
    for (const held of tools?.values() ?? []) out = large(out, scannedArgs(held.args, held.custom === true));
    const legacy = (hold?.legacy?.args ?? '') + (delta?.function_call?.arguments ?? '');
    return large(out, scannedArgs(legacy, false));
  }

  /** A window over one text of the answer, reporting the PII it finds to `pii`. */
  private window(): StreamGuard {
    return new StreamGuard(this.guard, { pii: this.pii });
  }

  push(chunk: ChatCompletionChunk): ChatCompletionChunk[] {
    try {
      return this.pushChunk(chunk);
    } finally {
      // Scanned for this push only: a text it did not take must not stay in memory.
      if (this.prescans.cache.size > 0) this.prescans.cache.clear();
    }
  }

  private pushChunk(chunk: ChatCompletionChunk): ChatCompletionChunk[] {
    if (this.blocked) return [];
    this.last = chunk;
    const choices = chunk.choices;
    if (choices.length === 0) return [chunk]; // usage-only chunk
    if (choices.length === 1) return this.pushChoice(chunk, choices[0] as ChatCompletionChunkChoice);
    for (let i = 1; i < choices.length; i++)
      for (let j = 0; j < i; j++)
        if (
          (choices[i] as ChatCompletionChunkChoice).index === (choices[j] as ChatCompletionChunkChoice).index
        )
          throw new ServiceError('upstream_error', 'provider sent one choice twice in a stream chunk');
    const out: ChatCompletionChunk[] = [];
    for (const choice of choices) {
      for (const c of this.pushChoice(chunk, choice)) out.push(c);
      if (this.blocked) return [];
    }
    return out;
  }

  /** The upstream stream ended: what every choice still holds (for choices that never finished). */
  end(): ChatCompletionChunk[] {
    try {
      return this.endAll();
    } finally {
      this.prescans.cache.clear();
    }
  }

  private endAll(): ChatCompletionChunk[] {
    const last = this.last;
    if (this.blocked || !last) return [];
    const out: ChatCompletionChunk[] = [];
    if (!this.first.finished) for (const c of this.flush(this.first, 0, last, null, '', '')) out.push(c);
    for (const [index, hold] of this.others ?? []) {
      if (hold.finished) continue;
      for (const c of this.flush(hold, index, last, null, '', '')) out.push(c);
    }
    return this.blocked ? [] : out;
  }

  private hold(index: number): ChoiceHold {
    if (index === 0) return this.first;
    this.others ??= new Map();
    let hold = this.others.get(index);
    if (!hold) {
      hold = { text: this.window(), refusal: undefined, tools: new Map(), finished: false };
      this.others.set(index, hold);
    }
    return hold;
  }

  private pushChoice(chunk: ChatCompletionChunk, choice: ChatCompletionChunkChoice): ChatCompletionChunk[] {
    const index = choice.index;
    const hold = this.hold(index);
    const delta = choice.delta;
    for (const tc of delta.tool_calls ?? []) holdTool(hold, tc);
    const legacy = delta.function_call;
    if (legacy) {
      hold.legacy ??= { name: '', args: '' };
      if (typeof legacy.name === 'string' && legacy.name !== '') hold.legacy.name = legacy.name;
      if (typeof legacy.arguments === 'string') hold.legacy.args += legacy.arguments;
    }
    let content = '';
    if (typeof delta.content === 'string' && delta.content.length > 0) {
      const step = hold.text.push(delta.content);
      if (step.kind === 'block') {
        this.blocked = { finding: step.finding, where: 'content' };
        return [];
      }
      content = step.text;
    }
    let refusal = '';
    if (typeof delta.refusal === 'string' && delta.refusal.length > 0) {
      hold.refusal ??= this.window();
      const step = hold.refusal.push(delta.refusal);
      if (step.kind === 'block') {
        this.blocked = { finding: step.finding, where: 'refusal' };
        return [];
      }
      refusal = step.text;
    }
    if (choice.finish_reason)
      return this.flush(hold, index, chunk, choice.finish_reason, content, refusal, choice[ANTHROPIC_STOP]);
    if (refusal !== '') {
      const d: ChatCompletionChunkDelta = {};
      if (delta.role) d.role = delta.role;
      if (content !== '') d.content = content;
      d.refusal = refusal;
      return [Object.assign({}, chunk, { choices: [{ index, delta: d, finish_reason: null }] })];
    }
    if (content !== '' || delta.role !== undefined) {
      // Object.assign and no spreads: a spread followed by members is V8's slow path on Node 20
      // (docs/ops.md), and this runs per chunk. (An upstream member named `__proto__` is dropped.)
      return [
        Object.assign({}, chunk, {
          choices: [
            {
              index,
              delta: delta.role ? { role: delta.role, content } : { content },
              finish_reason: null,
            },
          ],
        }),
      ];
    }
    return [];
  }

  /**
   * Releases the rest of one choice: its text, its refusal, its tool calls scanned whole, its
   * finish chunk (which keeps the Anthropic stop the upstream's finish chunk carried).
   */
  private flush(
    hold: ChoiceHold,
    index: number,
    template: ChatCompletionChunk,
    finish: OpenaiFinishReason | null,
    pendingContent: string,
    pendingRefusal: string,
    stop?: AnthropicStop,
  ): ChatCompletionChunk[] {
    hold.finished = true;
    const out: ChatCompletionChunk[] = [];
    const rest = hold.text.end();
    if (rest.kind === 'block') {
      this.blocked = { finding: rest.finding, where: 'content' };
      return [];
    }
    const base = {
      id: template.id,
      object: template.object,
      created: template.created,
      model: template.model,
    };
    const content = pendingContent + rest.text;
    if (content !== '')
      out.push(Object.assign({}, base, { choices: [{ index, delta: { content }, finish_reason: null }] }));
    if (hold.refusal) {
      const end = hold.refusal.end();
      if (end.kind === 'block') {
        this.blocked = { finding: end.finding, where: 'refusal' };
        return [];
      }
      const refusal = pendingRefusal + end.text;
      if (refusal !== '')
        out.push(Object.assign({}, base, { choices: [{ index, delta: { refusal }, finish_reason: null }] }));
    }
    for (const [toolIndex, held] of [...hold.tools.entries()].sort((a, b) => a[0] - b[0])) {
      // Scanned (and sent on) as the tool will read them: JSON escapes decoded in arguments; a
      // custom tool's input is free text, scanned as it is.
      const checked = guardText(this.guard, held.custom ? held.args : decodedJson(held.args));
      for (const f of checked.findings) if (f.category === 'pii') this.pii.add(f.type);
      if (checked.kind === 'block') {
        this.blocked = { finding: checked.finding, where: 'tool_call' };
        return [];
      }
      const tc: OpenaiToolCallDelta = held.custom
        ? { index: toolIndex, type: 'custom', custom: { name: held.name ?? '', input: checked.text } }
        : {
            index: toolIndex,
            type: 'function',
            function: { name: held.name ?? '', arguments: checked.text },
          };
      if (held.id) tc.id = held.id;
      out.push(
        Object.assign({}, base, { choices: [{ index, delta: { tool_calls: [tc] }, finish_reason: null }] }),
      );
    }
    hold.tools.clear();
    if (hold.legacy) {
      const checked = guardText(this.guard, decodedJson(hold.legacy.args));
      for (const f of checked.findings) if (f.category === 'pii') this.pii.add(f.type);
      if (checked.kind === 'block') {
        this.blocked = { finding: checked.finding, where: 'tool_call' };
        return [];
      }
      const delta: ChatCompletionChunkDelta = {
        function_call: { name: hold.legacy.name, arguments: checked.text },
      };
      out.push(Object.assign({}, base, { choices: [{ index, delta, finish_reason: null }] }));
      hold.legacy = undefined;
    }
    const finishChoice: ChatCompletionChunkChoice = { index, delta: {}, finish_reason: finish ?? 'stop' };
    if (stop) finishChoice[ANTHROPIC_STOP] = stop;
    const last: ChatCompletionChunk = Object.assign({}, base, { choices: [finishChoice] });
    if (template.usage) last.usage = template.usage;
    out.push(last);
    return out;
  }
}

/**
 * Adds a tool-call fragment to what its call holds. A call is a custom tool's from the first
 * fragment that says so (`type: 'custom'`, or a `custom` member); from then on only `custom`
 * members add to it, and it is sent on as a custom call (a stray `function` member is dropped).
 */
function holdTool(hold: ChoiceHold, tc: OpenaiToolCallDelta): void {
  let held = hold.tools.get(tc.index);
  if (!held) hold.tools.set(tc.index, (held = { args: '' }));
  if (tc.id) held.id = tc.id;
  if (held.custom || tc.type === 'custom' || tc.custom) {
    if (!held.custom) {
      held.custom = true;
      held.name = undefined;
      held.args = '';
    }
    if (tc.custom?.name) held.name = tc.custom.name;
    if (tc.custom?.input) held.args += tc.custom.input;
    return;
  }
  if (tc.function?.name) held.name = tc.function.name;
  if (tc.function?.arguments) held.args += tc.function.arguments;
}

/**
 * The text flush scans for a tool call's arguments (or a custom call's input), when it may be
 * large: decoding JSON escapes can lengthen it (`1E20` is written out), so arguments from an
 * eighth of OFFLOAD_CHARS on are decoded to see.
 */
function scannedArgs(args: string, custom: boolean): string | undefined {
  if (args.length < (custom ? OFFLOAD_CHARS : OFFLOAD_CHARS / 8)) return undefined;
  return custom ? args : decodedJson(args);
}

/** `out` with `text` added when it is large enough to scan off the event loop. */
export function large(out: string[] | undefined, text: string | undefined): string[] | undefined {
  if (text === undefined || text.length < OFFLOAD_CHARS) return out;
  if (out === undefined) return [text];
  out.push(text);
  return out;
}
