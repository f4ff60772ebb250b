import {
  type DetectionCategory,
  type DetectionSummary,
  type DetectOptions,
  detect,
  type Finding,
  redact,
} from '../detect/index.js';
import type { InjectionScores } from '../detect/types.js';
import { ServiceError } from '../errors.js';

/** One scanned text and where it came from (a message index and, for content arrays, a part). */
export interface ScannedText {
  readonly message: number;
  readonly part: number;
  readonly text: string;
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
}

const NO_FINDINGS: readonly Finding[] = [];

/** Scans one text list, merging summaries: one detect() pass per text. */
export function scanTexts(
  items: readonly { message: number; part: number; text: string }[],
  opts: DetectOptions,
): ContentScan {
  const pii = new Set<string>();
  const secrets = new Set<string>();
  const unicode = new Set<string>();
  const injection: Record<string, number> = {};
  const counts: Record<DetectionCategory, number> = { pii: 0, secret: 0, injection: 0, unicode: 0 };
  const texts: ScannedText[] = [];
  for (const item of items) {
    if (item.text.length === 0) continue;
    const result = detect(item.text, opts);
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
      findings: result.findings.length === 0 ? NO_FINDINGS : result.findings,
    });
  }
  return {
    texts,
    summary: { pii: [...pii], secrets: [...secrets], injection, unicode: [...unicode] },
    counts,
  };
}

/** The texts of chat messages (string content and text parts). */
export function messageTexts(
  messages: readonly MessageLike[],
): { message: number; part: number; text: string }[] {
  const out: { message: number; part: number; text: string }[] = [];
  for (let i = 0; i < messages.length; i++) {
    const content = messages[i]?.content;
    if (typeof content === 'string') out.push({ message: i, part: -1, text: content });
    else if (Array.isArray(content)) {
      for (let j = 0; j < content.length; j++) {
        const p = content[j] as { type?: unknown; text?: unknown } | null;
        if (p && typeof p.text === 'string') out.push({ message: i, part: j, text: p.text });
      }
    }
  }
  return out;
}

/** Rewrites message contents in place, replacing findings of `categories` with placeholders. */
export function redactMessages(
  messages: MessageLike[],
  scan: ContentScan,
  categories: readonly DetectionCategory[],
): number {
  let changed = 0;
  for (const t of scan.texts) {
    if (!t.findings.some((f) => categories.includes(f.category))) continue;
    const next = redact(t.text, t.findings, categories);
    if (next === t.text) continue;
    changed++;
    const m = messages[t.message];
    if (!m) continue;
    if (t.part < 0) m.content = next;
    else if (Array.isArray(m.content)) {
      const part = m.content[t.part] as Record<string, unknown>;
      m.content[t.part] = { ...part, text: next };
    }
  }
  return changed;
}

/** Nesting a governed value may have (JCS stops at 512; real arguments stay far below). */
export const MAX_VALUE_DEPTH = 64;

/**
 * Every string in a JSON value, for the detectors (all of them: a cap would let a secret hide
 * behind enough harmless strings), once the value is checked to be something the audit trail can
 * carry: finite numbers only (JSON.parse reads 1e400 as Infinity, which canonical JSON refuses)
 * and at most MAX_VALUE_DEPTH levels. Otherwise a 400 naming `param`.
 */
export function stringsIn(value: unknown, param: string): string[] {
  const out: string[] = [];
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
      else for (const k in v) walk((v as Record<string, unknown>)[k], depth + 1);
    }
  };
  walk(value, 0);
  return out;
}
