import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse as parseYaml, type Tags } from 'yaml';
import { EgressPolicy } from '../export/ssrf.js';
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

/** The YAML keys the schema knows, dotted: each setting's own, and the mappings that hold them. */
const LEAF_KEYS: ReadonlySet<string> = new Set(SETTINGS.map((s) => s.yaml));
const MAPPING_KEYS: ReadonlySet<string> = new Set(
  SETTINGS.flatMap((s) => {
    const parts = s.yaml.split('.');
    return parts.slice(1).map((_, i) => parts.slice(0, i + 1).join('.'));
  }),
);

/** Edits from a to b, a swap of two neighbours counting as one (optimal string alignment). */
function editDistance(a: string, b: string): number {
  const w = b.length + 1;
  const d: number[] = [];
  const at = (i: number, j: number): number => d[i * w + j] ?? 0;
  for (let i = 0; i <= a.length; i++) {
    for (let j = 0; j <= b.length; j++) {
      if (i === 0 || j === 0) d[i * w + j] = i + j;
      else {
        let e = Math.min(
          at(i - 1, j) + 1,
          at(i, j - 1) + 1,
          at(i - 1, j - 1) + (a[i - 1] === b[j - 1] ? 0 : 1),
        );
        if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
          e = Math.min(e, at(i - 2, j - 2) + 1);
        d[i * w + j] = e;
      }
    }
  }
  return at(a.length, b.length);
}

/** The known key beside `path` that is a typo or two away from it, if there is one. */
function nearKey(path: string, prefix: string): string | undefined {
  const key = path.slice(prefix.length);
  let best: string | undefined;
  let bestDistance = Math.min(2, Math.ceil(key.length / 2) - 1);
  for (const known of [...LEAF_KEYS, ...MAPPING_KEYS]) {
    const sibling = known.slice(prefix.length);
    if (!known.startsWith(prefix) || sibling.includes('.')) continue;
    const distance = editDistance(key, sibling);
    if (distance <= bestDistance && (best === undefined || distance < bestDistance)) {
      best = known;
      bestDistance = distance;
    }
  }
  return best;
}

/** Reports every key of the YAML file the schema does not know, so a misspelt one is not ignored. */
function checkKeys(map: Raw, prefix: string, file: string, problems: ConfigProblem[]): void {
  for (const [key, value] of Object.entries(map)) {
    const path = prefix + key;
    if (LEAF_KEYS.has(path)) continue;
    if (MAPPING_KEYS.has(path)) {
      if (value !== null && typeof value === 'object' && !Array.isArray(value))
        checkKeys(value as Raw, `${path}.`, file, problems);
      else if (value !== null) problems.push({ path, message: 'must be a mapping' });
      continue;
    }
    const near = nearKey(path, prefix);
    problems.push({ path, message: `unknown key in ${file}${near ? `; did you mean ${near}?` : ''}` });
  }
}

/**
 * YAML's number forms (0x1F90, 1e3, .inf, 012) are read as text, as the environment's are: the
 * number settings then follow one rule, and a string setting keeps what was written.
 */
const PLAIN_NUMBERS_AS_TEXT = (tags: Tags): Tags =>
  tags.filter((tag) => typeof tag === 'string' || !/:(int|float)$/.test(tag.tag));

function readSetting(s: Setting, raw: unknown, problems: ConfigProblem[]): unknown {
  const where = s.env;
  if (raw === undefined || raw === null || raw === '') return s.default;
  switch (s.kind) {
    case 'string':
      // A YAML map or list is not text: String() would make it "[object Object]" or "a,b".
      if (typeof raw === 'object') {
        problems.push({ path: where, message: 'must be text, not a map or a list' });
        return undefined;
      }
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
      // Decimal digits only: Number() would also take 0x1F90, 1e3, 8080.0 and a blank as 0.
      const text = String(raw).trim();
      const n = /^\d+$/.test(text) ? Number(text) : Number.NaN;
      const min = s.kind === 'port' ? 0 : (s.min ?? 0);
      const max = s.kind === 'port' ? 65535 : Number.MAX_SAFE_INTEGER;
      if (!(n >= min && n <= max)) {
        problems.push({ path: where, message: `must be an integer from ${min} to ${max}` });
      }
      return n;
    }
  }
}

