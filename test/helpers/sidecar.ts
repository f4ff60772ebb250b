import { rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/index.js';
import { type RunningSidecar, startSidecar } from '../../src/sidecar/server.js';
import { createLogger, type Logger } from '../../src/util/log.js';
import { callHttp } from './http.js';
import { type Engine, startService, type TestService } from './service.js';
import { tempDir } from './tmp.js';

export interface TestSidecar {
  readonly sidecar: RunningSidecar;
  readonly url: string;
  readonly dir: string;
  call(
    path: string,
    init?: { method?: string; token?: string; body?: unknown; headers?: Record<string, string> },
  ): Promise<{ status: number; headers: Headers; body: any }>;
  close(keepData?: boolean): Promise<void>;
}

/** Creates a sidecar of the caller's org at the control plane (org_admin+ token); returns its id and token. */
export async function createSidecarToken(
  control: Pick<TestService, 'call'>,
  token: string,
  name = 'pod',
): Promise<{ sidecarId: string; token: string }> {
  const res = await control.call('/api/sidecars', { token, body: { name } });
  if (res.status !== 201) throw new Error(`sidecar token: ${res.status} ${JSON.stringify(res.body)}`);
  return { sidecarId: res.body.sidecar_id, token: res.body.token };
}

/** Starts a sidecar on 127.0.0.1:0 against `controlUrl`, in a fresh dir (or a given one). */
export async function startTestSidecar(opts: {
  controlUrl: string;
  token: string;
  dir?: string;
  engine?: Engine;
  env?: Record<string, string>;
  /** Cut the local log once this many acknowledged entries are past its last cut. */
  pruneAfter?: number;
  /** …or once this long has passed since its last cut (ms). */
  pruneAgeMs?: number;
  /** Where its log lines go (default: errors only, to stderr). */
  logger?: Logger;
  /** How often its certificate files are looked at (with SERVICE_TLS_CERT). */
  tlsReloadIntervalMs?: number;
}): Promise<TestSidecar> {
  const dir = opts.dir ?? tempDir('govgate-sidecar-');
  const config = loadConfig({
    SERVICE_HOST: '127.0.0.1',
    SERVICE_PORT: '0',
    SERVICE_DATA_DIR: join(dir, 'data'),
    SERVICE_KEYS_DIR: join(dir, 'keys'),
    SERVICE_LOG_LEVEL: 'error',
    SERVICE_HTTP_SERVER: opts.engine ?? 'uws',
    SERVICE_CONTROL_URL: opts.controlUrl,
    SERVICE_SIDECAR_TOKEN: opts.token,
    SERVICE_SNAPSHOT_POLL_MS: '100',
    SERVICE_PROXY_PORT: '0',
    ...opts.env,
  });
  const sidecar = await startSidecar(config, opts.logger ?? createLogger('error'), {
    ...(opts.pruneAfter === undefined ? {} : { pruneAfter: opts.pruneAfter }),
    ...(opts.pruneAgeMs === undefined ? {} : { pruneAgeMs: opts.pruneAgeMs }),
    ...(opts.tlsReloadIntervalMs === undefined ? {} : { tlsReloadIntervalMs: opts.tlsReloadIntervalMs }),
  });
  const url = sidecar.listenUrl;
  return {
    sidecar,
    url,
    dir,
    async call(path, init = {}) {
      const body =
        init.body === undefined || typeof init.body === 'string' ? init.body : JSON.stringify(init.body);
      const res = await callHttp(`${url}${path}`, { ...init, body });
      return { status: res.status, headers: res.headers, body: res.body as any };
    },
    async close(keepData = false) {
      await sidecar.close(2000);
      if (!keepData) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A port free on 127.0.0.1 right now (for a control plane that must come back at the same address). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A control plane and one sidecar of its org `default` against it, both closed when `t` ends. */
export async function controlWithSidecar(t: {
  teardown(fn: () => Promise<void>): void;
}): Promise<{ control: TestService; sc: TestSidecar; sidecarId: string; token: string }> {
  const control = await startService();
  const { sidecarId, token } = await createSidecarToken(control, control.pat);
  const sc = await startTestSidecar({ controlUrl: control.url, token });
  t.teardown(async () => {
    await sc.close();
    await control.close();
  });
  return { control, sc, sidecarId, token };
}

/**
 * Holds the fsyncs of a store (a slow disk): `hold()` queues each from then on, `release()` runs
 * those queued and lets the next ones through; `waiting` counts the queued ones. Released when
 * `t` ends.
 */
export function fsyncGate(
  t: { teardown(fn: () => void): void },
  root: unknown,
): { hold(): void; release(): void; readonly waiting: number } {
  const r = root as { sync(cb: () => void): void };
  const original = r.sync.bind(r);
  let held: Array<() => void> | undefined;
  r.sync = (cb) => {
    const run = () => original(cb);
    if (held) held.push(run);
    else run();
  };
  const gate = {
    hold() {
      held ??= [];
    },
    release() {
      const runs = held ?? [];
      held = undefined;
      for (const run of runs) run();
    },
    get waiting() {
      return held?.length ?? 0;
    },
  };
  t.teardown(() => gate.release());
  return gate;
}

/**
 * The sidecar of `dir` (its keys and log, after `close(true)`) started again under a new sidecar
 * token of `control`'s org: a token rotation. Its `info` log lines, parsed, are in `lines`.
 */
export async function restartWithNewToken(
  control: TestService,
  dir: string,
): Promise<{ sc: TestSidecar; token: { sidecarId: string; token: string }; lines: any[] }> {
  const token = await createSidecarToken(control, control.pat);
  const lines: any[] = [];
  const sc = await startTestSidecar({
    controlUrl: control.url,
    token: token.token,
    dir,
    logger: createLogger('info', (l) => lines.push(JSON.parse(l))),
  });
  return { sc, token, lines };
}
