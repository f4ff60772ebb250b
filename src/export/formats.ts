import { type Severity, severityOf } from '../audit/severity.js';
import type { AuditEvent } from '../audit/types.js';
import { detect, redact } from '../core/detect/index.js';
import { VERSION } from '../version.js';

export { detected, type Severity, severityOf } from '../audit/severity.js';

export const EXPORT_FORMATS = ['json', 'cef', 'ocsf'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];
export const SEVERITY_FILTERS = ['all', 'detection', 'action', 'block'] as const;
export type SeverityFilter = (typeof SEVERITY_FILTERS)[number];

/** Strings longer than this leave govgate truncated (spec 6.2: large content fields). */
export const OUTBOUND_STRING_MAX = 4_096;
/** Members that are hashes, ids and times: kept as they are (a detector could take a hash for a key). */
const STRUCTURAL = new Set([
  'id',
  'hash',
  'prev_hash',
  'c',
  'org_id',
  'seq',
  'ts',
  'event_id',
  'pipeline_id',
  'session_id',
  'task_id',
  'agent_id',
  'credential_id',
  'actor',
]);
/**
 * Absolute paths under a file system's usual roots (an API route such as `/v1/chat` is not one),
 * also as a `file://` URL.
 */
const POSIX_PATH =
  /(^|[\s"'=(,;:]|file:\/\/)\/(?:home|root|etc|var|usr|opt|tmp|srv|mnt|media|Users|private|proc|sys|dev|run|lib|lib64|bin|sbin|boot|data|app|workspace)\/[\w.@+/-]*/g;
const WINDOWS_PATH = /\b[A-Za-z]:\\(?:[^\\\s"'<>|]+\\)*[^\\\s"'<>|]*/g;
/** A Windows UNC path (two backslashes, a server, a share: `\\fs01\finance\…`). */
const UNC_PATH = /(?<![\\\w])\\\\[\w.$-]+\\[^\s"'<>|]*/g;

/**
 * A string as it may leave govgate (spec 6.2, "Redact"): API keys, tokens, private keys and
 * connection strings (the secret detectors) become `[SECRET]`, absolute file paths `[PATH]`, and
 * past `OUTBOUND_STRING_MAX` characters the rest is cut (`…[truncated N chars]`).
 */
export function scrubText(s: string): string {
  let out = s.length > OUTBOUND_STRING_MAX ? s.slice(0, OUTBOUND_STRING_MAX) : s;
  const found = detect(out, { pii: false, injection: false, unicode: false, secrets: true }).findings;
  if (found.length > 0) out = redact(out, found, ['secret']);
  out = out
    .replace(POSIX_PATH, (_m, lead: string) => `${lead}[PATH]`)
    .replace(WINDOWS_PATH, '[PATH]')
    .replace(UNC_PATH, '[PATH]');
  return s.length > OUTBOUND_STRING_MAX ? `${out}…[truncated ${s.length - OUTBOUND_STRING_MAX} chars]` : out;
}

/**
 * Short strings found clean (nothing to scrub), remembered: most of an event's strings recur in
 * every event (agent, model, provider, event type, outcome, mode), and scrubbing them again is
 * most of an outbound event's cost. Only clean strings are kept, never one that held a secret.
 */
const CLEAN_MAX_CHARS = 128;
const CLEAN_MAX_ENTRIES = 4_096;
const clean = new Set<string>();

function scrubString(s: string): string {
  if (s.length > CLEAN_MAX_CHARS) return scrubText(s);
  if (clean.has(s)) return s;
  const out = scrubText(s);
  if (out === s) {
    if (clean.size >= CLEAN_MAX_ENTRIES) clean.clear();
    clean.add(s);
  }
  return out;
}

function scrub(v: unknown, key: string, depth: number): unknown {
  if (typeof v === 'string') return STRUCTURAL.has(key) ? v : scrubString(v);
  if (v === null || typeof v !== 'object' || depth > 32) return v;
  if (Array.isArray(v)) return v.map((x) => scrub(x, key, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) out[k] = scrub(x, k, depth + 1);
  return out;
}

/**
 * An event as it leaves govgate (alerts, SIEM, export destinations, spans): as the trail holds it,
 * but each personal field as its commitment only (`{"c": …}`), without its seal, and scrubbed
 * (`scrubText`). A person's data is not copied where erasure cannot reach it (the API and a DSAR
 * show the values), nor a secret where rotation cannot.
 */
export function outboundEvent(e: AuditEvent): AuditEvent {
  const personal: Record<string, { c: unknown }> = {};
  for (const [k, v] of Object.entries(e.personal ?? {}))
    personal[k] = { c: (v as { c?: unknown } | null)?.c ?? null };
  const { seal: _seal, personal: _p, ...rest } = e as AuditEvent & { seal?: unknown };
  return { ...(scrub(rest, '', 0) as object), personal } as unknown as AuditEvent;
}

/**
 * Whether an event passes a SIEM severity filter: `all`; `detection` (a detection or a block, as
 * alerting's `detect`); `action` (a governed call or action: it has a behavior type); `block`.
 */
export function passes(e: AuditEvent, filter: SeverityFilter, severity: Severity = severityOf(e)): boolean {
  switch (filter) {
    case 'all':
      return true;
    case 'detection':
      return severity !== 'info';
    case 'action':
      return e.behavior_type !== null && e.behavior_type !== undefined;
    case 'block':
      return severity === 'block';
  }
}

const CEF_SEVERITY: Record<Severity, number> = { block: 8, detect: 5, info: 2 };

/** CEF header fields escape `\` and `|`; extension values escape `\`, `=` and line breaks. */
function cefHeader(s: string): string {
  return s
    .replace(/\\/g, '\\\\')
    .replace(/\|/g, '\\|')
    .replace(/[\r\n]+/g, ' ');
}
function cefValue(s: string): string {
  return s.replace(/\\/g, '\\\\').replace(/=/g, '\\=').replace(/\r?\n/g, '\\n').replace(/\r/g, '\\r');
}

/**
 * The event as one CEF line (ArcSight Common Event Format 0): vendor and product govgate, the
 * event type as signature id, severity 8 (block), 5 (detection) or 2; extension keys from the
 * CEF dictionary (rt, act, outcome, suser, cs1…cs6 with their labels).
 */
export function toCef(e: AuditEvent, source: string, environment: string): string {
  const severity = severityOf(e);
  const ext: Array<[string, string | number | null | undefined]> = [
    ['rt', Date.parse(e.ts)],
    ['act', e.behavior_type],
    ['outcome', e.outcome],
    ['suser', e.agent_id],
    ['reason', e.reason],
    ['externalId', e.id],
    ['cs1Label', 'org_id'],
    ['cs1', e.org_id],
    ['cs2Label', 'rule_id'],
    ['cs2', e.rule_id],
    ['cs3Label', 'provider'],
    ['cs3', e.provider],
    ['cs4Label', 'model'],
    ['cs4', e.model],
    ['cs5Label', 'session_id'],
    ['cs5', e.session_id],
    ['cs6Label', 'environment'],
    ['cs6', environment],
    ['deviceExternalId', source],
    ['cn1Label', 'seq'],
    ['cn1', e.seq],
  ];
  const given = (v: unknown): boolean => v !== null && v !== undefined && v !== '';
  const values = new Map(ext);
  const extension = ext
    // A custom field's label goes only with its value (`cs3Label` with `cs3`).
    .filter(([k, v]) => given(v) && (!k.endsWith('Label') || given(values.get(k.slice(0, -5)))))
    .map(([k, v]) => `${k}=${cefValue(String(v))}`)
    .join(' ');
  return `CEF:0|govgate|govgate|${cefHeader(VERSION)}|${cefHeader(e.event_type)}|${cefHeader(
    e.reason ?? e.event_type,
  )}|${CEF_SEVERITY[severity]}|${extension}`;
}

const OCSF_SEVERITY: Record<Severity, number> = { block: 4, detect: 3, info: 1 };

/**
 * The event as an OCSF 1.1 API Activity (class 6003, category 6: Application Activity): what an
 * agent asked (`api.operation`: the event type; `api.service`: the provider), who (`actor`), the
 * outcome (`status_id` 1 success, 2 failure for a block or an error), and the whole event under
 * `unmapped`. Give it an `outboundEvent`.
 */
export function toOcsf(e: AuditEvent, source: string, environment: string): Record<string, unknown> {
  const severity = severityOf(e);
  const failed = e.outcome === 'block' || e.outcome === 'error';
  return {
    class_uid: 6003,
    class_name: 'API Activity',
    category_uid: 6,
    category_name: 'Application Activity',
    activity_id: 99,
    activity_name: e.event_type,
    type_uid: 600399,
    time: Date.parse(e.ts),
    severity_id: OCSF_SEVERITY[severity],
    severity: severity === 'block' ? 'High' : severity === 'detect' ? 'Medium' : 'Informational',
    status_id: failed ? 2 : 1,
    status: failed ? 'Failure' : 'Success',
    status_detail: e.reason ?? undefined,
    message: e.reason ?? e.event_type,
    metadata: {
      version: '1.1.0',
      uid: e.id,
      product: { name: 'govgate', vendor_name: 'govgate', version: VERSION },
      labels: [`source:${source}`, `environment:${environment}`],
      tenant_uid: e.org_id,
    },
    actor: {
      user: { uid: e.agent_id ?? undefined, type: 'agent' },
      session: { uid: e.session_id ?? undefined },
    },
    api: { operation: e.event_type, service: { name: e.provider ?? 'govgate' } },
    unmapped: e,
  };
}

/** An event in a destination's format (scrubbed first): an object (json, ocsf) or a CEF line. */
export function formatEvent(
  e: AuditEvent,
  format: ExportFormat,
  source: string,
  environment: string,
): unknown {
  const o = outboundEvent(e);
  if (format === 'cef') return toCef(o, source, environment);
  if (format === 'ocsf') return toOcsf(o, source, environment);
  return { ...o, source, environment };
}
