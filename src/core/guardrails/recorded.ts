import { detect, redact } from '../detect/index.js';

const SECRETS_ONLY = { pii: false, secrets: true, injection: false, unicode: false } as const;

/**
 * `text` as an event's details may hold it: with any secret in it replaced by its placeholder.
 * For what an agent names an action or a call with (a tool, server, model or provider name, a
 * tool_call_id, an Idempotency-Key): details are covered by the event hash, so what lands there
 * can never be erased, and the value itself is kept only where it holds nothing.
 */
export function recordable(text: string): string {
  const { findings } = detect(text, SECRETS_ONLY);
  return findings.length === 0 ? text : redact(text, findings, ['secret']);
}

/** `recordable` for an optional name (null and undefined pass through). */
export function recordableName<T extends string | null | undefined>(text: T): T {
  return (typeof text === 'string' ? recordable(text) : text) as T;
}
