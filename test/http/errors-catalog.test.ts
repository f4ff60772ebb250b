import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ERROR_CATALOG } from '../../src/core/errors.js';

interface DocRow {
  readonly code: string;
  readonly status: number;
  readonly type: string;
}

// | `code` | HTTP | type | when |
const ROW_RE = /^\|\s*`([a-z_]+)`\s*\|\s*(\d{3})\s*\|\s*([a-z_]+)\s*\|[^|]+\|\s*$/;

function docRows(): DocRow[] {
  const text = readFileSync(join(process.cwd(), 'docs/errors.md'), 'utf8');
  const rows: DocRow[] = [];
  for (const line of text.split('\n')) {
    const m = ROW_RE.exec(line.trim());
    if (m) rows.push({ code: m[1] as string, status: Number(m[2]), type: m[3] as string });
  }
  return rows;
}

const rows = docRows();
const catalog = ERROR_CATALOG as Readonly<Record<string, { status: number; type: string }>>;

t.test('docs/errors.md has a table of codes', async (t) => {
  t.ok(rows.length >= 10, `found ${rows.length} rows`);
  const codes = rows.map((r) => r.code);
  t.same([...new Set(codes)].sort(), [...codes].sort(), 'no code is listed twice');
});

t.test('every documented code is in ERROR_CATALOG with the same status and type', async (t) => {
  for (const row of rows) {
    const entry = catalog[row.code];
    t.ok(entry, `${row.code} is in ERROR_CATALOG`);
    if (!entry) continue;
    t.equal(row.status, entry.status, `${row.code}: HTTP ${entry.status}`);
    t.equal(row.type, entry.type, `${row.code}: type ${entry.type}`);
  }
});

t.test('every ERROR_CATALOG code is documented with the same status and type', async (t) => {
  const byCode = new Map(rows.map((r) => [r.code, r]));
  for (const [code, entry] of Object.entries(catalog)) {
    const row = byCode.get(code);
    t.ok(row, `${code} is documented in docs/errors.md`);
    if (!row) continue;
    t.equal(row.status, entry.status, `${code}: documented HTTP status`);
    t.equal(row.type, entry.type, `${code}: documented type`);
  }
  t.same([...byCode.keys()].sort(), Object.keys(catalog).sort(), 'the two sets of codes are equal');
});

t.test('catalog statuses are error statuses', async (t) => {
  for (const [code, entry] of Object.entries(catalog)) {
    t.ok(entry.status >= 400 && entry.status <= 599, `${code}: ${entry.status}`);
    t.match(code, /^[a-z][a-z_]*$/, `${code} is snake_case`);
  }
});
