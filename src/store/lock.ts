import { createHash } from 'node:crypto';
import { mkdirSync, realpathSync, unlinkSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { join } from 'node:path';

/** The data dir is held by another process. */
export class DataDirInUseError extends Error {
  constructor(readonly dataDir: string) {
    super(
      `the data dir ${dataDir} is in use by another govgate process (one process per data dir: a ` +
        'second one would write over its audit chain); stop it, or give this one its own SERVICE_DATA_DIR',
    );
    this.name = 'DataDirInUseError';
  }
}

export interface DataDirLock {
  release(): Promise<void>;
}

/**
 * Holds `dataDir` for this process. Two processes on one LMDB environment would each keep their own
 * audit chain heads and write over each other's events (while the integrity check, reading one
 * consistent chain, still says intact), so a second start on a held dir is refused.
 *
 * The lock is a listening Unix socket, so the kernel frees it with the process, however it ends
 * (no stale lock after a crash or SIGKILL). On Linux it lives in the abstract namespace, named
 * after the dir's real path (it spans one network namespace: one machine or one pod); elsewhere
 * it is a socket file in the dir, and a leftover file that nothing answers on is replaced.
 */
export async function lockDataDir(dataDir: string): Promise<DataDirLock> {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const real = realpathSync(dataDir);
  const abstract = process.platform === 'linux';
  const path = abstract
    ? `\0govgate-data-${createHash('sha256').update(real).digest('hex').slice(0, 32)}`
    : join(real, 'govgate.lock');
  const server = createServer((socket) => socket.destroy());
  try {
    await listenOn(server, path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
    if (abstract || (await answers(path))) throw new DataDirInUseError(real);
    unlinkSync(path); // a socket file left by a process that is gone
    await listenOn(server, path);
  }
  server.unref();
  return {
    release: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
      }),
  };
}

function listenOn(server: Server, path: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** Something accepts connections on the socket file `path`. */
function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(path);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