/** An absolute http(s) URL without credentials, query or fragment, normalised, no trailing slash. */
function baseUrl(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if (!/^https?:$/.test(url.protocol) || url.username || url.password || /[?#]/.test(text)) return undefined;
  return url.href.replace(/\/+$/, '');
}

/** S3 bucket names: 3–63 of lower-case letters, digits, dots and hyphens, a letter or digit at each end. */
const S3_BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * The archive's settings: what the chosen store needs is set and well formed, and a store's
 * settings are not set for another (an operator who set the bucket but not
 * SERVICE_AUDIT_ARCHIVE=s3 would otherwise archive nothing, or to disk, without knowing).
 */
function archiveProblems(v: Record<string, unknown>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const kind = v.SERVICE_AUDIT_ARCHIVE;
  const s3Vars = [
    'SERVICE_AUDIT_ARCHIVE_S3_BUCKET',
    'SERVICE_AUDIT_ARCHIVE_S3_REGION',
    'SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT',
  ];
  for (const name of s3Vars)
    if (kind !== 's3' && v[name] !== undefined)
      problems.push({ path: name, message: 'is read only with SERVICE_AUDIT_ARCHIVE=s3' });
  if (kind !== 'blob' && v.SERVICE_AUDIT_ARCHIVE_BLOB_URL !== undefined)
    problems.push({
      path: 'SERVICE_AUDIT_ARCHIVE_BLOB_URL',
      message: 'is read only with SERVICE_AUDIT_ARCHIVE=blob',
    });
  if (kind === 's3') {
    const bucket = v.SERVICE_AUDIT_ARCHIVE_S3_BUCKET as string | undefined;
    if (bucket === undefined)
      problems.push({
        path: 'SERVICE_AUDIT_ARCHIVE_S3_BUCKET',
        message: 'SERVICE_AUDIT_ARCHIVE=s3 needs the bucket',
      });
    else if (!S3_BUCKET.test(bucket))
      problems.push({
        path: 'SERVICE_AUDIT_ARCHIVE_S3_BUCKET',
        message: 'must be a bucket name: 3 to 63 of a-z 0-9 . -, starting and ending with a letter or digit',
      });
    for (const name of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY'])
      if (v[name] === undefined)
        problems.push({ path: name, message: 'SERVICE_AUDIT_ARCHIVE=s3 signs its requests with it: set it' });
    const endpoint = v.SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT as string | undefined;
    if (endpoint !== undefined && baseUrl(endpoint) === undefined)
      problems.push({
        path: 'SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT',
        message: 'must be an absolute http(s) URL without credentials, query or fragment',
      });
    const prefix = v.SERVICE_AUDIT_ARCHIVE_S3_PREFIX as string;
    if (prefix.startsWith('/') || prefix.length > 512)
      problems.push({
        path: 'SERVICE_AUDIT_ARCHIVE_S3_PREFIX',
        message: 'must be at most 512 characters and not start with /',
      });
  }
  if (kind === 'blob') {
    const raw = v.SERVICE_AUDIT_ARCHIVE_BLOB_URL as string | undefined;
    let url: URL | undefined;
    try {
      url = raw === undefined ? undefined : new URL(raw);
    } catch {
      url = undefined;
    }
    // The SAS travels in the URL: over plain HTTP only to this machine (the Azurite emulator).
    const loopback = url !== undefined && /^(127\.0\.0\.1|localhost|\[::1\])$/.test(url.hostname);
    if (raw === undefined)
      problems.push({
        path: 'SERVICE_AUDIT_ARCHIVE_BLOB_URL',
        message: 'SERVICE_AUDIT_ARCHIVE=blob needs the container SAS URL',
      });
    else if (
      url === undefined ||
      !(url.protocol === 'https:' || (url.protocol === 'http:' && loopback)) ||
      url.username !== '' ||
      url.password !== '' ||
      url.hash !== '' ||
      !url.searchParams.has('sig') ||
      url.pathname.replace(/\/+$/, '') === ''
    )
      // Not quoted: the value is a credential.
      problems.push({
        path: 'SERVICE_AUDIT_ARCHIVE_BLOB_URL',
        message:
          'must be an https container URL with a SAS token (…/<container>?sv=…&sig=…); http only to this machine',
      });
  }
  return problems;
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
      const parsed: unknown = parseYaml(readFileSync(configPath, 'utf8'), {
        customTags: PLAIN_NUMBERS_AS_TEXT,
      });
      if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) {
        file = parsed as Raw;
        checkKeys(file, '', configPath, problems);
      } else if (parsed != null)
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
  const publicUrl = v.SERVICE_PUBLIC_URL as string | undefined;
  const base = publicUrl === undefined ? undefined : baseUrl(publicUrl);
  if (publicUrl !== undefined && base === undefined) {
    problems.push({
      path: 'SERVICE_PUBLIC_URL',
      message: 'must be an absolute http(s) URL without credentials, query or fragment',
    });
  }
  const rpId =
    (v.SERVICE_WEBAUTHN_RP_ID as string | undefined) ?? (base ? new URL(base).hostname : 'localhost');
  // A domain name; its last label is never all digits, so an IPv4 address is refused (no RP id).
  // One derived from a SERVICE_PUBLIC_URL that names an address is kept: it starts, and a browser
  // refuses to sign for it (README: the signed tier needs a domain name).
  const explicitRpId = v.SERVICE_WEBAUTHN_RP_ID !== undefined;
  if (
    !/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/i.test(rpId) ||
    (explicitRpId && /(^|\.)\d+$/.test(rpId))
  ) {
    problems.push({ path: 'SERVICE_WEBAUTHN_RP_ID', message: `"${rpId}" is not a domain name` });
  }
  const origins = v.SERVICE_WEBAUTHN_ORIGINS as string[];
  const rpHost = rpId.toLowerCase();
  for (const o of origins) {
    const asBase = baseUrl(o);
    if (asBase === undefined || asBase !== o || new URL(o).pathname !== '/') {
      problems.push({
        path: 'SERVICE_WEBAUTHN_ORIGINS',
        message: `"${o}" is not an origin (scheme://host[:port], no path)`,
      });
      continue;
    }
    const host = new URL(o).hostname.toLowerCase();
    if (host !== rpHost && !host.endsWith(`.${rpHost}`))
      problems.push({
        path: 'SERVICE_WEBAUTHN_ORIGINS',
        message: `"${o}" is not on the RP id "${rpId}" or below it: a browser there cannot sign for it`,
      });
  }
  for (const pair of v.SERVICE_EGRESS_ALLOW as string[]) {
    if (!/^[^\s:]+:\d{1,5}$|^\[[0-9a-fA-F:.]+\]:\d{1,5}$/.test(pair)) {
      problems.push({ path: 'SERVICE_EGRESS_ALLOW', message: `"${pair}" is not host:port` });
    }
  }
  try {
    new EgressPolicy([], v.SERVICE_EGRESS_DENY as string[]);
  } catch (err) {
    problems.push({ path: 'SERVICE_EGRESS_DENY', message: (err as Error).message });
  }
  if (
    v.SERVICE_INJECTOR_PORT !== undefined &&
    !problems.some((p) => p.path === 'SERVICE_INJECTOR_PORT') &&
    (v.SERVICE_INJECTOR_TLS_CERT === undefined || v.SERVICE_INJECTOR_TLS_KEY === undefined)
  )
    problems.push({
      path: 'SERVICE_INJECTOR_PORT',
      message:
        'the injector serves HTTPS only: set SERVICE_INJECTOR_TLS_CERT and SERVICE_INJECTOR_TLS_KEY too',
    });
  if ((v.SERVICE_TLS_CERT === undefined) !== (v.SERVICE_TLS_KEY === undefined))
    problems.push({
      path: v.SERVICE_TLS_CERT === undefined ? 'SERVICE_TLS_CERT' : 'SERVICE_TLS_KEY',
      message: 'HTTPS needs both SERVICE_TLS_CERT and SERVICE_TLS_KEY',
    });
  const controlUrl = v.SERVICE_CONTROL_URL as string | undefined;
  if (controlUrl !== undefined && baseUrl(controlUrl) === undefined)
    problems.push({
      path: 'SERVICE_CONTROL_URL',
      message: 'must be an absolute http(s) URL without credentials, query or fragment',
    });
  const injectUrl = v.SERVICE_INJECT_CONTROL_URL as string | undefined;
  if (injectUrl !== undefined && baseUrl(injectUrl) === undefined)
    problems.push({
      path: 'SERVICE_INJECT_CONTROL_URL',
      message: 'must be an absolute http(s) URL without credentials, query or fragment',
    });
  // The listen address is no answer: in a pod, 127.0.0.1 is the sidecar itself.
  if (
    v.SERVICE_INJECTOR_PORT !== undefined &&
    !problems.some((p) => p.path === 'SERVICE_INJECTOR_PORT') &&
    injectUrl === undefined &&
    base === undefined
  )
    problems.push({
      path: 'SERVICE_INJECT_CONTROL_URL',
      message:
        'the injector tells sidecars where the control plane is: set SERVICE_INJECT_CONTROL_URL (or SERVICE_PUBLIC_URL)',
    });
  // Spans asked for must have somewhere to go: silently off is what an operator would not notice.
  const otlp = v.OTEL_EXPORTER_OTLP_ENDPOINT as string | undefined;
  if (otlp !== undefined && baseUrl(otlp) === undefined)
    problems.push({
      path: 'OTEL_EXPORTER_OTLP_ENDPOINT',
      message: 'must be an absolute http(s) URL without credentials, query or fragment',
    });
  if (v.SERVICE_OTLP_AUDIT_SPANS === '1' && otlp === undefined)
    problems.push({
      path: 'SERVICE_OTLP_AUDIT_SPANS',
      message: 'spans go to the OTLP collector: set OTEL_EXPORTER_OTLP_ENDPOINT too',
    });
  problems.push(...archiveProblems(v));
  if (problems.length > 0) throw new ConfigError(problems);

  const config: Config = {
    host: v.SERVICE_HOST as string,
    port: v.SERVICE_PORT as number,
    proxyPort: v.SERVICE_PROXY_PORT as number,
    health:
      v.SERVICE_HEALTH_PORT === undefined
        ? undefined
        : Object.freeze({
            host: (v.SERVICE_HEALTH_HOST as string | undefined) ?? (v.SERVICE_HOST as string),
            port: v.SERVICE_HEALTH_PORT as number,
          }),
    proxyCaExportDir:
      v.SERVICE_PROXY_CA_EXPORT_DIR === undefined
        ? undefined
        : resolve(v.SERVICE_PROXY_CA_EXPORT_DIR as string),
    dataDir: resolve(v.SERVICE_DATA_DIR as string),
    keysDir: resolve(v.SERVICE_KEYS_DIR as string),
    storeMinFreeMb: v.SERVICE_STORE_MIN_FREE_MB as number,
    tls:
      v.SERVICE_TLS_CERT === undefined
        ? undefined
        : Object.freeze({
            certFile: resolve(v.SERVICE_TLS_CERT as string),
            keyFile: resolve(v.SERVICE_TLS_KEY as string),
          }),
    controlUrl,
    controlCa: v.SERVICE_CONTROL_CA === undefined ? undefined : resolve(v.SERVICE_CONTROL_CA as string),
    sidecarToken: v.SERVICE_SIDECAR_TOKEN as string | undefined,
    snapshotPollMs: v.SERVICE_SNAPSHOT_POLL_MS as number,
    injector: Object.freeze({
      port: v.SERVICE_INJECTOR_PORT as number | undefined,
      tlsCert: v.SERVICE_INJECTOR_TLS_CERT as string | undefined,
      tlsKey: v.SERVICE_INJECTOR_TLS_KEY as string | undefined,
      image: v.SERVICE_SIDECAR_IMAGE as string,
      controlUrl: (v.SERVICE_INJECT_CONTROL_URL as string | undefined) ?? base,
      controlCaConfigMap: v.SERVICE_INJECT_CONTROL_CA_CONFIGMAP as string | undefined,
      nativeSidecar: v.SERVICE_INJECT_NATIVE_SIDECAR === 'true',
    }),
    bootstrapToken: token,
    egressAllow: Object.freeze([...(v.SERVICE_EGRESS_ALLOW as string[])]),
    egressDeny: Object.freeze([...(v.SERVICE_EGRESS_DENY as string[])]),
    region: v.SERVICE_REGION as string,
    httpServer: v.SERVICE_HTTP_SERVER as Config['httpServer'],
    logLevel: v.SERVICE_LOG_LEVEL as Config['logLevel'],
    publicUrl: base,
    webauthn: Object.freeze({ rpId, origins: Object.freeze([...origins]) }),
    metricsToken: v.SERVICE_METRICS_TOKEN as string | undefined,
    upstreamTimeoutMs: v.SERVICE_UPSTREAM_TIMEOUT_MS as number,
    clientStallMs: v.SERVICE_CLIENT_STALL_MS as number,
    upstreamConnections: v.SERVICE_UPSTREAM_CONNECTIONS as number,
    idempotencyTtlHours: v.SERVICE_IDEMPOTENCY_TTL_HOURS as number,
    idempotencyMaxMbPerOrg: v.SERVICE_IDEMPOTENCY_MAX_MB_PER_ORG as number,
    providerKeys: Object.freeze({
      openai: v.OPENAI_API_KEY as string | undefined,
      anthropic: v.ANTHROPIC_API_KEY as string | undefined,
    }),
    audit: Object.freeze({
      signingKey: v.SERVICE_AUDIT_SIGNING_KEY as string | undefined,
      keyPassword: v.SERVICE_AUDIT_KEY_PASSWORD as string | undefined,
      retentionDays: v.SERVICE_AUDIT_RETENTION_DAYS as number,
      rotationMaxMb: v.SERVICE_AUDIT_ROTATION_MAX_MB as number,
      otlpEndpoint:
        v.SERVICE_OTLP_AUDIT_SPANS === '1'
          ? (v.OTEL_EXPORTER_OTLP_ENDPOINT as string | undefined)
          : undefined,
      otlpHeaders: Object.freeze(otlpHeaders(v.OTEL_EXPORTER_OTLP_HEADERS as string | undefined)),
      archive: v.SERVICE_AUDIT_ARCHIVE as 'none' | 'local' | 's3' | 'blob',
      s3:
        v.SERVICE_AUDIT_ARCHIVE === 's3'
          ? Object.freeze({
              bucket: v.SERVICE_AUDIT_ARCHIVE_S3_BUCKET as string,
              region:
                (v.SERVICE_AUDIT_ARCHIVE_S3_REGION as string | undefined) ??
                (v.AWS_REGION as string | undefined) ??
                'us-east-1',
              endpoint: v.SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT as string | undefined,
              prefix: v.SERVICE_AUDIT_ARCHIVE_S3_PREFIX as string,
              accessKeyId: v.AWS_ACCESS_KEY_ID as string,
              secretAccessKey: v.AWS_SECRET_ACCESS_KEY as string,
              sessionToken: v.AWS_SESSION_TOKEN as string | undefined,
            })
          : undefined,
      blobUrl: v.SERVICE_AUDIT_ARCHIVE === 'blob' ? (v.SERVICE_AUDIT_ARCHIVE_BLOB_URL as string) : undefined,
      archiveDir: resolve(
        (v.SERVICE_AUDIT_ARCHIVE_DIR as string | undefined) ??
          resolve(v.SERVICE_DATA_DIR as string, 'archive'),
      ),
    }),
  };
  return Object.freeze(config);
}

/** `OTEL_EXPORTER_OTLP_HEADERS` as the OpenTelemetry spec has it: `k=v,k2=v2`, values percent-encoded. */
function otlpHeaders(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of (raw ?? '').split(',')) {
    const at = pair.indexOf('=');
    if (at <= 0) continue;
    const key = pair.slice(0, at).trim().toLowerCase();
    let value = pair.slice(at + 1).trim();
    try {
      value = decodeURIComponent(value);
    } catch {
      // kept as given
    }
    if (key !== '') out[key] = value;
  }
  return out;
}
