import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import t from 'tap';
import { ConfigError, loadConfig } from '../../src/config/index.js';

/** A YAML file in a fresh directory, removed after the test; returns its path. */
function yamlFile(t: Test, text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-config-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'govgate.yaml');
  writeFileSync(path, text);
  return path;
}

t.test(
  'an empty environment variable counts as unset: the YAML value applies, else the default',
  async (t) => {
    const path = yamlFile(
      t,
      'host: 0.0.0.0\nport: 9100\nregion: eu-west-1\nmetrics_token: s3cret\naudit:\n  rotation_max_mb: 5\n',
    );
    const empty = {
      SERVICE_CONFIG: path,
      SERVICE_HOST: '',
      SERVICE_PORT: '',
      SERVICE_REGION: '',
      SERVICE_METRICS_TOKEN: '',
      SERVICE_AUDIT_ROTATION_MAX_MB: '',
    };
    const c = loadConfig(empty);
    t.equal(c.host, '0.0.0.0');
    t.equal(c.port, 9100);
    t.equal(c.region, 'eu-west-1');
    t.equal(c.metricsToken, 's3cret', '/api/metrics stays protected');
    t.equal(c.audit.rotationMaxMb, 5);

    const { SERVICE_CONFIG: _, ...noFile } = empty;
    const d = loadConfig(noFile);
    t.equal(d.host, '127.0.0.1', 'without a file, the defaults');
    t.equal(d.port, 8620);
    t.equal(d.region, 'local');
    t.equal(d.metricsToken, undefined);
    t.equal(d.audit.rotationMaxMb, 100);

    const set = loadConfig({ SERVICE_CONFIG: path, SERVICE_PORT: '9200', SERVICE_METRICS_TOKEN: 'other' });
    t.equal(set.port, 9200, 'a variable with a value still comes first');
    t.equal(set.metricsToken, 'other');
  },
);

t.test('a YAML key without a value counts as unset too', async (t) => {
  const path = yamlFile(t, 'port:\nmetrics_token:\nregion: ""\n');
  const c = loadConfig({ SERVICE_CONFIG: path });
  t.equal(c.port, 8620);
  t.equal(c.metricsToken, undefined, 'not the text "null"');
  t.equal(c.region, 'local');
});

t.test('problems are thrown together as one ConfigError', async (t) => {
  const err = t.throws(() => loadConfig({ SERVICE_PORT: 'x', SERVICE_LOG_LEVEL: 'loud' })) as ConfigError;
  t.type(err, ConfigError);
  t.same(
    err.problems.map((p) => p.path),
    ['SERVICE_PORT', 'SERVICE_LOG_LEVEL'],
  );
});
