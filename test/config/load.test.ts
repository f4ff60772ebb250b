import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import t from 'tap';
import { type Config, ConfigError, loadConfig, SETTINGS } from '../../src/config/index.js';
import { tempDir } from '../helpers/tmp.js';

/** A YAML file in a fresh directory, removed after the test; returns its path. */
function yamlFile(t: Test, text: string): string {
  const dir = tempDir('govgate-config-');
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

t.test('unknown YAML keys are problems, at every level the schema knows, named by their path', async (t) => {
  const path = yamlFile(
    t,
    'prot: 9999\nlog_levl: debug\ncolour: blue\naudit:\n  retention_day: 7\n  rotation_max_mb: 5\n',
  );
  const err = t.throws(() => loadConfig({ SERVICE_CONFIG: path, SERVICE_PORT: '99999' })) as ConfigError;
  t.type(err, ConfigError);
  const byPath = new Map(err.problems.map((p) => [p.path, p.message]));
  t.match(byPath.get('prot'), /^unknown key in .*govgate\.yaml; did you mean port\?$/);
  t.match(byPath.get('log_levl'), /did you mean log_level\?$/);
  t.match(byPath.get('audit.retention_day'), /did you mean audit\.retention_days\?$/);
  t.match(byPath.get('colour'), /^unknown key in .*govgate\.yaml$/, 'no guess when nothing is close');
  t.ok(byPath.has('SERVICE_PORT'), 'reported together with the other problems');
  t.equal(err.problems.length, 5);
  t.match(err.message, /- audit\.retention_day: unknown key/);

  const notMapping = yamlFile(t, 'audit: 7\n');
  const e2 = t.throws(() => loadConfig({ SERVICE_CONFIG: notMapping })) as ConfigError;
  t.same(e2.problems, [{ path: 'audit', message: 'must be a mapping' }]);
});

t.test('a file naming every known key is accepted', async (t) => {
  const path = yamlFile(
    t,
    [
      'host: 0.0.0.0',
      'port: 9100',
      'proxy_port: 15002',
      'data_dir: /tmp/gg-data',
      'keys_dir: /tmp/gg-keys',
      'control_url: http://control.example:8620',
      `bootstrap_token: gk_pat_${'a'.repeat(40)}`,
      'egress_allow: [127.0.0.1:9999]',
      'region: eu-west-1',
      'http_server: node',
      'log_level: warn',
      'public_url: https://gw.example.com',
      'metrics_token: m',
      'upstream_timeout_ms: 5000',
      'upstream_connections: 8',
      'idempotency_ttl_hours: 2',
      'openai_api_key: sk-x',
      'anthropic_api_key: sk-ant-x',
      'audit:',
      '  signing_key: pem',
      '  key_password: pw',
      '  retention_days: 30',
      '  rotation_max_mb: 5',
      '',
    ].join('\n'),
  );
  const c = loadConfig({ SERVICE_CONFIG: path });
  t.equal(c.proxyPort, 15002);
  t.same(c.egressAllow, ['127.0.0.1:9999']);
  t.equal(c.audit.retentionDays, 30);
  t.equal(c.audit.keyPassword, 'pw');
});

t.test(
  'number settings take plain decimal integers only, from the environment and the YAML file',
  async (t) => {
    const numeric: Record<string, (c: Config) => number> = {
      SERVICE_PORT: (c) => c.port,
      SERVICE_PROXY_PORT: (c) => c.proxyPort,
      SERVICE_HEALTH_PORT: (c) => c.health?.port as number,
      SERVICE_STORE_MIN_FREE_MB: (c) => c.storeMinFreeMb,
      SERVICE_SNAPSHOT_POLL_MS: (c) => c.snapshotPollMs,
      SERVICE_INJECTOR_PORT: (c) => c.injector.port as number,
      SERVICE_UPSTREAM_TIMEOUT_MS: (c) => c.upstreamTimeoutMs,
      SERVICE_CLIENT_STALL_MS: (c) => c.clientStallMs,
      SERVICE_UPSTREAM_CONNECTIONS: (c) => c.upstreamConnections,
      SERVICE_IDEMPOTENCY_TTL_HOURS: (c) => c.idempotencyTtlHours,
      SERVICE_IDEMPOTENCY_MAX_MB_PER_ORG: (c) => c.idempotencyMaxMbPerOrg,
      SERVICE_AUDIT_RETENTION_DAYS: (c) => c.audit.retentionDays,
      SERVICE_AUDIT_ROTATION_MAX_MB: (c) => c.audit.rotationMaxMb,
    };
    t.same(
      Object.keys(numeric),
      SETTINGS.filter((s) => s.kind === 'port' || s.kind === 'int').map((s) => s.env),
      'every number setting is checked',
    );
    const bad = ['0x1F90', '1e3', '8080.0', '+80', '-1', ' ', '1_000', '0b11', '0o17', 'Infinity', '12abc'];
    for (const [name, read] of Object.entries(numeric)) {
      for (const value of bad) {
        const err = t.throws(() => loadConfig({ [name]: value }), `${name}=${value}`) as ConfigError;
        t.same(
          err.problems?.map((p) => p.path),
          [name],
        );
      }
      // (the snapshot poll takes 100 ms and more)
      const [text, value] = name === 'SERVICE_SNAPSHOT_POLL_MS' ? [' 0250 ', 250] : [' 0090 ', 90];
      // (the injector's port comes with its TLS files)
      const tls =
        name === 'SERVICE_INJECTOR_PORT'
          ? {
              SERVICE_INJECTOR_TLS_CERT: 'c',
              SERVICE_INJECTOR_TLS_KEY: 'k',
              SERVICE_PUBLIC_URL: 'https://g.example',
            }
          : {};
      t.equal(
        read(loadConfig({ [name]: text, ...tls })),
        value,
        `${name}: spaces around the digits are fine`,
      );
    }

    const path = yamlFile(
      t,
      'port: 0x1F90\nproxy_port: "1e3"\nupstream_timeout_ms: 1.5e4\naudit:\n  retention_days: .inf\n',
    );
    const err = t.throws(() => loadConfig({ SERVICE_CONFIG: path })) as ConfigError;
    t.same(
      err.problems.map((p) => p.path),
      ['SERVICE_PORT', 'SERVICE_PROXY_PORT', 'SERVICE_UPSTREAM_TIMEOUT_MS', 'SERVICE_AUDIT_RETENTION_DAYS'],
      'YAML numbers follow the same rule, quoted or not',
    );
    const ok = yamlFile(t, 'port: 9100\nproxy_port: " 9101 "\nmetrics_token: 0x1F\nregion: 012\n');
    const c = loadConfig({ SERVICE_CONFIG: ok });
    t.equal(c.port, 9100);
    t.equal(c.proxyPort, 9101);
    t.equal(c.metricsToken, '0x1F', 'a string setting keeps the text as written');
    t.equal(c.region, '012');
  },
);

t.test('SERVICE_PUBLIC_URL is an absolute http(s) URL without credentials, query or fragment', async (t) => {
  const bad = [
    'not-a-url',
    '/relative/path',
    'gw.example.com',
    'ftp://gw.example.com',
    'javascript:alert(1)',
    'https://user:pw@gw.example.com',
    'https://user@gw.example.com',
    'https://gw.example.com/?x=1',
    'https://gw.example.com/?',
    'https://gw.example.com/#top',
  ];
  for (const value of bad) {
    const err = t.throws(() => loadConfig({ SERVICE_PUBLIC_URL: value }), value) as ConfigError;
    t.same(err.problems, [
      {
        path: 'SERVICE_PUBLIC_URL',
        message: 'must be an absolute http(s) URL without credentials, query or fragment',
      },
    ]);
  }
  const good: [string, string][] = [
    ['https://gw.example.com/', 'https://gw.example.com'],
    ['http://127.0.0.1:8620', 'http://127.0.0.1:8620'],
    ['https://gw.example.com/govgate/', 'https://gw.example.com/govgate'],
    ['HTTPS://GW.Example.com', 'https://gw.example.com'],
  ];
  for (const [value, base] of good) t.equal(loadConfig({ SERVICE_PUBLIC_URL: value }).publicUrl, base, value);
  const err = t.throws(() =>
    loadConfig({ SERVICE_CONFIG: yamlFile(t, 'public_url: not-a-url\n') }),
  ) as ConfigError;
  t.same(
    err.problems.map((p) => p.path),
    ['SERVICE_PUBLIC_URL'],
    'from the YAML file too',
  );
});

t.test(
  'WebAuthn: the RP id is a domain name, the origins are origins; defaults follow the public URL',
  async (t) => {
    const defaults = loadConfig({});
    t.same(
      defaults.webauthn,
      { rpId: 'localhost', origins: [] },
      "origins as configured: the service adds its base URL's origin when none is",
    );
    t.same(loadConfig({ SERVICE_PUBLIC_URL: 'https://gw.example.com/govgate' }).webauthn, {
      rpId: 'gw.example.com',
      origins: [],
    });
    t.same(
      loadConfig({
        SERVICE_WEBAUTHN_RP_ID: 'example.com',
        SERVICE_WEBAUTHN_ORIGINS: 'https://console.example.com,https://example.com:8443',
      }).webauthn,
      { rpId: 'example.com', origins: ['https://console.example.com', 'https://example.com:8443'] },
    );
    // A browser signs for an RP id only from an origin whose host is that domain or below it.
    for (const origin of ['http://localhost:3000', 'https://other.example.org', 'https://notexample.com'])
      t.same(
        (
          t.throws(
            () => loadConfig({ SERVICE_WEBAUTHN_RP_ID: 'example.com', SERVICE_WEBAUTHN_ORIGINS: origin }),
            origin,
          ) as ConfigError
        ).problems.map((p) => p.path),
        ['SERVICE_WEBAUTHN_ORIGINS'],
        `${origin} is not under example.com`,
      );
    for (const rpId of [
      '127.0.0.1:8620',
      '127.0.0.1',
      '10.1.2.3',
      'https://example.com',
      'exa mple.com',
      '-bad.com',
      'example.com.',
    ])
      t.same(
        (t.throws(() => loadConfig({ SERVICE_WEBAUTHN_RP_ID: rpId }), rpId) as ConfigError).problems.map(
          (p) => p.path,
        ),
        ['SERVICE_WEBAUTHN_RP_ID'],
        rpId,
      );
    for (const origin of [
      'console.example.com',
      'https://console.example.com/',
      'https://c.example.com/app',
      'ftp://c.example.com',
    ])
      t.same(
        (
          t.throws(() => loadConfig({ SERVICE_WEBAUTHN_ORIGINS: origin }), origin) as ConfigError
        ).problems.map((p) => p.path),
        ['SERVICE_WEBAUTHN_ORIGINS'],
        origin,
      );
    const yaml = loadConfig({
      SERVICE_CONFIG: yamlFile(t, 'webauthn:\n  rp_id: example.org\n  origins: [https://a.example.org]\n'),
    });
    t.same(yaml.webauthn, { rpId: 'example.org', origins: ['https://a.example.org'] }, 'from the YAML file');
  },
);

t.test('the injector needs a control plane URL its sidecars can reach, and a valid one', async (t) => {
  const injector = {
    SERVICE_INJECTOR_PORT: '8443',
    SERVICE_INJECTOR_TLS_CERT: 'c',
    SERVICE_INJECTOR_TLS_KEY: 'k',
  };
  const none = t.throws(() => loadConfig(injector)) as ConfigError;
  t.same(
    none.problems.map((p) => p.path),
    ['SERVICE_INJECT_CONTROL_URL'],
    'the listen address is no answer (in a pod it is the sidecar itself)',
  );
  const bad = t.throws(() =>
    loadConfig({ ...injector, SERVICE_INJECT_CONTROL_URL: 'not a url' }),
  ) as ConfigError;
  t.same(
    bad.problems.map((p) => p.path),
    ['SERVICE_INJECT_CONTROL_URL'],
  );
  t.equal(
    loadConfig({ ...injector, SERVICE_PUBLIC_URL: 'https://govgate.example' }).injector.controlUrl,
    'https://govgate.example',
  );
  const health = loadConfig({ SERVICE_HEALTH_PORT: '15020' }).health;
  t.same(health, { host: '127.0.0.1', port: 15020 }, 'the health listener takes SERVICE_HOST by default');
});

t.test('OTLP spans asked for need a valid collector URL; a YAML map is not text', async (t) => {
  const paths = (env: Record<string, string>) =>
    (t.throws(() => loadConfig(env)) as ConfigError).problems.map((p) => p.path);
  t.same(paths({ SERVICE_OTLP_AUDIT_SPANS: '1' }), ['SERVICE_OTLP_AUDIT_SPANS'], 'spans with nowhere to go');
  t.same(paths({ SERVICE_OTLP_AUDIT_SPANS: '1', OTEL_EXPORTER_OTLP_ENDPOINT: 'notaurl' }), [
    'OTEL_EXPORTER_OTLP_ENDPOINT',
  ]);
  t.equal(
    loadConfig({ SERVICE_OTLP_AUDIT_SPANS: '1', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).audit
      .otlpEndpoint,
    'http://collector:4318',
  );
  const path = yamlFile(t, 'region:\n  a: 1\nmetrics_token: [x, y]\n');
  t.same(paths({ SERVICE_CONFIG: path }), ['SERVICE_REGION', 'SERVICE_METRICS_TOKEN']);
});

t.test(
  'the S3 and blob archives: what each needs is set and well formed, and nothing is set for another',
  async (t) => {
    const problems = (env: Record<string, string>) =>
      (t.throws(() => loadConfig(env)) as ConfigError).problems.map((p) => `${p.path}: ${p.message}`);
    const keys = { AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY: 'secret/value/1234567890' };
    t.match(problems({ SERVICE_AUDIT_ARCHIVE: 's3' }), [
      /^SERVICE_AUDIT_ARCHIVE_S3_BUCKET: /,
      /^AWS_ACCESS_KEY_ID: /,
      /^AWS_SECRET_ACCESS_KEY: /,
    ]);
    t.match(
      problems({ SERVICE_AUDIT_ARCHIVE: 's3', SERVICE_AUDIT_ARCHIVE_S3_BUCKET: 'Bad_Bucket', ...keys }),
      [/^SERVICE_AUDIT_ARCHIVE_S3_BUCKET: must be a bucket name/],
    );
    t.match(
      problems({
        SERVICE_AUDIT_ARCHIVE: 's3',
        SERVICE_AUDIT_ARCHIVE_S3_BUCKET: 'audit-archive',
        SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT: 'http://minio:9000?x=1',
        ...keys,
      }),
      [/^SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT: /],
    );
    t.match(problems({ SERVICE_AUDIT_ARCHIVE_S3_BUCKET: 'audit-archive' }), [
      /^SERVICE_AUDIT_ARCHIVE_S3_BUCKET: is read only with SERVICE_AUDIT_ARCHIVE=s3/,
    ]);
    const s3 = loadConfig({
      SERVICE_AUDIT_ARCHIVE: 's3',
      SERVICE_AUDIT_ARCHIVE_S3_BUCKET: 'audit-archive',
      AWS_REGION: 'eu-central-1',
      ...keys,
    }).audit.s3;
    t.match(s3, { bucket: 'audit-archive', region: 'eu-central-1', endpoint: undefined, prefix: '' });

    const sas = 'sv=2021-12-02&sr=c&sp=rwl&sig=c2VjcmV0';
    t.match(problems({ SERVICE_AUDIT_ARCHIVE: 'blob' }), [/^SERVICE_AUDIT_ARCHIVE_BLOB_URL: .*needs/]);
    for (const bad of [
      `http://account.blob.core.windows.net/audit?${sas}`,
      'https://account.blob.core.windows.net/audit?sv=2021-12-02',
      `https://account.blob.core.windows.net/?${sas}`,
      'not a url',
    ]) {
      const found = problems({ SERVICE_AUDIT_ARCHIVE: 'blob', SERVICE_AUDIT_ARCHIVE_BLOB_URL: bad });
      t.match(found, [/^SERVICE_AUDIT_ARCHIVE_BLOB_URL: must be an https container URL/], bad);
      t.notOk(found.join('').includes('c2VjcmV0'), 'the SAS is not quoted');
    }
    t.equal(
      loadConfig({
        SERVICE_AUDIT_ARCHIVE: 'blob',
        SERVICE_AUDIT_ARCHIVE_BLOB_URL: `http://127.0.0.1:10000/devstoreaccount1/audit?${sas}`,
      }).audit.archive,
      'blob',
      'plain HTTP to this machine (the Azurite emulator)',
    );
  },
);
