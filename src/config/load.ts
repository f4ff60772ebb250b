import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { type Config, ConfigError, type ConfigProblem, SETTINGS, type Setting } from './schema.js';

type Raw = Record<string, unknown>;

function yamlValue(doc: Raw, dotted: string): unknown {
  let cur: unknown = doc;
  for (const part of dotted.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Raw)[part];
  }
  return cur;
}

function readSetting(s: Setting, raw: unknown, problems: ConfigProblem[]): unknown {
  const where = s.env;
  if (raw === undefined || raw === null || raw === '') return s.default;
  switch (s.kind) {
    case 'string':
      return String(raw);
    case 'list':
      if (Array.isArray(raw)) return raw.map(String);
      return String(raw)
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean);
    case 'enum': {
      const v = String(raw);
      if (!s.values?.includes(v))
        problems.push({ path: where, message: `must be one of ${s.values?.join(', ')}` });
      return v;
    }
    case 'port':
    case 'int': {
      const n = typeof raw === 'number' ? raw : Number(String(raw));
      const min = s.kind === 'port' ? 0 : (s.min ?? 0);
      const max = s.kind === 'port' ? 65535 : Number.MAX_SAFE_INTEGER;
      if (!Number.isInteger(n) || n < min || n > max) {
        problems.push({ path: where, message: `must be an integer from ${min} to ${max}` });
      }
      return n;
    }
  }
}

/**
 * Environment first, then the YAML file named by SERVICE_CONFIG, then defaults. An empty variable
 * or a YAML key without a value counts as unset (`${VAR}` templates render unset ones as empty).
 * Every problem is reported at once in one ConfigError; the result is frozen.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const problems: ConfigProblem[] = [];
  let file: Raw = {};
  const configPath = env.SERVICE_CONFIG;
  if (configPath) {
    try {
      const parsed: unknown = parseYaml(readFileSync(configPath, 'utf8'));
      if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) file = parsed as Raw;
      else if (parsed != null)
        problems.push({ path: 'SERVICE_CONFIG', message: 'must contain a YAML mapping' });
    } catch (err) {
      problems.push({
        path: 'SERVICE_CONFIG',
        message: `cannot read ${configPath}: ${(err as Error).message}`,
      });
    }
  }
  const v: Record<string, unknown> = {};
  for (const s of SETTINGS) {
    const fromEnv = env[s.env];
    const raw = fromEnv === undefined || fromEnv === '' ? yamlValue(file, s.yaml) : fromEnv;
    v[s.env] = readSetting(s, raw, problems);
  }
  const token = v.SERVICE_BOOTSTRAP_TOKEN as string | undefined;
  if (token !== undefined && !/^gk_pat_[A-Za-z0-9]{40}$/.test(token)) {
    problems.push({
      path: 'SERVICE_BOOTSTRAP_TOKEN',
      message: 'must be gk_pat_ followed by 40 base62 characters',
    });
  }
  for (const pair of v.SERVICE_EGRESS_ALLOW as string[]) {
    if (!/^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:.]+\]:\d{1,5}$/.test(pair)) {
      problems.push({ path: 'SERVICE_EGRESS_ALLOW', message: `"${pair}" is not host:port` });
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);

  const config: Config = {
    host: v.SERVICE_HOST as string,
    port: v.SERVICE_PORT as number,
    proxyPort: v.SERVICE_PROXY_PORT as number,
    dataDir: resolve(v.SERVICE_DATA_DIR as string),
    keysDir: resolve(v.SERVICE_KEYS_DIR as string),
    controlUrl: v.SERVICE_CONTROL_URL as string | undefined,
    bootstrapToken: token,
    egressAllow: Object.freeze([...(v.SERVICE_EGRESS_ALLOW as string[])]),
    region: v.SERVICE_REGION as string,
    httpServer: v.SERVICE_HTTP_SERVER as Config['httpServer'],
    logLevel: v.SERVICE_LOG_LEVEL as Config['logLevel'],
    publicUrl: (v.SERVICE_PUBLIC_URL as string | undefined)?.replace(/\/+$/, ''),
    metricsToken: v.SERVICE_METRICS_TOKEN as string | undefined,
    upstreamTimeoutMs: v.SERVICE_UPSTREAM_TIMEOUT_MS as number,
    upstreamConnections: v.SERVICE_UPSTREAM_CONNECTIONS as number,
    idempotencyTtlHours: v.SERVICE_IDEMPOTENCY_TTL_HOURS as number,
    providerKeys: Object.freeze({
      openai: v.OPENAI_API_KEY as string | undefined,
      anthropic: v.ANTHROPIC_API_KEY as string | undefined,
    }),
    audit: Object.freeze({
      signingKey: v.SERVICE_AUDIT_SIGNING_KEY as string | undefined,
      keyPassword: v.SERVICE_AUDIT_KEY_PASSWORD as string | undefined,
      retentionDays: v.SERVICE_AUDIT_RETENTION_DAYS as number,
      rotationMaxMb: v.SERVICE_AUDIT_ROTATION_MAX_MB as number,
    }),
  };
  return Object.freeze(config);
}
