// Rule-set text (YAML, or JSON as a YAML subset) to a plain object, every syntax error listed.

import { parseDocument } from 'yaml';
import type { Problem } from './types.js';

export const MAX_RULE_SET_TEXT = 1024 * 1024;

export type TextResult = { ok: true; value: unknown } | { ok: false; problems: Problem[] };

export function parseRuleSetText(text: string): TextResult {
  if (text.length > MAX_RULE_SET_TEXT) {
    return {
      ok: false,
      problems: [{ path: '', message: `rule set text exceeds ${MAX_RULE_SET_TEXT} characters` }],
    };
  }
  const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: true });
  if (doc.errors.length > 0) {
    return {
      ok: false,
      // Pretty messages end their first line with "at line L, column C:".
      problems: doc.errors.map((e) => ({
        path: '',
        message: (e.message.split('\n')[0] ?? '').replace(/:$/, ''),
      })),
    };
  }
  try {
    // Aliases are bounded so a small document cannot expand into a huge one.
    return { ok: true, value: doc.toJS({ maxAliasCount: 100 }) };
  } catch (err) {
    return { ok: false, problems: [{ path: '', message: (err as Error).message }] };
  }
}
