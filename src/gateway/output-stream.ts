import type { Finding } from '../core/detect/index.js';
import { guardText, type OutputGuard, StreamGuard } from '../core/guardrails/index.js';
import type { ChatCompletionChunk, OpenaiToolCallDelta } from '../providers/wire/index.js';

export interface StreamBlock {
  readonly finding: Finding;
  readonly where: 'content' | 'tool_call';
}

/**
 * Governs a canonical chunk stream: content deltas pass through the StreamGuard (held, scanned,
 * redacted) and tool-call deltas are held until the model finishes, then scanned whole. No
 * unscanned byte is emitted. After a block, `blocked` is set and nothing more is emitted.
 */
export class OutputStreamGovernor {
  blocked: StreamBlock | undefined;
  private readonly text: StreamGuard;
  private readonly heldTools = new Map<number, { id?: string; name?: string; args: string }>();
  private last: ChatCompletionChunk | undefined;
  private finishChunk: ChatCompletionChunk | undefined;

  constructor(private readonly guard: OutputGuard) {
    this.text = new StreamGuard(guard);
  }

  push(chunk: ChatCompletionChunk): ChatCompletionChunk[] {
    if (this.blocked) return [];
    this.last = chunk;
    const choice = chunk.choices[0];
    if (!choice) return [chunk]; // usage-only chunk
    const out: ChatCompletionChunk[] = [];
    const delta = choice.delta;
    for (const tc of delta.tool_calls ?? []) this.holdTool(tc);
    let content = '';
    if (typeof delta.content === 'string' && delta.content.length > 0) {
      const step = this.text.push(delta.content);
      if (step.kind === 'block') {
        this.blocked = { finding: step.finding, where: 'content' };
        return [];
      }
      content = step.text;
    }
    if (choice.finish_reason) {
      this.finishChunk = chunk;
      return this.flush(chunk, content);
    }
    if (content !== '' || delta.role !== undefined) {
      // Object.assign and no spreads: a spread followed by members is V8's slow path on Node 20
      // (docs/ops.md), and this runs per chunk. (An upstream member named `__proto__` is dropped.)
      out.push(
        Object.assign({}, chunk, {
          choices: [
            {
              index: choice.index,
              delta: delta.role ? { role: delta.role, content } : { content },
              finish_reason: null,
            },
          ],
        }),
      );
    }
    return out;
  }

  /** The upstream stream ended (possibly without a finish chunk). */
  end(): ChatCompletionChunk[] {
    if (this.blocked || this.finishChunk || !this.last) return [];
    return this.flush(this.last, '');
  }

  private holdTool(tc: OpenaiToolCallDelta): void {
    let held = this.heldTools.get(tc.index);
    if (!held) this.heldTools.set(tc.index, (held = { args: '' }));
    if (tc.id) held.id = tc.id;
    if (tc.function?.name) held.name = tc.function.name;
    if (tc.function?.arguments) held.args += tc.function.arguments;
  }

  private flush(template: ChatCompletionChunk, pendingContent: string): ChatCompletionChunk[] {
    const out: ChatCompletionChunk[] = [];
    const rest = this.text.end();
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
      out.push(Object.assign({}, base, { choices: [{ index: 0, delta: { content }, finish_reason: null }] }));
    for (const [index, held] of [...this.heldTools.entries()].sort((a, b) => a[0] - b[0])) {
      const checked = guardText(this.guard, held.args);
      if (checked.kind === 'block') {
        this.blocked = { finding: checked.finding, where: 'tool_call' };
        return [];
      }
      const tc: OpenaiToolCallDelta = {
        index,
        type: 'function',
        function: { name: held.name ?? '', arguments: checked.text },
      };
      if (held.id) tc.id = held.id;
      out.push(
        Object.assign({}, base, {
          choices: [{ index: 0, delta: { tool_calls: [tc] }, finish_reason: null }],
        }),
      );
    }
    const finish = template.choices[0]?.finish_reason ?? 'stop';
    const last: ChatCompletionChunk = Object.assign({}, base, {
      choices: [{ index: 0, delta: {}, finish_reason: finish }],
    });
    if (template.usage) last.usage = template.usage;
    out.push(last);
    return out;
  }
}
