import {
  ApprovalFeed,
  ApprovalStore,
  registerApprovalFeedRoutes,
  registerApprovalRoutes,
  registerWebauthnRoutes,
  WebauthnDesk,
} from './approvals/index.js';
import { ChainLog, registerAuditRoutes } from './audit/index.js';
import { chainOrgs } from './audit/org-head.js';
import { registerReplayRoutes } from './audit/replay-routes.js';
import { retentionArchive } from './compliance/archive-config.js';
import { registerDsarRoutes } from './compliance/dsar.js';
import { ErasureDesk } from './compliance/erasure.js';
import { registerErasureRoutes } from './compliance/erasure-routes.js';
import { RetentionDesk } from './compliance/retention.js';
import { registerRetentionRoutes } from './compliance/retention-routes.js';
import type { Config } from './config/index.js';
import { type BootstrapResult, bootstrap } from './control/bootstrap.js';
import { CredentialPurge } from './control/credential-purge.js';
import { type RunningInjector, startInjector } from './control/injector-server.js';
import { registerKeyRoutes } from './control/keys.js';
import { OrgDeletion, registerOrgDeletion } from './control/org-deletion.js';
import { PROBE_ROUTES, registerPlatform } from './control/platform.js';
import { registerPolicies } from './control/policies.js';
import { registerProvisioning } from './control/provisioning.js';
import { registerSidecarRoutes } from './control/sidecar-routes.js';
import { SidecarDesk, SYNC_MAX_BODY_BYTES } from './control/sidecars.js';
import { AuditKeys } from './crypto/audit-keys.js';
import { bindKeysDir, checkKeysDir } from './crypto/keys-binding.js';
import { MandateKeys } from './crypto/mandate-keys.js';
import { WorkerSealSigner } from './crypto/seal-signer.js';
import { createVault, loadVaultKey } from './crypto/vault.js';
import { registerAlertRoutes } from './export/alert-routes.js';
import { AlertDesk } from './export/alerts.js';
import { ExportDesk } from './export/siem.js';
import { registerSiemRoutes } from './export/siem-routes.js';
import { SpanExporter } from './export/spans.js';
import { EgressPolicy } from './export/ssrf.js';
import { registerGatewayRoutes } from './gateway/routes.js';
import { GatewayService } from './gateway/service.js';
import { Governor } from './govern/governor.js';
import { registerMandateRoutes } from './govern/mandate-routes.js';
import { MandateService } from './govern/mandates.js';
import { registerGovernRoutes } from './govern/routes.js';
import { ScanPool } from './govern/scan-pool.js';
import { ToolRegistry } from './govern/tools.js';
import { registerTrustRoutes } from './govern/trust.js';
import type { ApprovalDesk } from './govern/types.js';
import { createHttpHandler, type RouteHandler } from './http/app.js';
import { InFlight } from './http/in-flight.js';
import { listen, localUrl } from './http/listen.js';
import { Router } from './http/router.js';
import { loadTlsFiles, type TlsFiles } from './http/tls.js';
import { type TlsReloader, watchTlsFiles } from './http/tls-reload.js';
import type { HttpServer } from './http/types.js';
import { presentedCredential } from './identity/guard.js';
import { IdentityRepo } from './identity/repo.js';
import { Metrics } from './metrics/index.js';
import { UpstreamPools } from './providers/upstream.js';
import { LocalSnapshot } from './snapshot/local.js';
import { openStore } from './store/db.js';
import { IdempotencyStore } from './store/idempotency.js';
import { type DataDirLock, lockDataDir } from './store/lock.js';
import { PolicyRepo } from './store/policies.js';
import { SettingsRepo } from './store/settings.js';
import type { Logger } from './util/log.js';
import { OrgQueue } from './util/org-queue.js';
import { VERSION } from './version.js';

export interface RunningService {
  readonly server: HttpServer;
  /** Base of every URL govgate hands out: SERVICE_PUBLIC_URL, or else `listenUrl`. */
  readonly baseUrl: string;
  /** Where this process listens, as an http URL (0.0.0.0 shown as 127.0.0.1). */
  readonly listenUrl: string;
  readonly bootstrap: BootstrapResult;
  /** The sidecar injector's HTTPS port, when SERVICE_INJECTOR_PORT is set. */
  readonly injectorPort: number | undefined;
  /** The API listener's certificate files, watched for a renewal (with SERVICE_TLS_CERT). */
  readonly tlsReload: TlsReloader | undefined;
  /** The control plane's sidecar desk (tokens, snapshots, sync). */
  readonly sidecars: SidecarDesk;
  /** The hourly purge of credentials revoked or expired past their grace period. */
  readonly credentialPurge: CredentialPurge;
  /** Graceful: stop accepting, let in-flight requests finish, then close upstreams and the store. */
  close(graceMs?: number): Promise<void>;
}

