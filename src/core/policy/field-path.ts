// Field paths (`args.amount`, `payload.items.0.sku`, `detections.pii`) compiled once to accessors.
// Only own properties are followed, so `constructor` or `__proto__` segments never reach a prototype.

import { INJECTION_TYPES } from '../detect/index.js';
import type { Action } from './types.js';

export type Accessor = (action: Action) => unknown;

export const MAX_PATH_SEGMENTS = 16;
const ROOTS = ['args', 'payload', 'detections', 'type', 'agent_id', 'tool', 'server', 'model', 'provider'];
const SCALAR_ROOTS = new Set(['type', 'agent_id', 'tool', 'server', 'model', 'provider']);
const DETECTION_KINDS = new Set(['pii', 'secrets', 'injection', 'unicode']);
const SEGMENT = /^[^.\s]{1,128}$/;

const hasOwn = Object.hasOwn;

function step(value: unknown, key: string): unknown {
  if (typeof value !== 'object' || value === null) return undefined;
  return hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
}

/** Accessor for a top-level field of the action. */
export function rootAccessor(root: string): Accessor {
  switch (root) {
    case 'args':
      return (a) => a.args;
    case 'payload':
      return (a) => a.payload;
    case 'detections':
      return (a) => a.detections;
    case 'type':
      return (a) => a.type;
    case 'agent_id':
      return (a) => a.agent_id;
    case 'tool':
      return (a) => a.tool;
    case 'server':
      return (a) => a.server;
    case 'model':
      return (a) => a.model;
    default:
      return (a) => a.provider;
  }
}

/** Validates a path and returns its accessor, or a message saying what is wrong. */
export function compileFieldPath(path: string): { ok: true; get: Accessor } | { ok: false; message: string } {
  const segments = path.split('.');
  const root = segments[0] ?? '';
  if (!ROOTS.includes(root)) {
    return { ok: false, message: `field must start with one of ${ROOTS.join(', ')}; got "${path}"` };
  }
  if (segments.length > MAX_PATH_SEGMENTS) {
    return { ok: false, message: `field has ${segments.length} segments; at most ${MAX_PATH_SEGMENTS}` };
  }
  for (const s of segments) {
    if (!SEGMENT.test(s)) return { ok: false, message: `field "${path}" has an empty or invalid segment` };
  }
  if (SCALAR_ROOTS.has(root) && segments.length > 1) {
    return { ok: false, message: `"${root}" is a string and has no sub-fields` };
  }
  if (root === 'detections') {
    const kind = segments[1];
    if (kind === undefined || !DETECTION_KINDS.has(kind)) {
      return {
        ok: false,
        message: 'field must be detections.pii, .secrets, .unicode or .injection[.category]',
      };
    }
    if (segments.length > (kind === 'injection' ? 3 : 2)) {
      return { ok: false, message: `"detections.${kind}" has no deeper fields` };
    }
    const category = segments[2];
    if (category !== undefined && !(INJECTION_TYPES as readonly string[]).includes(category)) {
      return {
        ok: false,
        message: `unknown injection category "${category}" (known: ${INJECTION_TYPES.join(', ')})`,
      };
    }
  }
  const base = rootAccessor(root);
  const rest = segments.slice(1);
  const [k1, k2, k3] = rest;
  let get: Accessor;
  if (k1 === undefined) get = base;
  else if (k2 === undefined) get = (a) => step(base(a), k1);
  else if (k3 === undefined) get = (a) => step(step(base(a), k1), k2);
  else if (rest.length === 3) get = (a) => step(step(step(base(a), k1), k2), k3);
  else {
    get = (a) => {
      let v = base(a);
      for (const k of rest) {
        v = step(v, k);
        if (v === undefined) return undefined;
      }
      return v;
    };
  }
  return { ok: true, get };
}
