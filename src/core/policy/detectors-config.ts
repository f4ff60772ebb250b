// The `detectors` section of a rule set: what each detector's findings turn into.

import { PII_TYPES, SECRET_TYPES, UNICODE_TYPES } from '../detect/index.js';
import { oneOf, readTypes, unknownKeys } from './checks.js';
import { isRecord, typeName } from './conditions.js';
import {
  CONTENT_ACTIONS,
  type ContentAction,
  type ContentDetector,
  type DetectorSettings,
  type InjectionDetector,
  type Problem,
  SIGNAL_ACTIONS,
  type SignalAction,
  type UnicodeDetector,
} from './types.js';

const DETECTOR_KEYS = new Set(['pii', 'secrets', 'injection', 'unicode']);
const KNOWN_TYPES: Readonly<Record<string, readonly string[]>> = {
  pii: PII_TYPES,
  secrets: SECRET_TYPES,
  unicode: UNICODE_TYPES,
};

/** Reads a detector's `types` filter; each name must be a type that detector reports. */
function readDetectorTypes(node: Record<string, unknown>, kind: string, p: Problem[]) {
  const path = `detectors.${kind}.types`;
  const types = readTypes(node, 'types', path, p);
  const known = KNOWN_TYPES[kind] ?? [];
  for (const t of types ?? []) {
    if (!known.includes(t))
      p.push({ path, message: `unknown ${kind} type "${t}" (known: ${known.join(', ')})` });
  }
  return types;
}

export const DEFAULT_DETECTORS: DetectorSettings = Object.freeze({
  pii: Object.freeze({ action: 'redact', types: null }),
  secrets: Object.freeze({ action: 'redact', types: null }),
  injection: Object.freeze({ action: 'block', threshold: 0.8 }),
  unicode: Object.freeze({ action: 'flag', types: null }),
});

function compileContentDetector(node: unknown, kind: string, p: Problem[], fallback: ContentDetector) {
  const path = `detectors.${kind}`;
  if (!isRecord(node)) {
    p.push({ path, message: `must be an object with an action, got ${typeName(node)}` });
    return fallback;
  }
  unknownKeys(node, new Set(['action', 'types']), path, p);
  const raw = node.action === 'mask' ? 'redact' : node.action;
  const action = oneOf<ContentAction>(raw, CONTENT_ACTIONS, `${path}.action`, p) ?? fallback.action;
  return { action, types: readDetectorTypes(node, kind, p) };
}

function compileSignalDetector(
  node: unknown,
  path: string,
  p: Problem[],
  fallback: { action: SignalAction },
) {
  if (!isRecord(node)) {
    p.push({ path, message: `must be an object with an action, got ${typeName(node)}` });
    return { node: {} as Record<string, unknown>, action: fallback.action };
  }
  const action = oneOf<SignalAction>(node.action, SIGNAL_ACTIONS, `${path}.action`, p) ?? fallback.action;
  return { node, action };
}

export function compileDetectors(node: unknown, p: Problem[]): DetectorSettings {
  if (node === undefined) return DEFAULT_DETECTORS;
  if (!isRecord(node)) {
    p.push({ path: 'detectors', message: `must be an object, got ${typeName(node)}` });
    return DEFAULT_DETECTORS;
  }
  unknownKeys(node, DETECTOR_KEYS, 'detectors', p);
  const d = DEFAULT_DETECTORS;
  const pii = Object.hasOwn(node, 'pii') ? compileContentDetector(node.pii, 'pii', p, d.pii) : d.pii;
  const secrets = Object.hasOwn(node, 'secrets')
    ? compileContentDetector(node.secrets, 'secrets', p, d.secrets)
    : d.secrets;
  let injection: InjectionDetector = d.injection;
  if (Object.hasOwn(node, 'injection')) {
    const { node: n, action } = compileSignalDetector(node.injection, 'detectors.injection', p, d.injection);
    unknownKeys(n, new Set(['action', 'threshold']), 'detectors.injection', p);
    let threshold = d.injection.threshold;
    if (Object.hasOwn(n, 'threshold')) {
      const t = n.threshold;
      if (typeof t === 'number' && t > 0 && t <= 1) threshold = t;
      else p.push({ path: 'detectors.injection.threshold', message: 'must be a number in (0, 1]' });
    }
    injection = { action, threshold };
  }
  let unicode: UnicodeDetector = d.unicode;
  if (Object.hasOwn(node, 'unicode')) {
    const { node: n, action } = compileSignalDetector(node.unicode, 'detectors.unicode', p, d.unicode);
    unknownKeys(n, new Set(['action', 'types']), 'detectors.unicode', p);
    unicode = { action, types: readDetectorTypes(n, 'unicode', p) };
  }
  return { pii, secrets, injection, unicode };
}
