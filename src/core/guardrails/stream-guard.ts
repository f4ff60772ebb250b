import { type Finding, redact } from '../detect/index.js';
import type { FindingAction, KeyWatch, OutputGuard } from './output.js';

const NO_FINDINGS: readonly Finding[] = [];

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
  /**
   * Leading characters of `context` that were released under an earlier, closed block (`seed`):
   * a finding reaching into them cannot be redacted there any more, so it blocks.
   */
  private sealed = 0;
  private readonly hold: number;
  private readonly contextSize: number;

  private readonly seen: Set<string> | undefined;
  /**
   * The guard looks for the provider's key alone (no detector is on: observe mode, or detectors
   * off): text is held back only while its end could begin the key (KeyScrub.heldTail), so such a
   * stream goes out delta by delta as it came, unless a delta ends like the start of the key.
   */
  private readonly keysOnly: boolean;

  /** `opts.pii`: where the types of the PII found are added (for the audit trail). */
  constructor(
    private readonly guard: OutputGuard,
    opts: { hold?: number; context?: number; pii?: Set<string> } = {},
  ) {
    // A key found by value (KeyWatch) must fit in what is held, or it could go out in two parts.
    this.hold = Math.max(opts.hold ?? DEFAULT_HOLD, guard.keys?.scrub.longest ?? 0);
    const d = guard.detectOptions;
    this.keysOnly = guard.keys !== undefined && !d.pii && !d.secrets && !d.unicode && !d.injection;
    this.contextSize = opts.context ?? DEFAULT_CONTEXT;
    this.seen = opts.pii;
  }

  /** Feeds a content delta; returns the text that may go out now ('' while holding). */
  push(delta: string): GuardStep {
    this.pending += delta;
    if (this.keysOnly) return this.keyWindow(false);
    if (this.pending.length < this.hold * 2) return { kind: 'release', text: '' };
    return this.window(false);
  }

  /** keysOnly: releases all but a tail that could begin the key, the key replaced where whole. */
  private keyWindow(final: boolean): GuardStep {
    const text = this.pending;
    const keys = (this.guard.keys as KeyWatch).with(text, NO_FINDINGS);
    let cut = final ? text.length : text.length - (this.guard.keys as KeyWatch).scrub.heldTail(text);
    // A whole key the held end falls inside goes out whole (replaced), not cut in two.
    for (const f of keys) if (f.start < cut && f.end > cut) cut = f.end;
    const inRange = keys.filter((f) => f.start < cut);
    this.pending = text.slice(cut);
    const raw = text.slice(0, cut);
    return { kind: 'release', text: inRange.length === 0 ? raw : redact(raw, inRange, ['secret']) };
  }

  /**
   * The text `push(delta)` would scan when it is at least `min` characters long; undefined when it
   * is shorter or the push would scan nothing (it only holds). The stream governors use it to have
   * large windows scanned off the event loop first; it builds no string below `min`.
   */
  peek(delta: string, min: number): string | undefined {
    const pending = this.pending.length + delta.length;
    if (pending < this.hold * 2 || this.context.length + pending < min) return undefined;
    return this.context + this.pending + delta;
  }

  /** The text `end()` would scan when it is at least `min` characters long (see `peek`). */
  peekEnd(min: number): string | undefined {
    if (this.pending.length === 0 || this.context.length + this.pending.length < min) return undefined;
    return this.context + this.pending;
  }

  /**
   * Continues the scan of an earlier block of the same answer: its last released characters
   * (`carry()` of that block's guard) are the context of this one's first window, so a value split
   * across the two is still found (and, since its first part is out already, blocks).
   */
  seed(carry: string): void {
    this.context = carry;
    this.sealed = carry.length;
  }

  /** The last released characters (after `end()`: the context to `seed` the next block with). */
  carry(): string {
    return this.context;
  }

  /** The stream ended: scans and releases the rest. */
  end(): GuardStep {
    if (this.pending.length === 0) return { kind: 'release', text: '' };
    return this.keysOnly ? this.keyWindow(true) : this.window(true);
  }

  private window(final: boolean): GuardStep {
    const offset = this.context.length;
    const text = this.context + this.pending;
    const findings = this.guard.scan(text);
    if (this.seen) for (const f of findings) if (f.category === 'pii') this.seen.add(f.type);
    let cut = final ? text.length : text.length - this.hold;
    if (!final) {
      for (const f of findings) if (f.start < cut && f.end > cut && f.end > offset) cut = f.start;
      if (cut < offset) cut = offset;
    }
    const inRange: Finding[] = [];
    for (const f of findings) {
      if (f.end <= offset || f.start >= cut) continue;
      const action: FindingAction = this.guard.classify(f);
      if (action === 'block' || (action === 'redact' && f.start < this.sealed))
        return { kind: 'block', finding: f, released: '' };
      if (action === 'redact') {
        inRange.push({ ...f, start: Math.max(f.start, offset) - offset, end: Math.min(f.end, cut) - offset });
      }
    }
    this.sealed = 0;
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
  const findings = guard.scan(text);
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

/**
 * Scans texts a reader sees as one (the text blocks of one answer) in one pass, so a value split
 * across two is found; redactions are made within each text (a finding across a boundary is
 * redacted in both).
 */
export function guardJoined(
  guard: OutputGuard,
  texts: readonly string[],
):
  | { kind: 'block'; finding: Finding; findings: readonly Finding[] }
  | { kind: 'release'; texts: string[]; findings: readonly Finding[] } {
  const findings = guard.scan(texts.join(''));
  const red: Finding[] = [];
  for (const f of findings) {
    const action = guard.classify(f);
    if (action === 'block') return { kind: 'block', finding: f, findings };
    if (action === 'redact') red.push(f);
  }
  if (red.length === 0) return { kind: 'release', texts: texts.slice(), findings };
  const out: string[] = [];
  let at = 0;
  for (const t of texts) {
    const end = at + t.length;
    const own: Finding[] = [];
    for (const f of red)
      if (f.start < end && f.end > at)
        own.push({ ...f, start: Math.max(f.start, at) - at, end: Math.min(f.end, end) - at });
    out.push(own.length === 0 ? t : redact(t, own, ['pii', 'secret', 'unicode']));
    at = end;
  }
  return { kind: 'release', texts: out, findings };
}

/**
 * Tool-call arguments as the tool will read them: JSON written with escapes (`\u0041KIA…`) is
 * re-serialised without them, so the detectors see the decoded values (the same JSON value).
 * Anything else is returned as it is.
 */
export function decodedJson(args: string): string {
  if (!args.includes('\\')) return args;
  try {
    return JSON.stringify(JSON.parse(args));
  } catch {
    return args;
  }
}
