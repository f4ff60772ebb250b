// Bit mask of the PII types a scan should report, derived once per call from DetectOptions.pii.

import type { Finding, PiiType } from './types.js';

export const PII_BIT: Readonly<Record<PiiType, number>> = {
  email: 1,
  phone: 2,
  card: 4,
  iban: 8,
  ssn: 16,
  ipv4: 32,
  ipv6: 64,
  dob: 128,
};

export const ALL_PII = 255;

const BIT_BY_NAME: ReadonlyMap<string, number> = new Map(Object.entries(PII_BIT));

/** The mask for `true` / `false` / a list of type names (unknown names are ignored). */
export function piiMask(opt: boolean | readonly string[] | undefined): number {
  if (opt === undefined || opt === true) return ALL_PII;
  if (opt === false) return 0;
  let mask = 0;
  for (const t of opt) {
    mask |= BIT_BY_NAME.get(t) ?? 0;
  }
  return mask;
}

/** Appends a PII finding when its type is in the mask. */
export function pushPii(out: Finding[], mask: number, type: PiiType, start: number, end: number): void {
  if ((mask & PII_BIT[type]) !== 0) out.push({ category: 'pii', type, start, end });
}
