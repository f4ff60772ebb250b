import type { S3Settings } from '../compliance/s3-archive.js';

/** The validated, frozen configuration every process reads. Built once by `loadConfig`. */
export interface Config {
  readonly host: string;
  readonly port: number;
  readonly proxyPort: number;
  /**
   * SERVICE_HEALTH_PORT and SERVICE_HEALTH_HOST: `govgate sidecar`'s probe listener, serving the
   * health routes only (a sidecar's API listens on the pod's loopback, where no kubelet probe
   * reaches); off without a port.
   */
  readonly health: { readonly host: string; readonly port: number } | undefined;
  /** SERVICE_PROXY_CA_EXPORT_DIR: where `govgate sidecar` also writes its proxy CA certificate. */
  readonly proxyCaExportDir: string | undefined;
  readonly dataDir: string;
  readonly keysDir: string;
  /** SERVICE_STORE_MIN_FREE_MB: the free space below which the store refuses writes. */
  readonly storeMinFreeMb: number;
  /** SERVICE_TLS_CERT and SERVICE_TLS_KEY: the API listener serves HTTPS with them (both or neither). */
  readonly tls: { readonly certFile: string; readonly keyFile: string } | undefined;
  readonly controlUrl: string | undefined;
  /** SERVICE_CONTROL_CA: more certificates the sidecar trusts for the control plane (PEM file). */
  readonly controlCa: string | undefined;
  /** `govgate sidecar`: its token for the control plane's sync API, and how often it pulls the snapshot. */
  readonly sidecarToken: string | undefined;
  readonly snapshotPollMs: number;
  /** `govgate control`: the sidecar injector (a Kubernetes mutating webhook over TLS); off without a port. */
  readonly injector: {
    readonly port: number | undefined;
    readonly tlsCert: string | undefined;
    readonly tlsKey: string | undefined;
    readonly image: string;
    readonly controlUrl: string | undefined;
    readonly controlCaConfigMap: string | undefined;
    readonly nativeSidecar: boolean;
  };
  readonly bootstrapToken: string | undefined;
  /** Exact `host:port` pairs that egress to otherwise-forbidden addresses may use. */
  readonly egressAllow: readonly string[];
  readonly egressDeny: readonly string[];
  readonly region: string;
  readonly httpServer: 'uws' | 'node';
  readonly logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  readonly publicUrl: string | undefined;
  /**
   * WebAuthn relying party id and the origins assertions may come from, as configured (none: the
   * origin of the service's base URL, known once it listens; see server.ts).
   */
  readonly webauthn: { readonly rpId: string; readonly origins: readonly string[] };
  readonly metricsToken: string | undefined;
  readonly upstreamTimeoutMs: number;
  readonly clientStallMs: number;
  readonly upstreamConnections: number;
  readonly idempotencyTtlHours: number;
  readonly idempotencyMaxMbPerOrg: number;
  readonly providerKeys: { readonly openai: string | undefined; readonly anthropic: string | undefined };
  readonly audit: {
    readonly signingKey: string | undefined;
    readonly keyPassword: string | undefined;
    readonly retentionDays: number;
    readonly rotationMaxMb: number;
    /** OTLP spans, one per governance decision: the collector's base URL (undefined: off). */
    readonly otlpEndpoint: string | undefined;
    readonly otlpHeaders: Readonly<Record<string, string>>;
    /** Where a retention run writes what it prunes: nowhere, `archiveDir`, `s3` or `blobUrl`. */
    readonly archive: 'none' | 'local' | 's3' | 'blob';
    readonly archiveDir: string;
    /** The S3 archive, with SERVICE_AUDIT_ARCHIVE=s3. */
    readonly s3: S3Settings | undefined;
    /** The Azure container SAS URL, with SERVICE_AUDIT_ARCHIVE=blob. */
    readonly blobUrl: string | undefined;
  };
}

export interface ConfigProblem {
  readonly path: string;
  readonly message: string;
}

