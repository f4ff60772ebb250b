// Dates of birth, only in context: a date within a short distance after "born", "birth", "birthday",
// "birthdate", "date of birth", "DOB" or "D.O.B.". Numeric (ISO, day/month/year either order) and
// written-month forms; the finding covers the date itself.

import { pushPii } from './pii-mask.js';
import type { Finding } from './types.js';

const CONTEXT = /\b(?:born|birth(?:day|date)?|dob|d\.o\.b\.?)/gi;
const MONTH =
  '(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?' +
  '|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)';
const DATE_AFTER = new RegExp(
  '[^\\n\\d;]{0,24}?\\b(' +
    '(?:19|20)\\d{2}[-/.](?:0?[1-9]|1[0-2])[-/.](?:0?[1-9]|[12]\\d|3[01])' +
    '|\\d{1,2}[-/.]\\d{1,2}[-/.](?:19|20)?\\d{2}' +
    `|${MONTH}\\.?\\s+\\d{1,2}(?:st|nd|rd|th)?,?\\s+(?:19|20)\\d{2}` +
    `|\\d{1,2}(?:st|nd|rd|th)?\\s+(?:of\\s+)?${MONTH}\\.?,?\\s+(?:19|20)\\d{2}` +
    ')(?![\\d])',
  'iy',
);
const DAY_MONTH_YEAR = /^(\d{1,2})[-/.](\d{1,2})[-/.]\d{2,4}$/;

export function scanDob(text: string, mask: number, out: Finding[]): void {
  CONTEXT.lastIndex = 0;
  for (let m = CONTEXT.exec(text); m !== null; m = CONTEXT.exec(text)) {
    DATE_AFTER.lastIndex = m.index + m[0].length;
    const d = DATE_AFTER.exec(text);
    if (d === null) continue;
    const date = d[1]!;
    const end = d.index + d[0].length;
    if (!plausibleNumericDate(date)) continue;
    pushPii(out, mask, 'dob', end - date.length, end);
    CONTEXT.lastIndex = end;
  }
}

/** For `a/b/yyyy` forms: both parts are 1..31 and at least one is a month (1..12). */
function plausibleNumericDate(date: string): boolean {
  const m = DAY_MONTH_YEAR.exec(date);
  if (m === null) return true;
  const a = Number(m[1]);
  const b = Number(m[2]);
  return a >= 1 && b >= 1 && a <= 31 && b <= 31 && (a <= 12 || b <= 12);
}
