import { type DetectionCategory, type DetectOptions, detect, type Finding } from '../detect/index.js';
import { ServiceError } from '../errors.js';
import type { CompiledPolicy, EffectiveFlags } from '../policy/index.js';

export type FindingAction = 'allow' | 'redact' | 'block';

/**
 * What the org's detectors (under the merged flags) do with findings in model output. Rules about
 * the call itself were decided on the input; output is governed by the detectors only: lockdown
 * blocks any PII or secret, `block` blocks, `redact` masks, `flag`/`off` let it through; observe
 * and warn never change output (they only record).
 */
export interface OutputGuard {
  /** True when output must be held and scanned before release (enforce/lockdown with an active detector). */
  readonly active: boolean;
  readonly detectOptions: DetectOptions;
  classify(f: Finding): FindingAction;
  /** The findings of one output text (the detectors under `detectOptions`). */
  scan(text: string): readonly Finding[];
}

function contentAction(action: string, types: ReadonlySet<string> | null, f: Finding): FindingAction {
  if (types !== null && !types.has(f.type)) return 'allow';
  return action === 'block' ? 'block' : action === 'redact' ? 'redact' : 'allow';
}

export function outputGuard(policy: CompiledPolicy, flags: EffectiveFlags): OutputGuard {
  const mode = flags.mode;
  const enforcing = mode === 'enforce' || mode === 'lockdown';
  const lockdown = mode === 'lockdown';
  const d = policy.detectors;
  const piiOn = lockdown || flags.pii === 'block' || flags.pii === 'redact';
  const secretsOn = lockdown || flags.secrets === 'block' || flags.secrets === 'redact';
  const unicodeOn = d.unicode.action !== 'off';
  const active = enforcing && (piiOn || secretsOn || unicodeOn);
  return {
    active,
    detectOptions: { pii: piiOn, secrets: secretsOn, injection: false, unicode: unicodeOn },
    scan(text) {
      return detect(text, this.detectOptions).findings;
    },
    classify(f) {
      if (!enforcing) return 'allow';
      switch (f.category) {
        case 'pii':
          return lockdown ? 'block' : contentAction(flags.pii, d.pii.types, f);
        case 'secret':
          return lockdown ? 'block' : contentAction(flags.secrets, d.secrets.types, f);
        case 'unicode':
          return unicodeOn ? 'redact' : 'allow';
        default:
          return 'allow';
      }
    },
  };
}

export const REDACTABLE: readonly DetectionCategory[] = ['pii', 'secret', 'unicode'];

/**
 * `guard` with its scans answered from `results`, the findings of `texts` computed elsewhere (a
 * worker), in the order the guard asks for them; a text asked out of that order is scanned here.
 */
export function prescannedGuard(
  guard: OutputGuard,
  texts: readonly string[],
  results: readonly (readonly Finding[])[],
): OutputGuard {
  let next = 0;
  return {
    active: guard.active,
    detectOptions: guard.detectOptions,
    classify: (f) => guard.classify(f),
    scan(text) {
      const i = next;
      if (i < texts.length && texts[i] === text) {
        next = i + 1;
        return results[i] as readonly Finding[];
      }
      return guard.scan(text);
    },
  };
}

/** `guard` recording the texts it is asked to scan into `texts`, finding nothing in them. */
export function recordingGuard(guard: OutputGuard, texts: string[]): OutputGuard {
  return {
    active: guard.active,
    detectOptions: guard.detectOptions,
    classify: (f) => guard.classify(f),
    scan(text) {
      texts.push(text);
      return NO_FINDINGS;
    },
  };
}

const NO_FINDINGS: readonly Finding[] = [];

/** The findings of large texts scanned elsewhere (a worker), for `cachedGuard` to answer from. */
export interface Prescans {
  readonly cache: Map<string, readonly Finding[]>;
  /**
   * Large texts are scanned elsewhere: one missing from `cache` is refused (see cachedGuard), not
   * scanned here. Off until the first prescan (a governor used without a worker scans inline).
   */
  offloading: boolean;
}

/**
 * `guard` with the scans of texts of at least `min` characters answered from `prescans.cache`
 * (findings computed elsewhere, a worker), each once; smaller texts are scanned here and never
 * look in the cache, so the streamed answer's windows pay nothing for it. While `offloading`, a
 * large text that was not scanned first is not scanned here either: it would hold the event loop,
 * and every other call, for as long as its scan takes; the answer fails instead (502).
 */
export function cachedGuard(guard: OutputGuard, prescans: Prescans, min: number): OutputGuard {
  const cache = prescans.cache;
  return {
    active: guard.active,
    detectOptions: guard.detectOptions,
    classify: (f) => guard.classify(f),
    scan(text) {
      if (text.length >= min) {
        const hit = cache.get(text);
        if (hit !== undefined) {
          cache.delete(text);
          return hit;
        }
        if (prescans.offloading)
          throw new ServiceError(
            'upstream_error',
            `the provider's answer holds a text of ${text.length} characters in a form govgate does not scan off the event loop; it is not passed on`,
          );
      }
      return guard.scan(text);
    },
  };
}
