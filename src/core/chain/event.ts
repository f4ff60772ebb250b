import { hash } from 'node:crypto';
import { isHash } from './bytes.js';
import type { Personal } from './commitment.js';
import { ChainError } from './errors.js';
import { canonicalize, type JsonValue, sortedKeys, writeString } from './jcs.js';

/** `prev_hash` of the first event of a chain: 64 ASCII zeros. */
export const GENESIS = '0'.repeat(64);

/**
 * Where a control-plane event came from: the sidecar log entry it was ingested from. The sidecar
 * log is `(sidecar_id, epoch)`; `index` is the entry's line in it, `hash` its hash there and `ts`
 * the time the sidecar recorded it (the org chain's `ts` is when the control plane took it in).
 */
export interface EventOrigin {
  sidecar_id: string;
  epoch: string;
  index: number;
  hash: string;
  ts: string;
}

/** One line of an org chain (format v2). `seq` is the 1-based line number. */
export interface ChainEvent {
  id: string;
  org_id: string;
  seq: number;
  ts: string;
  event_type: string;
  agent_id: string | null;
  session_id: string | null;
  task_id: string | null;
  pipeline_id: string | null;
  behavior_type: string | null;
  outcome: string | null;
  reason: string | null;
  rule_id: string | null;
  provider: string | null;
  model: string | null;
  usage: { [key: string]: number } | null;
  cost: number | null;
  detections: JsonValue[] | null;
  details: { [key: string]: JsonValue } | null;
  personal: Personal | null;
  origin: EventOrigin | null;
  _chain_version: 2;
  prev_hash: string;
  hash: string;
  /** The seal covering this event; added after sealing, outside the hash. */
  seal?: { seq: number };
}

/** An event before it is linked: everything the writer decides. */
export type EventDraft = Omit<ChainEvent, '_chain_version' | 'prev_hash' | 'hash' | 'seal'>;

/** A v1 event: no `_chain_version`, one global chain across orgs, same hash rule. */
export interface LegacyEvent {
  id: string;
  prev_hash: string;
  hash: string;
  seq?: number;
  _chain_version?: undefined;
  [key: string]: unknown;
}

/**
 * The canonical text of an event: RFC 8785 JSON of the event without `hash` and `seal`, with each
 * `personal` entry replaced by its commitment string `c` (so `personal` becomes `{field: c}`).
 * Works on untrusted shapes too (the verifier feeds it stored data); throws `ChainError` only
 * for values JCS refuses.
 */
export function canonicalEventString(event: object): string {
  const { head, committed, rest } = canonicalEventParts(event);
  return `${head}${committed}${rest}}`;
}

/**
 * `canonicalEventString(event)` cut around the value of `personal`: it equals
 * `head + committed + rest + '}'`, where `head` ends with `"personal":` and `committed` is the
 * canonical commitment map (both empty when the event has no `personal`). The writer splices the
 * full personal fields in place of `committed` for the stored text without searching for them.
 */
export interface CanonicalParts {
  readonly head: string;
  readonly committed: string;
  readonly rest: string;
}

export function canonicalEventParts(event: object): CanonicalParts {
  const rec = event as Record<string, unknown>;
  const keys = sortedKeys(Object.keys(rec));
  let head = '';
  let committed = '';
  let out = '{';
  let first = true;
  for (const key of keys) {
    if (key === 'hash' || key === 'seal') continue; // not covered by the hash
    const v = rec[key];
    if (v === undefined) continue;
    if (!first) out += ',';
    first = false;
    if (key === 'personal') {
      head = `${out}"personal":`;
      committed = canonicalize(commitmentsOf(v));
      out = '';
    } else {
      out += `${writeString(key)}:${canonicalize(v)}`;
    }
  }
  return { head, committed, rest: out };
}

/** `canonicalEventString` as UTF-8 bytes. */
export function canonicalEventBytes(event: object): Uint8Array {
  return new Uint8Array(Buffer.from(canonicalEventString(event), 'utf8'));
}

function commitmentsOf(personal: unknown): unknown {
  if (typeof personal !== 'object' || personal === null || Array.isArray(personal)) return personal;
  const rec = personal as Record<string, unknown>;
  // No prototype: a field named __proto__ must stay an own property, covered by the hash.
  const out: Record<string, unknown> = Object.create(null);
  for (const key of Object.keys(rec)) {
    const f = rec[key];
    out[key] = typeof f === 'object' && f !== null ? (f as { c?: unknown }).c : f;
  }
  return out;
}

/**
 * The event hash, hex SHA-256 over: the 64 ASCII hex characters of `prevHash` (lowercase, as
 * stored), immediately followed by the UTF-8 bytes of `canonicalEventString(event)`. No
 * separator is needed: the prefix has a fixed length. `prevHash` is normally `event.prev_hash`.
 */
export function hashEvent(prevHash: string, event: object): string {
  if (!isHash(prevHash))
    throw new ChainError('invalid_hash', 'prev_hash must be 64 lowercase hex characters');
  return hashEventUnchecked(prevHash, event);
}

/** `hashEvent` without validating `prevHash` (for the verifier, which reads untrusted data). */
export function hashEventUnchecked(prevHash: string, event: object): string {
  // One-shot crypto.hash is markedly cheaper than createHash for inputs this small.
  return hash('sha256', prevHash + canonicalEventString(event), 'hex');
}

/**
 * `hashEventUnchecked` computed from the event's stored JSON text instead of re-serialising the
 * parsed event: the writer stores the canonical text itself (RFC 8785, with the full personal
 * fields in place of their commitments and `hash` appended last), so the hashed text is that
 * text without its `hash` member and with the personal fields swapped back for commitments.
 * Returns undefined when `text` is not in that form. A hash that does not match proves nothing
 * either way (the text may be canonical JSON written differently, e.g. by another tool): the
 * caller then re-serialises the parsed event, so this is only ever a shortcut to "intact".
 */
export function hashFromStoredText(
  prevHash: string,
  event: Record<string, unknown>,
  text: string,
): string | undefined {
  const stored = event.hash;
  if (typeof stored !== 'string') return undefined;
  const suffix = `,"hash":${JSON.stringify(stored)}}`;
  if (!text.endsWith(suffix)) return undefined;
  let body = `${text.slice(0, text.length - suffix.length)}}`;
  const personal = event.personal;
  if (typeof personal === 'object' && personal !== null && !Array.isArray(personal)) {
    const fields = Object.keys(personal);
    if (fields.length > 0) {
      const full = `"personal":${JSON.stringify(personal)}`;
      const at = body.lastIndexOf(full);
      if (at < 0) return undefined;
      let committed: string;
      try {
        committed = `"personal":${canonicalize(commitmentsOf(personal))}`;
      } catch {
        return undefined;
      }
      body = body.slice(0, at) + committed + body.slice(at + full.length);
    }
  }
  return hash('sha256', prevHash + body, 'hex');
}

/** Links a draft after `prevHash`: sets `_chain_version`, `prev_hash` and `hash`. */
export function linkEvent(prevHash: string, draft: EventDraft): ChainEvent {
  const linked = { ...draft, _chain_version: 2 as const, prev_hash: prevHash, hash: '' };
  linked.hash = hashEvent(prevHash, linked);
  return linked;
}
