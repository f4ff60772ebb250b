// Checksum and plausibility validators run on candidates only: Luhn, IBAN mod-97, Shannon entropy,
// SSN number rules and payment-card issuer prefixes.

/** Luhn (mod 10) over the decimal digits of `s[start, end)`, skipping any other character. */
export function luhnValid(s: string, start = 0, end = s.length): boolean {
  let sum = 0;
  let count = 0;
  let double = false;
  for (let i = end - 1; i >= start; i--) {
    const d = s.charCodeAt(i) - 48;
    if (d < 0 || d > 9) continue;
    let v = d;
    if (double) {
      v *= 2;
      if (v > 9) v -= 9;
    }
    sum += v;
    double = !double;
    count++;
  }
  return count > 1 && sum % 10 === 0;
}

/**
 * Issuer prefix and length check for a compact card number (digits only). Covers Visa, Mastercard
 * (51–55, 2221–2720), American Express, Discover, Diners Club, JCB, UnionPay and Maestro ranges.
 */
export function cardPrefixValid(digits: string): boolean {
  const n = digits.length;
  if (n < 13 || n > 19) return false;
  const p2 = Number(digits.slice(0, 2));
  const p4 = Number(digits.slice(0, 4));
  const p6 = Number(digits.slice(0, 6));
  const first = digits.charCodeAt(0) - 48;
  if (first === 4) return n === 13 || n === 16 || n === 19;
  if (p2 >= 51 && p2 <= 55) return n === 16;
  if (p4 >= 2221 && p4 <= 2720) return n === 16;
  if (p2 === 34 || p2 === 37) return n === 15;
  if (p4 === 6011 || p2 === 65 || (p4 >= 6440 && p4 <= 6499) || (p6 >= 622126 && p6 <= 622925)) {
    return n >= 16;
  }
  if (p2 === 62) return n >= 16;
  if ((p4 >= 3000 && p4 <= 3059) || p2 === 36 || p2 === 38 || p2 === 39) return n >= 14;
  if (p4 >= 3528 && p4 <= 3589) return n >= 16;
  if (p4 === 5018 || p4 === 5020 || p4 === 5038 || p4 === 5893 || p4 === 6304) return n >= 13;
  if (p4 === 6759 || p4 === 6761 || p4 === 6762 || p4 === 6763) return n >= 13;
  return false;
}

// Total IBAN length per country (ISO 13616 registry).
const IBAN_LENGTHS: ReadonlyMap<string, number> = new Map(
  (
    'AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BI27 BR29 BY28 CH21 CR22 CY28 CZ24 DE22 DJ27 DK18 ' +
    'DO28 EE20 EG29 ES24 FI18 FK18 FO18 FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21 HU28 IE22 IL23 IQ23 ' +
    'IS26 IT27 JO30 KW30 KZ20 LB28 LC32 LI21 LT20 LU20 LV21 LY25 MC27 MD24 ME22 MK19 MN20 MR27 MT31 ' +
    'MU30 NI28 NL18 NO15 OM23 PK24 PL28 PS29 PT25 QA29 RO24 RS22 RU33 SA24 SC31 SD18 SE24 SI19 SK24 ' +
    'SM27 SO23 ST25 SV28 TL23 TN24 TR26 UA29 VA22 VG24 XK20 YE30'
  )
    .split(' ')
    .map((e): [string, number] => [e.slice(0, 2), Number(e.slice(2))]),
);

/** Expected total length of an IBAN for a two-letter country code, or 0 when unknown. */
export function ibanLength(country: string): number {
  return IBAN_LENGTHS.get(country) ?? 0;
}

/**
 * ISO 7064 mod 97-10 remainder of a compact IBAN (uppercase letters and digits, no spaces): the first
 * four characters move to the end and letters count as 10..35. A valid IBAN gives 1; -1 on bad input.
 */
export function ibanMod97(iban: string): number {
  const n = iban.length;
  if (n < 5) return -1;
  let rem = 0;
  for (let k = 0; k < n; k++) {
    const c = iban.charCodeAt((k + 4) % n);
    if (c >= 48 && c <= 57) rem = (rem * 10 + (c - 48)) % 97;
    else if (c >= 65 && c <= 90) rem = (rem * 100 + (c - 55)) % 97;
    else return -1;
  }
  return rem;
}

/** Country, length, check digits and mod-97 of a compact uppercase IBAN. */
export function ibanValid(iban: string): boolean {
  const len = ibanLength(iban.slice(0, 2));
  if (len === 0 || iban.length !== len) return false;
  const c2 = iban.charCodeAt(2);
  const c3 = iban.charCodeAt(3);
  if (c2 < 48 || c2 > 57 || c3 < 48 || c3 > 57) return false;
  return ibanMod97(iban) === 1;
}

const counts = new Uint32Array(128);

/** Shannon entropy in bits per character of `s[start, end)` (0 for an empty range). */
export function shannonEntropy(s: string, start = 0, end = s.length): number {
  const n = end - start;
  if (n <= 0) return 0;
  let other: Map<number, number> | undefined;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c < 128) counts[c]!++;
    else {
      other ??= new Map();
      other.set(c, (other.get(c) ?? 0) + 1);
    }
  }
  let h = 0;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c >= 128) continue;
    const k = counts[c]!;
    if (k === 0) continue;
    const p = k / n;
    h -= p * Math.log2(p);
    counts[c] = 0;
  }
  if (other) {
    for (const k of other.values()) {
      const p = k / n;
      h -= p * Math.log2(p);
    }
  }
  return h;
}

/**
 * US Social Security number rules (SSA): area not 000, 666 or 900–999; group not 00; serial not 0000.
 */
export function ssnValid(area: number, group: number, serial: number): boolean {
  if (area === 0 || area === 666 || area >= 900) return false;
  return group !== 0 && serial !== 0;
}
