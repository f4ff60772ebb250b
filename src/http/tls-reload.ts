import { realpath, stat } from 'node:fs/promises';
import type { Logger } from '../util/log.js';
import { loadTlsFiles, type TlsFiles } from './tls.js';

/**
 * How often a listener's certificate and key files are looked at. The kubelet updates a mounted
 * Secret within about a minute of its change; a renewal is then served within this much more.
 */
export const TLS_RELOAD_INTERVAL_MS = 30_000;

export type TlsReloadOutcome = 'unchanged' | 'reloaded' | 'refused';

export interface TlsReloadOptions {
  /** The listener, in log lines and on the metric: `api`, `injector`. */
  readonly listener: string;
  /** The files in force, as loadTlsFiles read them at start. */
  readonly initial: TlsFiles;
  /**
   * Puts checked files in force for new connections (`HttpServer.replaceTls`, or node's
   * `setSecureContext`); throws or rejects, the listener serving as before, when it cannot.
   */
  readonly apply: (files: TlsFiles) => void | Promise<void>;
  readonly logger: Logger;
  /** Told each renewal put in force and each refused (once per state of the files and reason). */
  readonly counted?: (outcome: 'reloaded' | 'refused') => void;
  readonly intervalMs?: number;
  /** Reads a file's identity and times (`fs.promises.stat`; tests give a coarser one). */
  readonly statFile?: (file: string) => Promise<FileTimes>;
}

/** What a look reads of a file. */
export interface FileTimes {
  readonly dev: number;
  readonly ino: number;
  readonly size: number;
  readonly mtimeMs: number;
  readonly ctimeMs: number;
}

export interface TlsReloader {
  /** The files in force (their `notAfter` is the certificate-expiry metric's). */
  readonly current: TlsFiles;
  /** Looks at the files now, as the timer does (never rejects). */
  check(): Promise<TlsReloadOutcome>;
  /** Stops looking; a check under way puts nothing in force. */
  stop(): void;
}

/**
 * What identifies the state of a file: where its path leads (a Secret volume swaps its files by
 * re-pointing a `..data` symlink), and the identity, size and times of what is there. Polled,
 * not watched: fs.watch misses the symlink swap of a Secret volume, and events on network and
 * overlay file systems.
 */
async function fileState(
  file: string,
  statFile: (file: string) => Promise<FileTimes>,
): Promise<{ readonly id: string; readonly changedMs: number }> {
  try {
    const [path, st] = await Promise.all([realpath(file), statFile(file)]);
    return {
      id: `${path}|${st.dev}:${st.ino}|${st.size}|${st.mtimeMs}|${st.ctimeMs}`,
      changedMs: Math.max(st.mtimeMs, st.ctimeMs),
    };
  } catch (err) {
    return { id: `!${(err as NodeJS.ErrnoException).code ?? String(err)}`, changedMs: 0 };
  }
}

/**
 * A file changed less than this long before a look may change again with the same times: file
 * systems whose times tick in whole seconds (ext3, some network and overlay mounts) keep a
 * rewrite in place, at the same size, within the tick as the state already seen. Such a state is
 * read again at the next look rather than trusted (the contents decide; nothing is put in force
 * twice).
 */
const SETTLE_MS = 2_000;

/**
 * Watches a listener's certificate and key files (docs/ops.md, "TLS"): when they change, they are
 * checked by loadTlsFiles, as at start, and a pair that passes is put in force for new
 * connections. A pair that fails (unreadable, not PEM, a key not the certificate's, expired or
 * not valid yet, or refused by the engine) is logged as an error and counted, and the certificate
 * in force stays; it is checked again at every look while it stays refused (a certificate not yet
 * valid becomes valid; a writer that replaced one file has yet to replace the other).
 */
export function watchTlsFiles(opts: TlsReloadOptions): TlsReloader {
  const { certFile, keyFile } = opts.initial;
  let current = opts.initial;
  // Unknown at first: the first look reads the files, in case they changed since they were read.
  let seen: string | undefined;
  let refused: string | undefined;
  let stopped = false;
  let running: Promise<TlsReloadOutcome> | undefined;

  const refuse = (state: string, err: unknown): TlsReloadOutcome => {
    const reason = err instanceof Error ? err.message : String(err);
    const key = `${state}\n${reason}`;
    if (refused !== key) {
      refused = key;
      opts.logger.error('the TLS certificate on disk is refused; new connections get the one in force', {
        listener: opts.listener,
        reason,
        cert_file: certFile,
        key_file: keyFile,
        in_force_not_after: current.notAfter.toISOString(),
      });
      opts.counted?.('refused');
    }
    return 'refused';
  };

  const statFile = opts.statFile ?? stat;
  // The two files' state, and whether it is young enough to change unseen (SETTLE_MS).
  const states = async (): Promise<{ id: string; young: boolean }> => {
    const cert = await fileState(certFile, statFile);
    const key = await fileState(keyFile, statFile);
    return {
      id: `${cert.id}\n${key.id}`,
      young: Date.now() - Math.max(cert.changedMs, key.changedMs) < SETTLE_MS,
    };
  };

  const look = async (): Promise<TlsReloadOutcome> => {
    const { id: state, young } = await states();
    if (stopped || (state === seen && refused === undefined)) return 'unchanged';
    let files: TlsFiles | undefined;
    let failure: unknown;
    try {
      files = loadTlsFiles(certFile, keyFile);
    } catch (err) {
      failure = err;
    }
    // Files swapped while they were looked at may have been read half old, half new: judged at
    // the next look, once they hold still.
    if ((await states()).id !== state || stopped) return 'unchanged';
    // A young state is not trusted: the next look reads the files again (SETTLE_MS).
    seen = young ? undefined : state;
    if (files === undefined) return refuse(state, failure);
    if (files.cert.equals(current.cert) && files.key.equals(current.key)) {
      refused = undefined;
      return 'unchanged';
    }
    try {
      await opts.apply(files);
    } catch (err) {
      return refuse(state, err);
    }
    opts.logger.info('a renewed TLS certificate is served to new connections', {
      listener: opts.listener,
      cert_file: certFile,
      not_after: files.notAfter.toISOString(),
      previous_not_after: current.notAfter.toISOString(),
    });
    current = files;
    refused = undefined;
    opts.counted?.('reloaded');
    return 'reloaded';
  };

  const check = (): Promise<TlsReloadOutcome> => {
    // One look at a time: the timer's and a caller's share it.
    running ??= look()
      .catch((err: unknown) => refuse('', err))
      .finally(() => {
        running = undefined;
      });
    return running;
  };

  const timer = setInterval(() => void check(), opts.intervalMs ?? TLS_RELOAD_INTERVAL_MS);
  timer.unref();
  return {
    get current() {
      return current;
    },
    check,
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}
