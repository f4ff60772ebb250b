// The policy engine's view of a detection result: distinct types per family and the injection scores.

import type { DetectionResult, DetectionSummary } from './types.js';

export function summarize(result: DetectionResult): DetectionSummary {
  const pii = new Set<string>();
  const secrets = new Set<string>();
  const unicode = new Set<string>();
  for (const f of result.findings) {
    if (f.category === 'pii') pii.add(f.type);
    else if (f.category === 'secret') secrets.add(f.type);
    else if (f.category === 'unicode') unicode.add(f.type);
  }
  return {
    pii: [...pii].sort(),
    secrets: [...secrets].sort(),
    injection: { ...result.injection },
    unicode: [...unicode].sort(),
  };
}