/**
 * The all-in-one process: control plane and data plane on one port, one embedded store. The data
 * dir is held for the life of the service (store/lock.ts); a start that fails lets it go again.
 */
export async function startAllInOne(
  config: Config,
  logger: Logger,
  seams: StartSeams = {},
): Promise<RunningService> {
  // Certificates are checked before anything is opened: a bad one is said at once, not at a handshake.
  const tls = config.tls && loadTlsFiles(config.tls.certFile, config.tls.keyFile);
  const lock = await lockDataDir(config.dataDir);
  try {
    return await startLocked(config, logger, lock, seams, tls);
  } catch (err) {
    await lock.release();
    throw err;
  }
}

/** What tests may put in place of the process's own (not configuration: nothing reads it from outside). */
export interface StartSeams {
  /** The audit trail's clock (event times, retention's cutoff); `Date.now` by default. */
  readonly clock?: () => number;
  /** The content scan worker's entry (ScanPool); a test's holds each scan until it lets it go. */
  readonly scanWorker?: URL;
  /** How often the listeners' certificate files are looked at (TLS_RELOAD_INTERVAL_MS by default). */
  readonly tlsReloadIntervalMs?: number;
}

async function startLocked(
  config: Config,
  logger: Logger,
  lock: DataDirLock,
  seams: StartSeams,
  tls: TlsFiles | undefined,
): Promise<RunningService> {
  // Logged once each way, not per refused request (docs/ops.md, "When the disk fills").
  const store = openStore(config.dataDir, {
    minFreeMb: config.storeMinFreeMb,
    health: {
      failed: (fields) =>
        logger.error(
          'the store cannot commit writes: requests that must be recorded are refused with 503 until a write succeeds',
          { ...fields, data_dir: config.dataDir },
        ),
      recovered: (fields) => logger.info('the store commits writes again', fields),
    },
  });
  try {
    checkKeysDir(store, config.keysDir);
  } catch (err) {
    await store.close();
    throw err;
  }
  const vault = createVault(loadVaultKey(config.keysDir));
  const identity = new IdentityRepo(store);
  const settings = new SettingsRepo(store, vault);
  const auditKeys = AuditKeys.load({
    keysDir: config.keysDir,
    password: config.audit.keyPassword,
    signingKeyPem: config.audit.signingKey,
  });
  const sealSigner = await WorkerSealSigner.start(auditKeys);
  bindKeysDir(store, config.keysDir);
  const events = new ChainLog(store, sealSigner, {
    dataDir: config.dataDir,
    rotationMaxMb: config.audit.rotationMaxMb,
    warn: (msg, fields) => logger.warn(msg, fields),
    ...(seams.clock === undefined ? {} : { clock: seams.clock }),
  });
  const egress = new EgressPolicy(config.egressAllow, config.egressDeny);
  const pools = new UpstreamPools({
    timeoutMs: config.upstreamTimeoutMs,
    connections: config.upstreamConnections,
    egress,
  });
  // A version published before regexes were checked may hold conditions that fail closed: the
  // operator is told once per version, when it is compiled, and the metric counts them.
  const policies = new PolicyRepo(store, undefined, { warn: (msg, fields) => logger.warn(msg, fields) });
  const snapshot = new LocalSnapshot(identity, settings, pools, policies);
  const metrics = new Metrics();
  metrics.watchFailClosed(() => policies.failClosedActive());
  metrics.watchStore(() => store.health.writable);
  // The certificate in force: a renewal read from disk replaces it (tlsReload, once listening).
  let tlsReload: TlsReloader | undefined;
  if (tls) metrics.watchCertificate('api', () => (tlsReload?.current ?? tls).notAfter);
  const idempotency = new IdempotencyStore(
    store,
    config.idempotencyTtlHours * 3_600_000,
    config.idempotencyMaxMbPerOrg * 1024 * 1024,
  );
  // Expired replays are swept a batch per turn (a store closing under a sweep ends it).
  const sweepReplays = (): void => void idempotency.sweep().catch(() => {});
  sweepReplays();
  const sweeper = setInterval(sweepReplays, 3_600_000);
  // Every minute: expired revocations are the front of the mandate service's in-memory list, so
  // a sweep reads no table and deletes about a minute's worth of rows.
  const minuteSweeper = setInterval(() => {
    void approvals.sweepExpired().catch(() => {});
    void mandates.sweep().catch(() => {});
  }, 60_000);
  minuteSweeper.unref();
  sweeper.unref();

  let closing = false;
  // The base URL is known once the port is; audit_url and /api/config read it lazily.
  let baseUrl = config.publicUrl ?? '';
  const base = {
    get value() {
      return baseUrl;
    },
  };

  const router = new Router<RouteHandler>();
  const mandateKeys = MandateKeys.load(config.keysDir, config.audit.keyPassword);
  const sidecars = new SidecarDesk({
    store,
    identity,
    settings,
    policies,
    audit: events,
    issuer: () => base.value,
  });
  const mandates = new MandateService(mandateKeys, store, () => base.value, { delegated: sidecars });
  // Credentials revoked or expired 30 days ago and more: purged at the start, then every hour.
  const credentialPurge = new CredentialPurge({ identity, sidecars, audit: events });
  const purgeCredentials = (): void =>
    void credentialPurge.run().catch((err: unknown) => {
      // A store closing under a run ends it; anything else is said (nothing is deleted unrecorded).
      if (!closing) logger.warn('credential purge failed', { error: (err as Error).message });
    });
  const purger = setInterval(purgeCredentials, 3_600_000);
  purger.unref();
  const tools = new ToolRegistry(store, settings, egress);
  const approvals = new ApprovalStore(store, events);
  const feed = new ApprovalFeed(approvals, events);
  metrics.watchApprovalStreams(() => feed.streams);
  const toRef = (r: {
    id: string;
    tier: string;
    expires_at: string;
    matched_rule: string | null;
    status: string;
  }) => ({
    request_id: r.id,
    tier: r.tier,
    expires_at: r.expires_at,
    matched_rule: r.matched_rule,
    status: r.status,
  });
  const approvalDesk: ApprovalDesk = {
    request: async (input) => toRef(await approvals.create(input)),
    preApprove: async (input, by) =>
      toRef(
        await approvals.preApprove(
          {
            ...input,
            summary: `pre-approved ${input.behavior_type} ${input.tool ?? ''}`.trim(),
            matched_rule: null,
            pipeline_id: null,
          },
          by,
        ),
      ),
  };
  const scans = new ScanPool(seams.scanWorker);
  metrics.watchScans(() => scans);
  const governor = new Governor(snapshot, approvals, scans);
  const gateway = new GatewayService({
    snapshot,
    audit: events,
    metrics,
    idempotency,
    governor,
    requestApproval: (input) => approvalDesk.request(input),
    clientStallMs: config.clientStallMs,
    scans,
    get baseUrl() {
      return base.value;
    },
  });
  registerGatewayRoutes(router, gateway);
  const orgExists = (id: string): boolean => identity.getOrg(id) !== undefined;
  // A deleted org's chain stays readable, prunable and erasable by a super_admin (the only one
  // who may name another org): the audit, retention, erasure and DSAR routes take its tombstone
  // too; every other org-scoped route answers 404 for it.
  const orgKnown = (id: string): boolean => identity.orgRecord(id) !== undefined;
  registerGovernRoutes(router, {
    snapshot,
    governor,
    audit: events,
    auditReader: events,
    mandates,
    approvals: approvalDesk,
    tools,
    orgExists,
  });
  registerMandateRoutes(router, {
    snapshot,
    mandates,
    keys: mandateKeys,
    audit: events,
    extraJwks: () => sidecars.mandateJwks(),
    orgExists,
  });
  registerKeyRoutes(router, { snapshot, auditKeys, mandateKeys, audit: events });
  const archive = retentionArchive(config);
  const webauthn = new WebauthnDesk(store, {
    rpId: config.webauthn.rpId,
    // Without SERVICE_WEBAUTHN_ORIGINS: the origin of the base URL (SERVICE_PUBLIC_URL, else the
    // listen address, known once it listens).
    get origins() {
      return config.webauthn.origins.length > 0 ? config.webauthn.origins : [new URL(base.value).origin];
    },
  });
  registerApprovalRoutes(router, { snapshot, approvals, webauthn, orgExists });
  registerDsarRoutes(router, {
    snapshot,
    identity,
    log: events,
    audit: events,
    orgExists: orgKnown,
    archive,
    approvals,
    authenticators: (userId) => webauthn.credentialsOf(userId),
  });
  // One org's erasures and retention runs, one at a time (OrgQueue).
  const complianceQueue = new OrgQueue();
  const erasures = new ErasureDesk({
    exclusive: complianceQueue,
    store,
    identity,
    log: events,
    audit: events,
    removeAuthenticators: (userId) => webauthn.removeAll(userId),
    approvals,
    idempotency,
    archive,
  });
  registerErasureRoutes(router, { snapshot, erasures, orgExists: orgKnown });
  const retention = new RetentionDesk({
    exclusive: complianceQueue,
    settings: config.audit,
    archive,
    approvals,
    log: events,
    audit: events,
    ...(seams.clock === undefined ? {} : { clock: seams.clock }),
  });
  registerRetentionRoutes(router, { snapshot, retention, orgExists: orgKnown });
  registerTrustRoutes(router, {
    snapshot,
    identity,
    log: events,
    orgExists,
    ...(seams.clock === undefined ? {} : { clock: seams.clock }),
  });
  const alerts = new AlertDesk({
    store,
    settings,
    egress,
    baseUrl: () => base.value,
  });
  const stopAlerts = events.onCommitted(alerts.onCommitted);
  metrics.watchAlerts(() => alerts.stats());
  registerAlertRoutes(router, { snapshot, alerts, audit: events, orgExists });
  const exports = new ExportDesk({ store, settings, egress, log: events, orgs: () => chainOrgs(store) });
  const stopExports = events.onCommitted(exports.onCommitted);
  metrics.watchExports(() => exports.totals());
  registerSiemRoutes(router, { snapshot, exports, audit: events, orgExists });
  const spans =
    config.audit.otlpEndpoint === undefined
      ? undefined
      : new SpanExporter(config.audit.otlpEndpoint, config.audit.otlpHeaders);
  const stopSpans = spans === undefined ? () => {} : events.onCommitted(spans.onCommitted);
  if (spans !== undefined) metrics.watchSpans(() => spans.stats);
  registerWebauthnRoutes(router, { snapshot, approvals, webauthn, audit: events, orgExists });
  registerApprovalFeedRoutes(router, {
    snapshot,
    feed,
    get baseUrl() {
      return base.value;
    },
    orgExists,
  });
  registerSidecarRoutes(router, {
    snapshot,
    sidecars,
    identity,
    approvals,
    audit: events,
    orgExists,
    mandateKidTaken: (kid) => mandateKeys.entries().some((e) => e.kid === kid),
    durable: () => store.durable(),
  });
  registerAuditRoutes(router, {
    snapshot,
    log: events,
    orgExists: orgKnown,
    clientStallMs: config.clientStallMs,
  });
  registerReplayRoutes(router, { snapshot, log: events, policies, orgExists, scans });
  registerPolicies(router, { snapshot, identity, policies, audit: events });
  registerOrgDeletion(
    router,
    new OrgDeletion({
      identity,
      audit: events,
      sidecars,
      approvals,
      alerts,
      exports,
      tools,
      settings,
      idempotency,
      authenticators: webauthn,
    }),
    snapshot,
  );
  registerProvisioning(router, {
    snapshot,
    identity,
    settings,
    audit: events,
    egress,
    get baseUrl() {
      return base.value;
    },
  });
  registerPlatform(router, {
    version: VERSION,
    region: config.region,
    get baseUrl() {
      return base.value;
    },
    metrics,
    metricsToken: config.metricsToken,
    snapshot,
    // Each check says its own state: during the drain the store is still open (the calls in
    // flight write to it), and only `accepting` turns false. `store_writable` is false while the
    // store refuses writes (less free space than SERVICE_STORE_MIN_FREE_MB, or a commit that
    // failed for want of storage) until a write succeeds: each probe tries one then
    // (StoreHealth.check), since an instance that is not ready gets no traffic to tell.
    checks: async () => ({
      store: (store.root as unknown as { isOperational(): boolean }).isOperational(),
      store_writable:
        (await store.health.check()?.then(
          () => true,
          () => false,
        )) ?? true,
      accepting: !closing,
    }),
  });

  const work = new InFlight();
  const handler = createHttpHandler(router, {
    logger,
    work,
    onFinish: (ctx, status, seconds) => metrics.request(ctx.route, ctx.req.method, status, seconds),
    answeredWhileDraining: new Set(PROBE_ROUTES),
    beforeWrite: () => store.health.check(),
  });
  let server: HttpServer;
  let injector: RunningInjector | undefined;
  try {
    server = await listen(
      config.httpServer,
      {
        host: config.host,
        port: config.port,
        tls,
        // Only a sidecar with a valid token may send an audit batch over 5 MiB, checked before its
        // body is read.
        largeBodyLimit: (path, headers) =>
          path === '/api/sync/events' && sidecars.accepts(presentedCredential(headers))
            ? SYNC_MAX_BODY_BYTES
            : 0,
      },
      handler,
    );
    try {
      // The injector gives sidecars the control plane's URL: SERVICE_INJECT_CONTROL_URL, else
      // SERVICE_PUBLIC_URL (the listen address is known only now, and names no pod-reachable host).
      injector =
        config.injector.port === undefined
          ? undefined
          : await startInjector(
              {
                host: config.host,
                port: config.injector.port,
                certFile: config.injector.tlsCert as string,
                keyFile: config.injector.tlsKey as string,
                settings: {
                  image: config.injector.image,
                  controlUrl:
                    config.injector.controlUrl ?? localUrl(config.host, server.port, tls !== undefined),
                  ...(config.injector.controlCaConfigMap === undefined
                    ? {}
                    : { controlCaConfigMap: config.injector.controlCaConfigMap }),
                  nativeSidecar: config.injector.nativeSidecar,
                },
                tlsReload: {
                  counted: metrics.tlsReloads('injector'),
                  ...(seams.tlsReloadIntervalMs === undefined
                    ? {}
                    : { intervalMs: seams.tlsReloadIntervalMs }),
                },
              },
              logger,
            );
      // Its certificate in force, as the API listener's: a renewal replaces it.
      const reload = injector?.tlsReload;
      if (reload !== undefined) metrics.watchCertificate('injector', () => reload.current.notAfter);
    } catch (err) {
      await server.close(0);
      throw err;
    }
  } catch (err) {
    clearInterval(sweeper);
    clearInterval(minuteSweeper);
    clearInterval(purger);
    await scans.close();
    await Promise.all([pools.close(), tools.close()]);
    await events.close();
    stopAlerts();
    stopExports();
    stopSpans();
    await Promise.all([alerts.close(), exports.close(), spans?.close(), sidecars.close()]);
    await sealSigner.close();
    await store.close();
    throw err;
  }
  // Only once the port is held: a first start that cannot listen must not have created (and
  // never shown) the bootstrap secrets.
  const boot = await bootstrap(config, store, identity, settings, events);
  purgeCredentials();
  // A renewed certificate (cert-manager rewriting the Secret) is served to new connections.
  if (tls) {
    const listening = server;
    tlsReload = watchTlsFiles({
      listener: 'api',
      initial: tls,
      apply: (files) => listening.replaceTls(files),
      logger,
      counted: metrics.tlsReloads('api'),
      ...(seams.tlsReloadIntervalMs === undefined ? {} : { intervalMs: seams.tlsReloadIntervalMs }),
    });
  }
  if (config.httpServer === 'uws' && server.engine !== 'uws') {
    if (process.env.UWS_USE_FALLBACK) logger.info('UWS_USE_FALLBACK is set; serving with node:http');
    else logger.warn('uWebSockets.js could not load; serving with node:http');
  }
  const listenUrl = localUrl(config.host, server.port, tls !== undefined);
  if (!config.publicUrl) baseUrl = listenUrl;
  return {
    injectorPort: injector?.port,
    tlsReload,
    sidecars,
    credentialPurge,
    server,
    get baseUrl() {
      return base.value;
    },
    listenUrl,
    bootstrap: boot,
    async close(graceMs = 10_000) {
      if (closing) return;
      closing = true;
      clearInterval(sweeper);
      clearInterval(minuteSweeper);
      clearInterval(purger);
      tlsReload?.stop();
      const drainStart = performance.now();
      // Approval streams and long polls would hold the drain to its end: they end now (a client
      // reconnects elsewhere, with Last-Event-ID).
      feed.close();
      await Promise.all([server.close(graceMs), injector?.close()]);
      // Handlers whose client was answered or left may still be writing their events.
      await work.drained(Math.max(0, graceMs - (performance.now() - drainStart)));
      if (work.size > 0) {
        logger.warn('shutting down with requests still at work: events they have yet to write are lost', {
          requests: work.size,
          note: 'a tool call among them has its tool.execution_started event',
        });
      }
      await scans.close();
      await Promise.all([pools.close(), tools.close()]);
      // A purge under way ends before its events' chain closes.
      await credentialPurge.settled();
      await events.close();
      stopAlerts();
      stopExports();
      stopSpans();
      await Promise.all([alerts.close(), exports.close(), spans?.close(), sidecars.close()]);
      await sealSigner.close();
      await store.close();
      await lock.release();
    },
  };
}
