import { ChainLog } from '../audit/index.js';
import type { Config } from '../config/index.js';
import { PROBE_ROUTES, registerPlatform } from '../control/platform.js';
import { AuditKeys } from '../crypto/audit-keys.js';
import { bindKeysDir, checkKeysDir } from '../crypto/keys-binding.js';
import { MandateKeys } from '../crypto/mandate-keys.js';
import { WorkerSealSigner } from '../crypto/seal-signer.js';
import { createVault, loadVaultKey } from '../crypto/vault.js';
import { EgressPolicy } from '../export/ssrf.js';
import { registerGatewayRoutes } from '../gateway/routes.js';
import { GatewayService } from '../gateway/service.js';
import { registerExecutionRoute } from '../govern/execution.js';
import { type ApprovalGate, Governor } from '../govern/governor.js';
import { MandateService } from '../govern/mandates.js';
import { registerDecisionRoutes } from '../govern/routes.js';
import { ScanPool } from '../govern/scan-pool.js';
import { createHttpHandler, type RouteHandler } from '../http/app.js';
import { InFlight } from '../http/in-flight.js';
import { listen, localUrl } from '../http/listen.js';
import { Router } from '../http/router.js';
import { loadTlsFiles, trustWith } from '../http/tls.js';
import { type TlsReloader, watchTlsFiles } from '../http/tls-reload.js';
import type { HttpServer } from '../http/types.js';
import { Metrics } from '../metrics/index.js';
import { UpstreamPools } from '../providers/upstream.js';
import { openStore, type Store } from '../store/db.js';
import { IdempotencyStore } from '../store/idempotency.js';
import { lockDataDir } from '../store/lock.js';
import { newId } from '../util/ids.js';
import type { Logger } from '../util/log.js';
import { VERSION } from '../version.js';
import { ControlClient } from './control-client.js';
import { forwarder } from './forward.js';
import { PROXY_ROUTE, startForwardProxy } from './proxy.js';
import { ProxyCa } from './proxy-ca.js';
import { RemoteSnapshot } from './snapshot.js';
import { Shipper, SnapshotPoller } from './sync.js';

export interface RunningSidecar {
  readonly server: HttpServer;
  readonly listenUrl: string;
  /** This sidecar log's epoch (a new data dir starts a new log). */
  readonly epoch: string;
  /** The forward proxy's port, and the CA certificate agents using it trust (PEM). */
  readonly proxyPort: number;
  /** The probe listener's port (SERVICE_HEALTH_PORT), when there is one. */
  readonly healthPort: number | undefined;
  readonly proxyCaPem: string;
  readonly proxyCaPath: string;
  readonly snapshot: RemoteSnapshot;
  readonly shipper: Shipper;
  /** The sidecar's own log (what it has not shipped, and what it keeps until it cuts it). */
  readonly log: ChainLog;
  /** The local store the log and the snapshot are in. */
  readonly store: Store;
  close(graceMs?: number): Promise<void>;
}

/**
 * A sidecar holds no approvals: they are granted by people at the control plane and spent there
 * (the Governor's remote approvals), the only way to be sure one is used once.
 */
const NO_APPROVALS: ApprovalGate = { granted: () => undefined, consume: () => undefined };

/**
 * How often a running sidecar looks whether its proxy CA is due for renewal. It is due 30 days
 * before its end (CA_RENEW_BEFORE_MS), so an hour is plenty, and the look is a comparison.
 */
const PROXY_CA_CHECK_MS = 3_600_000;

/**
 * Says that the proxy CA certificate was renewed. An agent reads the CA file once, when it starts:
 * one started before keeps the old certificate, which (the key being the same) it accepts until
 * that copy ends, and must be restarted before then; after an expiry, it refuses every tunnel
 * until it is restarted. So this is a warning, naming both ends.
 */
function proxyCaRenewed(ca: ProxyCa, previous: Date, path: string, logger: Logger): void {
  const expired = previous.getTime() <= Date.now();
  logger.warn(
    expired
      ? 'the proxy CA certificate had expired and was renewed with its key: agents that started with the old certificate refuse every tunnel until they are restarted'
      : 'the proxy CA certificate was renewed with its key: agents that started with the old certificate accept the proxy until previous_not_after; restart them before then',
    {
      expired,
      previous_not_after: previous.toISOString(),
      not_after: ca.notAfter.toISOString(),
      path,
    },
  );
}

