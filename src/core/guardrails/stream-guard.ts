import { detect, type Finding, redact } from '../detect/index.js';
import type { FindingAction, OutputGuard } from './output.js';

export type GuardStep =
  | { readonly kind: 'release'; readonly text: string }
  | { readonly kind: 'block'; readonly finding: Finding; readonly released: string };

const DEFAULT_HOLD = 96;
const DEFAULT_CONTEXT = 64;

/**
 * Releases streamed model text only after it was scanned. Text is held until `hold` characters
 * follow it, so a pattern cannot be cut in half by a chunk boundary; a finding that straddles
 * the release point moves the point back to its start. The last `context` released characters
 * are rescanned with each window, so context-dependent detectors (dates of birth) still see them.
 * Findings in released text are redacted, or end the stream when their action is block.
 */
export class StreamGuard {
  private pending = '';
  private context = '';
  private readonly hold: number;
  private readonly contextSize: number;

  constructor(
    private readonly guard: OutputGuard,
    opts: { hold?: number; context?: number } = {},
  ) {
    this.hold = opts.hold ?? DEFAULT_HOLD;
    this.contextSize = opts.context ?? DEFAULT_CONTEXT;
  }

  /** Feeds a content delta; returns the text that may go out now ('' while holding). */
  push(delta: string): GuardStep {
    this.pending += delta;
    if (this.pending.length < this.hold * 2) return { kind: 'release', text: '' };
    return this.window(false);
  }

  /** The stream ended: scans and releases the rest. */
  end(): GuardStep {
    if (this.pending.length === 0) return { kind: 'release', text: '' };
    return this.window(true);
  }

  private window(final: boolean): GuardStep {
    const offset = this.context.length;
    const text = this.context + this.pending;
    const findings = detect(text, this.guard.detectOptions).findings;
    let cut = final ? text.length : text.length - this.hold;
    if (!final) {
      for (const f of findings) if (f.start < cut && f.end > cut && f.end > offset) cut = f.start;
      if (cut < offset) cut = offset;
    }
    const inRange: Finding[] = [];
    for (const f of findings) {
      if (f.end <= offset || f.start >= cut) continue;
      const action: FindingAction = this.guard.classify(f);
      if (action === 'block') return { kind: 'block', finding: f, released: '' };
      if (action === 'redact') {
        inRange.push({ ...f, start: Math.max(f.start, offset) - offset, end: Math.min(f.end, cut) - offset });
      }
    }
    const raw = text.slice(offset, cut);
    const out = inRange.length === 0 ? raw : redact(raw, inRange, ['pii', 'secret', 'unicode']);
    this.pending = text.slice(cut);
    const released = this.context + raw;
    this.context = released.slice(Math.max(0, released.length - this.contextSize));
    return { kind: 'release', text: out };
  }
}

/** Scans a whole text once (non-streamed output, tool arguments): redacted text or a block. */
export function guardText(guard: OutputGuard, text: string): GuardStep & { findings: readonly Finding[] } {
  const findings = detect(text, guard.detectOptions).findings;
  const red: Finding[] = [];
  for (const f of findings) {
    const action = guard.classify(f);
    if (action === 'block') return { kind: 'block', finding: f, released: '', findings };
    if (action === 'redact') red.push(f);
  }
  return {
    kind: 'release',
    text: red.length === 0 ? text : redact(text, red, ['pii', 'secret', 'unicode']),
    findings,
  };
}
