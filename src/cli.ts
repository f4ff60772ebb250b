#!/usr/bin/env node
// Each command loads its own modules when it runs: `verify` on an auditor's machine needs none of
// the server (loading it took ~0.7 s of a ~0.9 s start).
import { ConfigError, loadConfig } from './config/index.js';
import { createLogger } from './util/log.js';
import { VERSION } from './version.js';

/** A stop signal this soon after the first is the same stop delivered twice, not a second one. */
const REPEAT_SIGNAL_MS = 1000;

const USAGE = `govgate ${VERSION}

Usage:
  govgate start            run the all-in-one service (control plane + gateway, embedded store)
  govgate control          run the control plane (the same process as start: /api, the sync API
                           for sidecars, and the gateway for agents without a sidecar)
  govgate sidecar          run a sidecar: the gateway next to one agent, deciding from the
                           control plane's snapshot (SERVICE_CONTROL_URL, SERVICE_SIDECAR_TOKEN)
  govgate keys audit|mandate|proxy-ca
                           print the public keys of the keys dir (audit: the --keys file of
                           verify; mandate: a JWKS; proxy-ca: the sidecar proxy's CA), offline
  govgate verify FILE.jsonl [FILE…] --keys signing-key.json [--org ORG_ID] [--checkpoint SEAL.json] [--json]
                           check an exported audit chain offline, with public keys only
                           (exit 0 intact, 1 compromised, 2 usage error, 3 unsealed)
  govgate verify-receipt EVENT.json --keys signing-key.json [--org ORG_ID] [--json]
                           check offline that one event (or receipt) is in its org's sealed chain
                           (exit 0 included, 1 not, 2 usage error)
  govgate verify-consistency CONSISTENCY.json --keys signing-key.json [--org ORG_ID] [--json]
                           check offline that an earlier seal's chain is a prefix of a later one's
                           (GET /api/audit/consistency; exit 0 consistent, 1 not, 2 usage error)
  govgate --version

Configuration is read from SERVICE_* environment variables (see README.md).`;

/** Start-up failures with a cause an operator can act on: no stack trace. */
const OPERATOR_ERRORS = new Set([
  'DataDirInUseError',
  'KeysDirMismatchError',
  'KeyMaterialError',
  'ListenError',
  'ConfigError',
  'TlsConfigError',
]);

async function start(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  const { startAllInOne } = await import('./server.js');
  const service = await startAllInOne(config, logger);
  // Before the banner: whoever waits for it (an operator, a supervisor, a test) may signal at once,
  // and a signal that comes before the handlers would kill the process without its drain.
  onStopSignals(logger, () => service.close());
  // The try-it lines run on this machine, where the public URL may not route yet.
  const base = service.listenUrl;
  const publicUrl = service.baseUrl === base ? '' : `, public URL ${service.baseUrl}`;
  const out = process.stdout;
  out.write(
    `govgate ${VERSION} listening on ${base} (${service.server.engine}${publicUrl}, data in ${config.dataDir})\n`,
  );
  const created = service.bootstrap.created;
  if (created) {
    out.write(`\nFirst start: org "default" created. These secrets are shown once.\n`);
    // A token the operator chose is theirs already: it is not echoed into the logs.
    const token = created.tokenGenerated
      ? `${created.token}  (also in data dir: bootstrap-token)`
      : '(the SERVICE_BOOTSTRAP_TOKEN you set)';
    out.write(`  super_admin token: ${token}\n`);
    out.write(`  agent key (${created.agentId}): ${created.agentKey}\n\n`);
    const auth = `-H 'Authorization: Bearer ${created.agentKey}'`;
    if (created.providers.includes('mock')) {
      out.write(`Try it:\n  curl -s ${base}/v1/chat/completions ${auth} \\\n`);
      out.write(
        `    -H 'Content-Type: application/json' -d '{"model":"mock-echo","messages":[{"role":"user","content":"hello"}]}'\n\n`,
      );
    } else {
      // A real provider (its key was in the environment): list what it serves, at no cost.
      out.write(
        `Try it (models of ${created.providers.join(' and ')}):\n  curl -s ${base}/v1/models ${auth}\n\n`,
      );
    }
  }
}