export class ConfigError extends Error {
  readonly problems: readonly ConfigProblem[];
  constructor(problems: readonly ConfigProblem[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p.path}: ${p.message}`).join('\n')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

/** One row per setting: its environment variable, its YAML key, and how to read it. */
export interface Setting {
  readonly env: string;
  readonly yaml: string;
  readonly kind: 'string' | 'port' | 'int' | 'list' | 'enum';
  readonly values?: readonly string[];
  readonly min?: number;
  readonly default?: string | number | readonly string[];
  readonly secret?: boolean;
  readonly doc: string;
}

export const SETTINGS = [
  {
    env: 'SERVICE_HOST',
    yaml: 'host',
    kind: 'string',
    default: '127.0.0.1',
    doc: 'Address the API listens on',
  },
  {
    env: 'SERVICE_PORT',
    yaml: 'port',
    kind: 'port',
    default: 8620,
    doc: 'API port (control plane and gateway)',
  },
  {
    env: 'SERVICE_TLS_CERT',
    yaml: 'tls_cert',
    kind: 'string',
    doc: 'The API serves HTTPS with this certificate chain (PEM file; set SERVICE_TLS_KEY too). Checked at start; a renewal of either file is served to new connections within 30 s',
  },
  {
    env: 'SERVICE_TLS_KEY',
    yaml: 'tls_key',
    kind: 'string',
    doc: "SERVICE_TLS_CERT's private key (PEM file, unencrypted)",
  },
  {
    env: 'SERVICE_PROXY_PORT',
    yaml: 'proxy_port',
    kind: 'port',
    default: 15001,
    doc: '`govgate sidecar`: its forward-proxy port, for agents that use HTTPS_PROXY/HTTP_PROXY',
  },
  {
    env: 'SERVICE_PROXY_CA_EXPORT_DIR',
    yaml: 'proxy_ca_export_dir',
    kind: 'string',
    doc: "`govgate sidecar`: a directory where it writes its forward proxy's CA certificate (`ca.pem`, public) for the agents' containers to trust; unset: only in the keys dir",
  },
  {
    env: 'SERVICE_HEALTH_PORT',
    yaml: 'health_port',
    kind: 'port',
    doc: '`govgate sidecar`: a listener serving only `/health`, `/api/health/live` and `/api/health/ready`, for probes that cannot reach the API on loopback; unset: off',
  },
  {
    env: 'SERVICE_HEALTH_HOST',
    yaml: 'health_host',
    kind: 'string',
    doc: "Address SERVICE_HEALTH_PORT listens on (the injector sets 0.0.0.0: the kubelet probes the pod's IP); unset: SERVICE_HOST",
  },
  {
    env: 'SERVICE_DATA_DIR',
    yaml: 'data_dir',
    kind: 'string',
    default: './data',
    doc: 'Embedded LMDB store and audit JSONL logs; a relative path is from the working directory',
  },
  {
    env: 'SERVICE_KEYS_DIR',
    yaml: 'keys_dir',
    kind: 'string',
    default: 'keys',
    doc: 'Signing keys and vault key; a relative path is from the working directory. Back up and move with the data dir',
  },
  {
    env: 'SERVICE_STORE_MIN_FREE_MB',
    yaml: 'store_min_free_mb',
    kind: 'int',
    min: 0,
    default: 64,
    doc: 'Writes are refused (503, not ready) while the data dir has less free space than this; 0 waits for the disk to refuse them',
  },
  {
    env: 'SERVICE_CONTROL_URL',
    yaml: 'control_url',
    kind: 'string',
    doc: '`govgate sidecar`: the control plane it pulls its snapshot from, ships its audit log to and forwards /api to',
  },
  {
    env: 'SERVICE_CONTROL_CA',
    yaml: 'control_ca',
    kind: 'string',
    doc: "`govgate sidecar`: CA certificates (PEM file) it trusts for an https control plane, beside the system's",
  },
  {
    env: 'SERVICE_SIDECAR_TOKEN',
    yaml: 'sidecar_token',
    kind: 'string',
    secret: true,
    doc: '`govgate sidecar`: its token (gk_sc_…, from POST /api/sidecars on the control plane)',
  },
  {
    env: 'SERVICE_SNAPSHOT_POLL_MS',
    yaml: 'snapshot_poll_ms',
    kind: 'int',
    min: 100,
    default: 1000,
    doc: '`govgate sidecar`: how often it asks the control plane for a newer snapshot',
  },
  {
    env: 'SERVICE_INJECTOR_PORT',
    yaml: 'injector_port',
    kind: 'port',
    doc: '`govgate control`: the HTTPS port of the Kubernetes sidecar injector (a mutating webhook at /mutate); unset: off',
  },
  {
    env: 'SERVICE_INJECTOR_TLS_CERT',
    yaml: 'injector_tls_cert',
    kind: 'string',
    doc: "The injector's TLS certificate chain (PEM file), the one the webhook configuration's caBundle trusts; a renewal is served within 30 s",
  },
  {
    env: 'SERVICE_INJECTOR_TLS_KEY',
    yaml: 'injector_tls_key',
    kind: 'string',
    doc: "The injector's TLS private key (PEM file)",
  },
  {
    env: 'SERVICE_SIDECAR_IMAGE',
    yaml: 'sidecar_image',
    kind: 'string',
    default: 'govgate:latest',
    doc: 'The image the injector runs sidecars from',
  },
  {
    env: 'SERVICE_INJECT_CONTROL_URL',
    yaml: 'inject_control_url',
    kind: 'string',
    doc: 'The control plane URL injected sidecars use (default: SERVICE_PUBLIC_URL; with the injector on, one of the two is required)',
  },
  {
    env: 'SERVICE_INJECT_CONTROL_CA_CONFIGMAP',
    yaml: 'inject_control_ca_configmap',
    kind: 'string',
    doc: "A ConfigMap (key ca.crt, in each pod's namespace) whose CA injected sidecars trust for an https control plane",
  },
  {
    env: 'SERVICE_INJECT_NATIVE_SIDECAR',
    yaml: 'inject_native_sidecar',
    kind: 'enum',
    values: ['true', 'false'],
    default: 'true',
    doc: "`true`: the sidecar is injected as a native sidecar (an init container with `restartPolicy: Always`, Kubernetes 1.29+), started before the pod's containers; `false`: a plain container",
  },
  {
    env: 'SERVICE_BOOTSTRAP_TOKEN',
    yaml: 'bootstrap_token',
    kind: 'string',
    secret: true,
    doc: 'super_admin PAT created on first start (generated if unset)',
  },
  {
    env: 'SERVICE_EGRESS_ALLOW',
    yaml: 'egress_allow',
    kind: 'list',
    default: [],
    doc: 'host:port pairs exempt from the SSRF guard',
  },
  {
    env: 'SERVICE_EGRESS_DENY',
    yaml: 'egress_deny',
    kind: 'list',
    default: [],
    doc: 'More address ranges (CIDR) the SSRF guard refuses: the cluster networks when they are not private',
  },
  {
    env: 'SERVICE_REGION',
    yaml: 'region',
    kind: 'string',
    default: 'local',
    doc: 'Region reported by /health',
  },
  {
    env: 'SERVICE_HTTP_SERVER',
    yaml: 'http_server',
    kind: 'enum',
    values: ['uws', 'node'],
    default: 'uws',
    doc: 'HTTP engine; falls back to node when uWS cannot load',
  },
  {
    env: 'SERVICE_LOG_LEVEL',
    yaml: 'log_level',
    kind: 'enum',
    values: ['debug', 'info', 'warn', 'error', 'silent'],
    default: 'info',
    doc: 'Log level (JSON lines on stderr)',
  },
  {
    env: 'SERVICE_PUBLIC_URL',
    yaml: 'public_url',
    kind: 'string',
    doc: 'Base URL used in audit_url, an absolute http(s) URL (default: http://host:port, https with SERVICE_TLS_CERT)',
  },
  {
    env: 'SERVICE_WEBAUTHN_RP_ID',
    yaml: 'webauthn.rp_id',
    kind: 'string',
    doc: 'WebAuthn relying party id for signed-tier approvals: a domain name (default: the host of SERVICE_PUBLIC_URL, else localhost)',
  },
  {
    env: 'SERVICE_WEBAUTHN_ORIGINS',
    yaml: 'webauthn.origins',
    kind: 'list',
    default: [],
    doc: 'Origins of the pages approvers sign from, comma-separated (default: the origin of SERVICE_PUBLIC_URL, else of the listen address)',
  },
  {
    env: 'SERVICE_METRICS_TOKEN',
    yaml: 'metrics_token',
    kind: 'string',
    secret: true,
    doc: 'Bearer token required by /api/metrics when set',
  },
  {
    env: 'SERVICE_UPSTREAM_TIMEOUT_MS',
    yaml: 'upstream_timeout_ms',
    kind: 'int',
    min: 1,
    default: 120000,
    doc: 'Upstream header/body timeout (504)',
  },
  {
    env: 'SERVICE_CLIENT_STALL_MS',
    yaml: 'client_stall_ms',
    kind: 'int',
    min: 1,
    default: 6000,
    doc: 'A stream client 256 KB behind that takes nothing for this long is cut off (408)',
  },
  {
    env: 'SERVICE_UPSTREAM_CONNECTIONS',
    yaml: 'upstream_connections',
    kind: 'int',
    min: 1,
    default: 128,
    doc: 'Keep-alive connections per org and upstream origin',
  },
  {
    env: 'SERVICE_IDEMPOTENCY_TTL_HOURS',
    yaml: 'idempotency_ttl_hours',
    kind: 'int',
    min: 1,
    default: 24,
    doc: 'How long Idempotency-Key replays are kept',
  },
  {
    env: 'SERVICE_IDEMPOTENCY_MAX_MB_PER_ORG',
    yaml: 'idempotency_max_mb_per_org',
    kind: 'int',
    min: 1,
    default: 256,
    doc: "Answers an org's Idempotency-Key replays may keep; past it an answer is not kept (its replay is a 409)",
  },
  {
    env: 'OPENAI_API_KEY',
    yaml: 'openai_api_key',
    kind: 'string',
    secret: true,
    doc: 'First start: configure openai for org default',
  },
  {
    env: 'ANTHROPIC_API_KEY',
    yaml: 'anthropic_api_key',
    kind: 'string',
    secret: true,
    doc: 'First start: configure anthropic for org default',
  },
  {
    env: 'SERVICE_AUDIT_SIGNING_KEY',
    yaml: 'audit.signing_key',
    kind: 'string',
    secret: true,
    doc: 'Audit signing key (PEM)',
  },
  {
    env: 'SERVICE_AUDIT_KEY_PASSWORD',
    yaml: 'audit.key_password',
    kind: 'string',
    secret: true,
    doc: "Encrypts the generated audit and mandate key PEMs, and the sidecar's proxy CA key, at rest (vault.key stays plain)",
  },
  {
    env: 'SERVICE_AUDIT_RETENTION_DAYS',
    yaml: 'audit.retention_days',
    kind: 'int',
    min: 0,
    default: 365,
    doc: "Audit retention in days (0 = keep forever); pruned only by an operator's run (`POST /api/settings/retention/run`)",
  },
  {
    env: 'SERVICE_AUDIT_ARCHIVE',
    yaml: 'audit.archive',
    kind: 'enum',
    values: ['none', 'local', 's3', 'blob'],
    default: 'none',
    doc: 'Where a retention run puts the pruned events, as gzipped JSONL: nowhere, `SERVICE_AUDIT_ARCHIVE_DIR`, an S3 bucket (`SERVICE_AUDIT_ARCHIVE_S3_*`), or an Azure blob container (`SERVICE_AUDIT_ARCHIVE_BLOB_URL`)',
  },
  {
    env: 'SERVICE_AUDIT_ARCHIVE_DIR',
    yaml: 'audit.archive_dir',
    kind: 'string',
    doc: 'The local archive (default `<data dir>/archive`); one `<org>/<org>-<from>-<to>.jsonl.gz` per run. Erasure and DSAR read it whatever `SERVICE_AUDIT_ARCHIVE` says',
  },
  {
    env: 'SERVICE_AUDIT_ARCHIVE_S3_BUCKET',
    yaml: 'audit.archive_s3_bucket',
    kind: 'string',
    doc: 'With `SERVICE_AUDIT_ARCHIVE=s3`: the bucket; objects `<prefix><org>/<org>-<from>-<to>.jsonl.gz`, signed with AWS Signature V4 using `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`',
  },
  {
    env: 'SERVICE_AUDIT_ARCHIVE_S3_REGION',
    yaml: 'audit.archive_s3_region',
    kind: 'string',
    doc: "The bucket's region (default `AWS_REGION`, else `us-east-1`)",
  },
  {
    env: 'SERVICE_AUDIT_ARCHIVE_S3_ENDPOINT',
    yaml: 'audit.archive_s3_endpoint',
    kind: 'string',
    doc: 'An S3-compatible endpoint (MinIO, Ceph, R2…), addressed path-style; unset for AWS (`https://<bucket>.s3.<region>.amazonaws.com`)',
  },
  {
    env: 'SERVICE_AUDIT_ARCHIVE_S3_PREFIX',
    yaml: 'audit.archive_s3_prefix',
    kind: 'string',
    default: '',
    doc: 'Prepended to every object key (`audit/` gives `audit/<org>/…`)',
  },
  {
    env: 'SERVICE_AUDIT_ARCHIVE_BLOB_URL',
    yaml: 'audit.archive_blob_url',
    kind: 'string',
    secret: true,
    doc: 'With `SERVICE_AUDIT_ARCHIVE=blob`: an Azure container SAS URL (`https://<account>.blob.core.windows.net/<container>?sv=…&sig=…`, read, write and list permissions); never shown',
  },
  {
    env: 'AWS_ACCESS_KEY_ID',
    yaml: 'aws_access_key_id',
    kind: 'string',
    doc: 'The S3 archive: the access key id',
  },
  {
    env: 'AWS_SECRET_ACCESS_KEY',
    yaml: 'aws_secret_access_key',
    kind: 'string',
    secret: true,
    doc: 'The S3 archive: the secret access key; never shown',
  },
  {
    env: 'AWS_SESSION_TOKEN',
    yaml: 'aws_session_token',
    kind: 'string',
    secret: true,
    doc: 'The S3 archive: a session token, with temporary credentials; never shown',
  },
  {
    env: 'AWS_REGION',
    yaml: 'aws_region',
    kind: 'string',
    doc: "The S3 archive: the bucket's region when `SERVICE_AUDIT_ARCHIVE_S3_REGION` is unset",
  },
  {
    env: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    yaml: 'otel.endpoint',
    kind: 'string',
    doc: 'OTLP/HTTP collector base URL; spans go to `<endpoint>/v1/traces` when `SERVICE_OTLP_AUDIT_SPANS` is 1',
  },
  {
    env: 'OTEL_EXPORTER_OTLP_HEADERS',
    yaml: 'otel.headers',
    kind: 'string',
    secret: true,
    doc: 'Headers sent to the collector: `key=value,key2=value2` (values percent-decoded)',
  },
  {
    env: 'SERVICE_OTLP_AUDIT_SPANS',
    yaml: 'otel.audit_spans',
    kind: 'enum',
    values: ['0', '1'],
    default: '0',
    doc: '`1`: one span per governance decision to the OTLP collector (off by default)',
  },
  {
    env: 'SERVICE_AUDIT_ROTATION_MAX_MB',
    yaml: 'audit.rotation_max_mb',
    kind: 'int',
    min: 1,
    default: 100,
    doc: 'JSONL log rotation size (rotated files are kept)',
  },
] as const satisfies readonly Setting[];
