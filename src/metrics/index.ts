import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/** The effects a rule can have: the only label of the fail-closed gauge, so it has four series. */
const EFFECTS = ['block', 'require_approval', 'redact', 'allow'] as const;

const LATENCY_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];

/** What the content-scan metrics read (ScanPool). */
export interface ScanCounts {
  readonly offloaded: number;
  readonly pending: number;
  readonly dropped: number;
  readonly refused: { readonly org: number; readonly all: number };
}

/** Prometheus metrics. Label children are cached so the request path does no label hashing. */
export class Metrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'route' | 'method' | 'status'>;
  private readonly duration: Histogram<'route'>;
  private readonly phases: Histogram<'phase'>;
  private readonly upstream: Histogram<'provider' | 'outcome'>;
  readonly openStreams: Gauge;
  /** Read at each scrape: conditions that fail closed in active policy versions, by rule effect. */
  private failClosedSource: () => ReadonlyMap<string, number> = () => new Map();
  private storeWritable: () => boolean = () => true;
  private approvalStreams: () => number = () => 0;
  private spans: () => { readonly sent: number; readonly failed_batches: number; readonly dropped: number } =
    () => ({
      sent: 0,
      failed_batches: 0,
      dropped: 0,
    });
  private exports: () => {
    readonly sent: number;
    readonly failed: number;
    readonly dropped: number;
    readonly queued: number;
  } = () => ({ sent: 0, failed: 0, dropped: 0, queued: 0 });
  private alerts: () => {
    readonly delivered: number;
    readonly failed: number;
    readonly dropped: number;
    readonly queued: number;
  } = () => ({ delivered: 0, failed: 0, dropped: 0, queued: 0 });
  private scans: () => ScanCounts = () => ({
    offloaded: 0,
    pending: 0,
    dropped: 0,
    refused: { org: 0, all: 0 },
  });
  /** The listeners' certificates in force (watchCertificate), and their gauge once one is. */
  private readonly certificates = new Map<string, () => Date>();
  private certificateGauge: Gauge<'listener'> | undefined;
  private readonly tlsReloadCounter = new Counter({
    name: 'govgate_tls_reloads_total',
    help:
      'Renewed TLS certificates found on disk, by listener (api, injector): "reloaded" served to ' +
      'new connections, "refused" (unreadable, a key not the certificate\'s, expired...) with the one in force kept',
    labelNames: ['listener', 'outcome'] as const,
    registers: [this.registry],
  });
  private readonly requestChildren = new Map<string, Counter.Internal>();
  private readonly durationChildren = new Map<string, Histogram.Internal<'route'>>();
  private readonly phaseChildren = new Map<string, Histogram.Internal<'phase'>>();
  private readonly upstreamChildren = new Map<string, Histogram.Internal<'provider' | 'outcome'>>();

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'govgate_' });
    this.requests = new Counter({
      name: 'govgate_http_requests_total',
      help: 'HTTP requests by route, method and status',
      labelNames: ['route', 'method', 'status'],
      registers: [this.registry],
    });
    this.duration = new Histogram({
      name: 'govgate_http_request_duration_seconds',
      help: 'Time from request to response end, by route',
      labelNames: ['route'],
      buckets: LATENCY_BUCKETS,
      registers: [this.registry],
    });
    this.phases = new Histogram({
      name: 'govgate_phase_duration_seconds',
      help: 'Time spent in each request phase',
      labelNames: ['phase'],
      buckets: LATENCY_BUCKETS,
      registers: [this.registry],
    });
    this.upstream = new Histogram({
      name: 'govgate_upstream_duration_seconds',
      help: 'Provider call latency (to the full answer, or to the end of a stream)',
      labelNames: ['provider', 'outcome'],
      buckets: LATENCY_BUCKETS,
      registers: [this.registry],
    });
    this.openStreams = new Gauge({
      name: 'govgate_open_streams',
      help: 'Streamed responses in progress',
      registers: [this.registry],
    });
    const writable = (): boolean => this.storeWritable();
    new Gauge({
      name: 'govgate_store_writable',
      help:
        '1 while the store takes writes; 0 while it refuses them for want of storage (less free ' +
        'space than SERVICE_STORE_MIN_FREE_MB, or a failed commit) and requests that write get 503',
      registers: [this.registry],
      collect() {
        this.set(writable() ? 1 : 0);
      },
    });
    const approvalStreams = (): number => this.approvalStreams();
    new Gauge({
      name: 'govgate_approval_streams',
      help: 'Approval decision streams open (GET /v1/me/approvals/stream) and long polls waiting',
      registers: [this.registry],
      collect() {
        this.set(approvalStreams());
      },
    });
    const spans = () => this.spans();
    new Counter({
      name: 'govgate_otlp_spans_total',
      help: 'Governance-decision spans by outcome: sent to the OTLP collector, or dropped from a full queue',
      labelNames: ['status'],
      registers: [this.registry],
      collect() {
        this.reset();
        const s = spans();
        this.inc({ status: 'sent' }, s.sent);
        this.inc({ status: 'dropped' }, s.dropped);
      },
    });
    new Counter({
      name: 'govgate_otlp_batches_failed_total',
      help: 'OTLP span batches the collector did not take after their retries',
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(spans().failed_batches);
      },
    });
    const exports = () => this.exports();
    new Counter({
      name: 'govgate_export_events_total',
      help: 'Audit events sent to SIEM and export destinations (in delivered batches)',
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(exports().sent);
      },
    });
    new Counter({
      name: 'govgate_export_batches_failed_total',
      help: 'Export batches that failed after their retries (each is sent again later)',
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(exports().failed);
      },
    });
    new Counter({
      name: 'govgate_export_events_dropped_total',
      help: 'Audit events retention pruned before an export destination read them',
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(exports().dropped);
      },
    });
    new Gauge({
      name: 'govgate_export_events_queued',
      help: "Audit events committed after the export destinations' cursors, summed: still to read",
      registers: [this.registry],
      collect() {
        this.set(exports().queued);
      },
    });
    const alerts = () => this.alerts();
    new Counter({
      name: 'govgate_alert_deliveries_total',
      help: 'Alert webhook deliveries by outcome (delivered, failed after its retries, dropped from a full queue)',
      labelNames: ['status'],
      registers: [this.registry],
      collect() {
        this.reset();
        const a = alerts();
        for (const status of ['delivered', 'failed', 'dropped'] as const) this.inc({ status }, a[status]);
      },
    });
    new Gauge({
      name: 'govgate_alerts_queued',
      help: 'Alerts waiting for delivery, all destinations',
      registers: [this.registry],
      collect() {
        this.set(alerts().queued);
      },
    });
    const scans = (): ScanCounts => this.scans();
    new Counter({
      name: 'govgate_content_scans_offloaded_total',
      help:
        "Scans large enough to run in the scan worker, off the event loop: a call's content, or a " +
        'whole answer of its provider',
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(scans().offloaded);
      },
    });
    new Gauge({
      name: 'govgate_content_scans_pending',
      help: 'Large scans waiting for or in the scan worker (one scan at a time)',
      registers: [this.registry],
      collect() {
        this.set(scans().pending);
      },
    });
    new Counter({
      name: 'govgate_content_scans_dropped_total',
      help: 'Large scans dropped from the queue before their turn: their client went away',
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(scans().dropped);
      },
    });
    new Counter({
      name: 'govgate_content_scans_refused_total',
      help:
        'Large calls refused because the scan queue was full: limit "org" past their org\'s share ' +
        '(429), "all" past the whole queue (503)',
      labelNames: ['limit'],
      registers: [this.registry],
      collect() {
        const refused = scans().refused;
        this.reset();
        this.labels('org').inc(refused.org);
        this.labels('all').inc(refused.all);
      },
    });
    // Labelled by the effect of the rule, not by org: the org count is unbounded, and the warn log
    // line and the policy API name the org, the version and the rule.
    const source = (): ReadonlyMap<string, number> => this.failClosedSource();
    new Gauge({
      name: 'govgate_policy_fail_closed_conditions',
      help:
        'Conditions of active policy versions (as compiled by this process) whose regex the ' +
        'linear-time engine refuses, so that they fail closed; by the effect of their rule',
      labelNames: ['effect'],
      registers: [this.registry],
      collect() {
        const counts = source();
        for (const effect of EFFECTS) this.set({ effect }, counts.get(effect) ?? 0);
      },
    });
  }

  /**
   * A listener's certificate in force (`api`: SERVICE_TLS_CERT; `injector`:
   * SERVICE_INJECTOR_TLS_CERT), read at each scrape: a renewal replaces it while the process runs
   * (tls-reload.ts). Alert well before it expires: a renewal refused keeps it.
   */
  watchCertificate(listener: 'api' | 'injector', notAfter: () => Date): void {
    this.certificates.set(listener, notAfter);
    if (this.certificateGauge !== undefined) return;
    const certificates = this.certificates;
    this.certificateGauge = new Gauge({
      name: 'govgate_tls_certificate_expiry_timestamp_seconds',
      help: "When a listener's TLS certificate in force stops being valid (Unix time), by listener (api, injector); a renewed one is read within a minute",
      labelNames: ['listener'] as const,
      registers: [this.registry],
      collect() {
        for (const [listener, read] of certificates)
          this.set({ listener }, Math.floor(read().getTime() / 1000));
      },
    });
  }

  /**
   * Counts a listener's certificate renewals (tls-reload.ts): put in force, or refused (the one in
   * force stays). Both series exist from the start, at 0, so `increase()` sees the first refusal.
   */
  tlsReloads(listener: 'api' | 'injector'): (outcome: 'reloaded' | 'refused') => void {
    const reloaded = this.tlsReloadCounter.labels(listener, 'reloaded');
    const refused = this.tlsReloadCounter.labels(listener, 'refused');
    reloaded.inc(0);
    refused.inc(0);
    return (outcome) => (outcome === 'reloaded' ? reloaded : refused).inc();
  }

  /**
   * When the sidecar's forward proxy CA stops being valid (read at each scrape: the sidecar renews
   * it while it runs). Agents hold the copy they read at their start, so alert well before it.
   */
  watchProxyCa(notAfter: () => Date): void {
    new Gauge({
      name: 'govgate_sidecar_proxy_ca_expiry_timestamp_seconds',
      help: "When the sidecar forward proxy's CA certificate stops being valid (Unix time); it is renewed 30 days before",
      registers: [this.registry],
      collect() {
        this.set(Math.floor(notAfter().getTime() / 1000));
      },
    });
  }

  /** A sidecar's sync with its control plane (only a sidecar registers these). */
  watchSidecar(
    source: () => {
      readonly unshipped: number;
      readonly snapshotAgeSeconds: number;
      readonly snapshotFailures: number;
      readonly shipFailures: number;
      readonly diverged: boolean;
      readonly clockSkewSeconds: number;
    },
  ): void {
    new Gauge({
      name: 'govgate_sidecar_clock_skew_seconds',
      help: "The control plane's clock minus this sidecar's, from the Date of its last answer (second resolution)",
      registers: [this.registry],
      collect() {
        this.set(source().clockSkewSeconds);
      },
    });
    new Gauge({
      name: 'govgate_sidecar_log_diverged',
      help: 'The control plane holds this sidecar log further than its store does (restored from a copy): nothing written since can be shipped (1), or not (0)',
      registers: [this.registry],
      collect() {
        this.set(source().diverged ? 1 : 0);
      },
    });
    new Gauge({
      name: 'govgate_sidecar_unshipped_events',
      help: 'Audit events committed in the sidecar log and not yet acknowledged by the control plane',
      registers: [this.registry],
      collect() {
        this.set(source().unshipped);
      },
    });
    new Gauge({
      name: 'govgate_sidecar_snapshot_age_seconds',
      help: 'Seconds since the control plane last confirmed the snapshot in force (-1: none in force)',
      registers: [this.registry],
      collect() {
        this.set(source().snapshotAgeSeconds);
      },
    });
    new Gauge({
      name: 'govgate_sidecar_sync_failures',
      help: 'Consecutive failed snapshot pulls and audit pushes (0 once one succeeds)',
      labelNames: ['kind'],
      registers: [this.registry],
      collect() {
        const s = source();
        this.set({ kind: 'snapshot' }, s.snapshotFailures);
        this.set({ kind: 'ship' }, s.shipFailures);
      },
    });
  }

  /** Where the span metrics read their numbers (SpanExporter). */
  watchSpans(
    source: () => { readonly sent: number; readonly failed_batches: number; readonly dropped: number },
  ): void {
    this.spans = source;
  }

  /** Where the export metrics read their numbers (ExportDesk). */
  watchExports(
    source: () => {
      readonly sent: number;
      readonly failed: number;
      readonly dropped: number;
      readonly queued: number;
    },
  ): void {
    this.exports = source;
  }

  /** Where the alert metrics read their numbers (AlertDesk). */
  watchAlerts(
    source: () => {
      readonly delivered: number;
      readonly failed: number;
      readonly dropped: number;
      readonly queued: number;
    },
  ): void {
    this.alerts = source;
  }

  /** Where the store gauge reads whether the store takes writes (StoreHealth.writable). */
  watchStore(writable: () => boolean): void {
    this.storeWritable = writable;
  }

  /** Where the approval-stream gauge reads its count (ApprovalFeed.streams). */
  watchApprovalStreams(source: () => number): void {
    this.approvalStreams = source;
  }

  /** Where the content-scan metrics read their numbers (ScanPool). */
  watchScans(source: () => ScanCounts): void {
    this.scans = source;
  }

  /** Where the fail-closed gauge reads its counts (PolicyRepo.failClosedActive). */
  watchFailClosed(source: () => ReadonlyMap<string, number>): void {
    this.failClosedSource = source;
  }

  request(route: string, method: string, status: number, seconds: number): void {
    const key = `${route}\0${method}\0${status}`;
    let c = this.requestChildren.get(key);
    if (!c) {
      c = this.requests.labels(route, method, String(status));
      this.requestChildren.set(key, c);
    }
    c.inc();
    let h = this.durationChildren.get(route);
    if (!h) {
      h = this.duration.labels(route);
      this.durationChildren.set(route, h);
    }
    h.observe(seconds);
  }

  phase(name: string, seconds: number): void {
    let h = this.phaseChildren.get(name);
    if (!h) {
      h = this.phases.labels(name);
      this.phaseChildren.set(name, h);
    }
    h.observe(seconds);
  }

  upstreamCall(provider: string, outcome: 'ok' | 'error' | 'cancelled', seconds: number): void {
    const key = `${provider}\0${outcome}`;
    let h = this.upstreamChildren.get(key);
    if (!h) {
      h = this.upstream.labels(provider, outcome);
      this.upstreamChildren.set(key, h);
    }
    h.observe(seconds);
  }
}