async function sidecar(): Promise<void> {
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  const { startSidecar } = await import('./sidecar/server.js');
  const sc = await startSidecar(config, logger);
  onStopSignals(logger, () => sc.close());
  process.stdout.write(
    `govgate ${VERSION} sidecar listening on ${sc.listenUrl} (${sc.server.engine}, control plane ${config.controlUrl}, ` +
      `log epoch ${sc.epoch}, data in ${config.dataDir})\n` +
      `forward proxy on port ${sc.proxyPort}: agents using it trust ${sc.proxyCaPath} ` +
      `and give their agent key as the proxy credential (http://agent:<agent key>@host:${sc.proxyPort})\n`,
  );
}

/** Ctrl-C and SIGTERM drain and close; a second signal later stops at once. */
function onStopSignals(logger: ReturnType<typeof createLogger>, close: () => Promise<void>): void {
  let stoppingSince = 0;
  const stop = (signal: string): void => {
    if (stoppingSince > 0) {
      // The same stop delivered twice (`timeout` and other wrappers signal the process and its
      // group): ignored. A second signal later: the operator will not wait for the drain.
      if (performance.now() - stoppingSince < REPEAT_SIGNAL_MS) return;
      logger.warn('stopping now, without waiting for in-flight requests', { signal });
      process.exit(130);
    }
    stoppingSince = performance.now();
    logger.info('shutting down', { signal });
    close()
      .then(() => process.exit(0))
      .catch((err: unknown) => {
        logger.error('shutdown failed', { error: String(err) });
        process.exit(1);
      });
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

/** The services take no arguments (their settings are SERVICE_* variables): help, or a usage error. */
function serviceArgs(rest: readonly string[]): number | undefined {
  if (rest.length === 0) return undefined;
  if (rest[0] === '--help' || rest[0] === '-h' || rest[0] === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  process.stderr.write(`unexpected argument: ${rest[0]} (settings are SERVICE_* variables)\n\n${USAGE}\n`);
  return 2;
}

async function main(argv: string[]): Promise<number> {
  const [command] = argv;
  switch (command) {
    case 'start':
    case 'control':
    case 'sidecar': {
      const early = serviceArgs(argv.slice(1));
      if (early !== undefined) return early;
      await (command === 'sidecar' ? sidecar() : start());
      return -1;
    }
    case 'keys':
      return (await import('./cli-keys.js')).runKeys(argv.slice(1), {
        stdout: process.stdout,
        stderr: process.stderr,
      });
    case 'verify':
      return (await import('./cli-verify.js')).runVerify(argv.slice(1), {
        stdout: process.stdout,
        stderr: process.stderr,
        isTTY: process.stderr.isTTY === true,
      });
    case 'verify-receipt':
      return (await import('./cli-receipt.js')).runVerifyReceipt(argv.slice(1), {
        stdout: process.stdout,
        stderr: process.stderr,
        isTTY: false,
      });
    case 'verify-consistency':
      return (await import('./cli-receipt.js')).runVerifyConsistency(argv.slice(1), {
        stdout: process.stdout,
        stderr: process.stderr,
        isTTY: false,
      });
    case '--version':
    case 'version':
      process.stdout.write(`${VERSION}\n`);
      return 0;
    case undefined:
    case 'help':
    case '--help':
      process.stdout.write(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    default:
      process.stderr.write(`unknown command: ${command}\n\n${USAGE}\n`);
      return 2;
  }
}

/** A file system refusal with its path (a data or keys dir that is a file, not writable, …). */
function isFileSystemError(err: unknown): err is NodeJS.ErrnoException {
  const e = err as NodeJS.ErrnoException | null;
  return (
    e instanceof Error &&
    typeof e.path === 'string' &&
    ['EACCES', 'EPERM', 'EEXIST', 'ENOTDIR', 'EISDIR', 'EROFS', 'ENOSPC', 'ENOENT'].includes(e.code ?? '')
  );
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (err: unknown) => {
    // What an operator fixes (configuration, a held data dir or port, the wrong keys dir) is
    // said plainly; anything else is a bug and keeps its stack.
    if (err instanceof ConfigError) process.stderr.write(`${err.message}\n`);
    else if (err instanceof Error && OPERATOR_ERRORS.has(err.name))
      process.stderr.write(`govgate: ${err.message}\n`);
    else if (isFileSystemError(err))
      process.stderr.write(
        `govgate: ${err.message} (check SERVICE_DATA_DIR and SERVICE_KEYS_DIR: each must be a directory this user can write, or a path where one can be made)\n`,
      );
    else
      process.stderr.write(`govgate: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