const EPOCH_KEY = 'sidecar_epoch';
/** What the probe listener serves; any other path is sent to the app as this (404). */
const HEALTH_PATHS: ReadonlySet<string> = new Set(['/health', ...PROBE_ROUTES]);
const NOT_A_ROUTE = '/_not_served_on_the_health_port';

/**
 * `govgate sidecar` (DESIGN A.1, docs/sidecar.md): the data plane next to one agent. It serves
 * the gateway (`/v1/chat/completions`, `/v1/messages`, `/v1/embeddings`, `/v1/models`) and the
 * decisions of the govern API (`/v1/govern`, `/v1/tools/govern`, `/v1/govern/execution`) from
 * the snapshot it pulls from the control plane, signs mandates with its own registered key,
 * writes each call's audit event to its own signed log in a local LMDB before it answers, ships
 * that log to the control plane, forwards every other path there, and governs the provider calls
 * of agents that use it as their HTTPS proxy. Its own probes and metrics are local.
 */
/** A control plane reached in plain http on another host than this one (loopback is this pod). */
function plaintextRemote(controlUrl: string): boolean {
  const url = new URL(controlUrl);
  if (url.protocol !== 'http:') return false;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return !(host === 'localhost' || host === '::1' || /^127\./.test(host));
}

export async function startSidecar(
  config: Config,
  logger: Logger,
  seams: {
    readonly pruneAfter?: number;
    readonly pruneAgeMs?: number;
    /** How often the API listener's certificate files are looked at (TLS_RELOAD_INTERVAL_MS). */
    readonly tlsReloadIntervalMs?: number;
  } = {},
): Promise<RunningSidecar> {
  if (config.controlUrl === undefined || config.sidecarToken === undefined)
    throw Object.assign(
      new Error('govgate sidecar needs SERVICE_CONTROL_URL and SERVICE_SIDECAR_TOKEN (POST /api/sidecars)'),
      { name: 'ConfigError' },
    );
  // Certificates are checked before anything is opened: a bad one is said at once, not at a handshake.
  const tls = config.tls && loadTlsFiles(config.tls.certFile, config.tls.keyFile);
  const controlTrust = trustWith(config.controlCa);
  if (plaintextRemote(config.controlUrl))
    logger.warn(
      'SERVICE_CONTROL_URL is plain http to another host: the snapshot carries provider API keys; use https unless a mesh encrypts the link',
      { control_url: config.controlUrl },
    );
  const lock = await lockDataDir(config.dataDir);
  const closers: Array<() => Promise<unknown> | unknown> = [() => lock.release()];
  const unwind = async (): Promise<void> => {
    for (const c of closers.reverse()) await c();
  };
  try {
    const store = openStore(config.dataDir, { minFreeMb: config.storeMinFreeMb });
    closers.push(() => store.close());
    checkKeysDir(store, config.keysDir);
    const vault = createVault(loadVaultKey(config.keysDir));
    const auditKeys = AuditKeys.load({
      keysDir: config.keysDir,
      password: config.audit.keyPassword,
      signingKeyPem: config.audit.signingKey,
    });
    const signer = await WorkerSealSigner.start(auditKeys);
    closers.push(() => signer.close());
    bindKeysDir(store, config.keysDir);
    let epoch = store.meta.get(EPOCH_KEY) as string | undefined;
    if (epoch === undefined) {
      const fresh = newId('', 16);
      await store.writer.enqueue(() => store.meta.putSync(EPOCH_KEY, fresh));
      epoch = fresh;
    }
    const log = new ChainLog(store, signer, {
      dataDir: config.dataDir,
      rotationMaxMb: config.audit.rotationMaxMb,
      jsonl: false,
      // The overview and trust scores are the control plane's, over the chain this log ships to.
      rollups: false,
      warn: (msg, fields) => logger.warn(msg, fields),
    });
    closers.push(() => log.close());
    const egress = new EgressPolicy(config.egressAllow, config.egressDeny);
    const pools = new UpstreamPools({
      timeoutMs: config.upstreamTimeoutMs,
      connections: config.upstreamConnections,
      egress,
    });
    closers.push(() => pools.close());
    const control = new ControlClient(config.controlUrl, config.sidecarToken, controlTrust);
    closers.push(() => control.close());
    const snapshot = new RemoteSnapshot(pools);
    // Mandates are signed here with this sidecar's own key, in the control plane's name (`iss`):
    // the control plane publishes the key and verifies them (docs/sidecar.md).
    const mandateKeys = MandateKeys.load(config.keysDir, config.audit.keyPassword);
    const mandates = new MandateService(mandateKeys, store, () => snapshot.issuer);
    const poller = new SnapshotPoller(
      control,
      snapshot,
      store,
      vault,
      logger,
      config.snapshotPollMs,
      () => mandateKeys.jwks().keys,
      () => shipper.retryNow(),
    );
    closers.push(() => poller.close());
    const shipper: Shipper = new Shipper(control, log, epoch, logger, {
      durable: () => store.durable(),
      ...(seams.pruneAfter === undefined ? {} : { pruneAfter: seams.pruneAfter }),
      ...(seams.pruneAgeMs === undefined ? {} : { pruneAgeMs: seams.pruneAgeMs }),
    });
    const metrics = new Metrics();
    metrics.watchStore(() => store.health.writable);
    // The certificate in force: a renewal read from disk replaces it (tlsReload, once listening).
    let tlsReload: TlsReloader | undefined;
    if (tls) metrics.watchCertificate('api', () => (tlsReload?.current ?? tls).notAfter);
    // The forward proxy's CA: renewed here when it has expired or ends within 30 days, and checked
    // again while the sidecar runs, for a sidecar may run longer than the month that leaves.
    const ca = ProxyCa.load(config.keysDir, config.audit.keyPassword);
    if (ca.renewedFrom !== undefined)
      proxyCaRenewed(ca, ca.renewedFrom, ProxyCa.certPath(config.keysDir), logger);
    if (config.proxyCaExportDir !== undefined) ca.exportTo(config.proxyCaExportDir);
    metrics.watchProxyCa(() => ca.notAfter);
    const caCheck = setInterval(() => {
      try {
        const previous = ca.renewIfDue();
        if (previous === undefined) return;
        if (config.proxyCaExportDir !== undefined) ca.exportTo(config.proxyCaExportDir);
        proxyCaRenewed(ca, previous, ProxyCa.certPath(config.keysDir), logger);
      } catch (err) {
        logger.error('the proxy CA certificate could not be renewed; tried again in an hour', {
          not_after: ca.notAfter.toISOString(),
          error: (err as Error).message,
        });
      }
    }, PROXY_CA_CHECK_MS);
    caCheck.unref();
    closers.push(() => clearInterval(caCheck));
    metrics.watchSidecar(() => ({
      unshipped: shipper.unshipped,
      snapshotAgeSeconds:
        snapshot.confirmedAt === undefined ? -1 : (Date.now() - snapshot.confirmedAt) / 1000,
      snapshotFailures: poller.failures,
      shipFailures: shipper.failures,
      diverged: shipper.diverged !== undefined,
      clockSkewSeconds: control.clockSkewMs / 1000,
    }));
    const idempotency = new IdempotencyStore(
      store,
      config.idempotencyTtlHours * 3_600_000,
      config.idempotencyMaxMbPerOrg * 1024 * 1024,
    );
    const sweep = setInterval(() => void idempotency.sweep().catch(() => {}), 3_600_000);
    sweep.unref();
    closers.push(() => clearInterval(sweep));
    const scans = new ScanPool();
    closers.push(() => scans.close());
    metrics.watchScans(() => scans);
    let listenUrl = '';
    const governor = new Governor(snapshot, NO_APPROVALS, scans, {
      consume: (_org, agentUuid, fingerprint, opts) => control.consumeApproval(agentUuid, fingerprint, opts),
    });
    const gateway = new GatewayService({
      snapshot,
      audit: log,
      metrics,
      idempotency,
      governor,
      requestApproval: (input) => control.requestApproval(input),
      clientStallMs: config.clientStallMs,
      scans,
      get baseUrl() {
        return config.publicUrl ?? listenUrl;
      },
    });
    const router = new Router<RouteHandler>();
    registerGatewayRoutes(router, gateway);
    registerDecisionRoutes(router, {
      snapshot,
      governor,
      audit: log,
      mandates,
      approvals: { request: (input) => control.requestApproval(input) },
    });
    registerExecutionRoute(router, { snapshot, audit: log, auditReader: log });
    let closing = false;
    registerPlatform(router, {
      version: VERSION,
      region: config.region,
      get baseUrl() {
        return config.publicUrl ?? listenUrl;
      },
      metrics,
      metricsToken: config.metricsToken,
      snapshot,
      checks: () => ({
        snapshot: snapshot.loaded,
        mandate_keys: poller.mandateKeysRegistered,
        audit_log: shipper.diverged === undefined,
        clock: poller.clockAgrees,
        proxy_ca: ca.notAfter.getTime() > Date.now(),
        store_writable: store.health.writable,
        accepting: !closing,
      }),
    });

    // The log of this org, shipped as soon as each batch is committed.
    const stopShipping = log.onCommitted(() => shipper.kick());
    closers.push(() => stopShipping());
    const kept = poller.loadKept();
    await poller.pollOnce();
    if (!snapshot.loaded)
      logger.warn(
        kept
          ? 'the kept snapshot could not be used'
          : 'no snapshot yet: calls are refused (503) until the control plane answers',
        { control_url: config.controlUrl },
      );
    shipper.org = snapshot.orgId;
    poller.start();
    // The org is known once a snapshot is; a sidecar whose first snapshot comes late starts then.
    const orgWatch = setInterval(() => {
      if (snapshot.orgId !== undefined) {
        shipper.org = snapshot.orgId;
        shipper.kick();
      }
    }, 5_000);
    orgWatch.unref();
    closers.push(() => clearInterval(orgWatch));
    shipper.kick();

    const work = new InFlight();
    const handler = createHttpHandler(router, {
      logger,
      work,
      onFinish: (ctx, status, seconds) => metrics.request(ctx.route, ctx.req.method, status, seconds),
      answeredWhileDraining: new Set(PROBE_ROUTES),
      fallback: forwarder(control, config.clientStallMs),
      // A call is refused while the store cannot commit its event (a full disk), before any
      // provider is called; what is forwarded writes nothing here.
      beforeWrite: () => store.health.check(),
    });
    const server = await listen(config.httpServer, { host: config.host, port: config.port, tls }, handler);
    closers.push(() => server.close(0));
    if (tls) {
      const reload = watchTlsFiles({
        listener: 'api',
        initial: tls,
        apply: (files) => server.replaceTls(files),
        logger,
        counted: metrics.tlsReloads('api'),
        ...(seams.tlsReloadIntervalMs === undefined ? {} : { intervalMs: seams.tlsReloadIntervalMs }),
      });
      tlsReload = reload;
      closers.push(() => reload.stop());
    }
    // The forward proxy answers with the gateway routes only: what an agent's SDK sends a provider.
    const proxyRouter = new Router<RouteHandler>();
    registerGatewayRoutes(proxyRouter, gateway);
    const proxy = await startForwardProxy({
      host: config.host,
      port: config.proxyPort,
      ca,
      providerHosts: () => snapshot.providerHosts(),
      authenticate: (secret) => snapshot.authenticate(secret) !== undefined,
      handler: createHttpHandler(proxyRouter, {
        logger,
        work,
        onFinish: (ctx, status, seconds) =>
          metrics.request(`${PROXY_ROUTE} ${ctx.route}`, ctx.req.method, status, seconds),
        beforeWrite: () => store.health.check(),
      }),
      logger,
      onRefused: (method, status, seconds) => metrics.request(PROXY_ROUTE, method, status, seconds),
    });
    closers.push(() => proxy.close(0));
    // The probe listener: the health routes of the same app, and nothing else (any other path
    // is answered as unknown), on an address the kubelet reaches. It opens last: a native
    // sidecar's startup probe passing means the gateway, the proxy and the CA file are there.
    const health =
      config.health === undefined
        ? undefined
        : await listen(config.httpServer, config.health, (req, res) =>
            handler(HEALTH_PATHS.has(req.path) ? req : Object.assign({}, req, { path: NOT_A_ROUTE }), res),
          );
    if (health !== undefined) closers.push(() => health.close(0));
    listenUrl = localUrl(config.host, server.port, tls !== undefined);
    return {
      server,
      listenUrl,
      epoch,
      proxyPort: proxy.port,
      healthPort: health?.port,
      // The certificate in force: the sidecar renews it while it runs.
      get proxyCaPem() {
        return ca.certPem;
      },
      proxyCaPath: ProxyCa.certPath(config.keysDir),
      snapshot,
      shipper,
      log,
      store,
      async close(graceMs = 10_000) {
        if (closing) return;
        closing = true;
        tlsReload?.stop();
        const started = performance.now();
        await Promise.all([server.close(graceMs), proxy.close(graceMs), health?.close(graceMs)]);
        await work.drained(Math.max(0, graceMs - (performance.now() - started)));
        await log.flushSeals().catch(() => {});
        // What is not shipped now stays in the local log and is shipped by the next start.
        await shipper.close(Math.min(2_000, Math.max(0, graceMs - (performance.now() - started))));
        await unwind();
      },
    };
  } catch (err) {
    await unwind();
    throw err;
  }
}
