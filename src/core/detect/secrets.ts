// Secret scan: prefixed vendor tokens and JWTs (one alternation), private key blocks, credential URLs,
// then secret-named assignments for whatever those did not already cover.

import { scanAssignedSecrets } from './secrets-generic.js';
import { scanCredentialUrls, scanPrivateKeys, scanTokens } from './secrets-tokens.js';
import { SpanCursor, sortedFrom } from './span-cursor.js';
import type { Finding } from './types.js';

/** Appends secret findings to `out`, unsorted. */
export function scanSecrets(text: string, out: Finding[]): void {
  if (text.length < 8) return;
  const from = out.length;
  scanTokens(text, out);
  scanPrivateKeys(text, out);
  if (text.indexOf('://') !== -1) scanCredentialUrls(text, out, new SpanCursor(sortedFrom(out, from)));
  scanAssignedSecrets(text, out, new SpanCursor(sortedFrom(out, from)));
}
