import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { SETTINGS } from '../../src/config/index.js';

interface Row {
  readonly yaml: string;
  readonly default: string;
  readonly meaning: string;
}

// | `SERVICE_HOST` | `host` | `127.0.0.1` | Address the API listens on |
const ROW_RE = /^\|\s*`([A-Z][A-Z0-9_]*)`\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*(.+?)\s*\|$/;

/** The README's configuration table, by variable. */
function readmeRows(): Map<string, Row> {
  const text = readFileSync(join(process.cwd(), 'README.md'), 'utf8');
  const section = text.slice(text.indexOf('## Configuration'));
  const rows = new Map<string, Row>();
  for (const line of section.slice(0, section.indexOf('\n## ')).split('\n')) {
    const m = ROW_RE.exec(line.trim());
    if (m)
      rows.set(m[1] as string, { yaml: m[2] as string, default: m[3] as string, meaning: m[4] as string });
  }
  return rows;
}

/** Environment variables read by name anywhere in src (`env.X`, `process.env.X`). */
function variablesReadInSrc(): Set<string> {
  const names = new Set<string>();
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts')) {
        for (const m of readFileSync(path, 'utf8').matchAll(/\benv\.([A-Z][A-Z0-9_]*)/g))
          names.add(m[1] as string);
      }
    }
  };
  walk(join(process.cwd(), 'src'));
  return names;
}

const rows = readmeRows();

t.test('the README configuration table shows every setting as the schema has it', async (t) => {
  for (const s of SETTINGS) {
    const row = rows.get(s.env);
    if (!row) {
      t.fail(`${s.env} is missing from the README table`);
      continue;
    }
    const def =
      'default' in s && !(Array.isArray(s.default) && s.default.length === 0) ? `\`${s.default}\`` : '—';
    t.same(row, { yaml: `\`${s.yaml}\``, default: def, meaning: s.doc }, s.env);
  }
});

t.test('the table also lists the variables read outside the schema, and none is reserved', async (t) => {
  const known = new Set<string>(SETTINGS.map((s) => s.env));
  for (const name of variablesReadInSrc()) t.ok(rows.has(name), `${name} is read by src and in the table`);
  // Every variable has an effect: none is listed as reserved for later.
  for (const [name, row] of rows) {
    t.notMatch(row.meaning, /Reserved/, `${name} has an effect`);
    if (!known.has(name)) t.equal(row.yaml, '—', `${name} is read from the environment only`);
  }
  t.match(rows.get('SERVICE_KEYS_DIR')?.meaning, /working directory/, 'a relative keys dir is explained');
});
