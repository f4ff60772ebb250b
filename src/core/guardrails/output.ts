import { type DetectionCategory, type DetectOptions, detect, type Finding } from '../detect/index.js';
import { ServiceError } from '../errors.js';
import type { CompiledPolicy, EffectiveFlags } from '../policy/index.js';

export type FindingAction = 'allow' | 'redact' | 'block';

/**
 * What the org's detectors (under the merged flags) do with findings in model output. Rules about
 * the call itself were decided on the input; output is governed by the detectors only: lockdown
 * blocks any PII or secret, `block` blocks, `redact` masks, `flag`/`off` let it through; observe
 * and warn never change output (they only record), but for the provider's own key (KeyWatch),
 * replaced in every mode.
 */
export interface OutputGuard {
  /** True when output must be held and scanned before release (enforce/lockdown with an active detector). */
  readonly active: boolean;
  readonly detectOptions: DetectOptions;
  /** The provider's key, looked for in every text scanned (undefined: the provider has none). */
  readonly keys?: KeyWatch | undefined;
  classify(f: Finding): FindingAction;
  /** The findings of one output text (the detectors under `detectOptions`). */
  scan(text: string): readonly Finding[];
}

function contentAction(action: string, types: ReadonlySet<string> | null, f: Finding): FindingAction {
  if (types !== null && !types.has(f.type)) return 'allow';
  return action === 'block' ? 'block' : action === 'redact' ? 'redact' : 'allow';
}

/** Where a secret of govgate's own is in a text (providers/upstream.ts KeyScrub). */
export interface KeyScrub {
  /** The longest form's length: a stream holds back at least this much (StreamGuard). */
  readonly longest: number;
  /** [start, end) of each occurrence in `text`. */
  places(text: string): readonly (readonly [number, number])[];
  /** How many characters at the end of `text` could begin the key (0 mostly): held back in a stream. */
  heldTail(text: string): number;
}

/** A provider's own key in model output: the finding type, always redacted (KeyWatch). */
export const PROVIDER_KEY_TYPE = 'provider_key';

/**
 * The provider's own key looked for in one answer's output (KeyScrub), whatever the mode and the
 * detectors: it is a finding of its own (`secret`, `provider_key`), always redacted, and `found`
 * says the answer held it (for its audit event). In a stream it is found across events, as the
 * guard holds text back by at least the key's length (StreamGuard).
 */
export class KeyWatch {
  found = false;

  constructor(readonly scrub: KeyScrub) {}

  /** The key's places in `text`, added to `detected` (the detectors' findings of it). */
  with(text: string, detected: readonly Finding[]): readonly Finding[] {
    const keys = this.scrub.places(text);
    if (keys.length === 0) return detected;
    this.found = true;
    const out: Finding[] = detected.slice();
    for (const [start, end] of keys) out.push({ category: 'secret', type: PROVIDER_KEY_TYPE, start, end });
    return out;
  }
}

const NO_DETECTORS: DetectOptions = { pii: false, secrets: false, injection: false, unicode: false };

export function outputGuard(policy: CompiledPolicy, flags: EffectiveFlags, key?: KeyScrub): OutputGuard {
  const mode = flags.mode;
  const enforcing = mode === 'enforce' || mode === 'lockdown';
  const lockdown = mode === 'lockdown';
  const d = policy.detectors;
  const piiOn = lockdown || flags.pii === 'block' || flags.pii === 'redact';
  const secretsOn = lockdown || flags.secrets === 'block' || flags.secrets === 'redact';
  const unicodeOn = d.unicode.action !== 'off';
  const detecting = enforcing && (piiOn || secretsOn || unicodeOn);
  const keys = key === undefined ? undefined : new KeyWatch(key);
  return {
    active: detecting || keys !== undefined,
    detectOptions: detecting
      ? { pii: piiOn, secrets: secretsOn, injection: false, unicode: unicodeOn }
      : NO_DETECTORS,
    keys,
    scan(text) {
      const found = detecting ? detect(text, this.detectOptions).findings : NO_FINDINGS;
      return keys === undefined ? found : keys.with(text, found);
    },
    classify(f) {
      if (f.type === PROVIDER_KEY_TYPE && f.category === 'secret') return 'redact';
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
    keys: guard.keys,
    scan(text) {
      const i = next;
      if (i < texts.length && texts[i] === text) {
        next = i + 1;
        const found = results[i] as readonly Finding[];
        return guard.keys === undefined ? found : guard.keys.with(text, found);
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
    keys: guard.keys,
    classify: (f) => guard.classify(f),
    scan(text) {
      if (text.length >= min) {
        const hit = cache.get(text);
        if (hit !== undefined) {
          cache.delete(text);
          return guard.keys === undefined ? hit : guard.keys.with(text, hit);
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
