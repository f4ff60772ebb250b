import { type AddressInfo, createServer } from 'node:net';
import { ListenError, type ListenOptions } from './types.js';

// node:net's view of an address, for uWS, which says only that it could not listen.

/** Why `opts` cannot be listened on, as node:net reports it. */
export function listenFailure(opts: ListenOptions): Promise<Error> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => resolve(new ListenError(opts.host, opts.port, err)));
    probe.listen(opts.port, opts.host, () => {
      probe.close();
      resolve(new ListenError(opts.host, opts.port));
    });
  });
}

/**
 * Claims host:port for a socket that may be shared: node:net listens on it first without
 * SO_REUSEPORT, which fails (EADDRINUSE, named) while any socket holds the port, one that allows
 * sharing included; then, on the same turn, lets it go and calls `bind` with the port (port 0 is
 * resolved here: the kernel never lets a socket join a port it picked for another).
 */
export function claimPort<T>(opts: ListenOptions, bind: (port: number) => T): Promise<T> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => reject(new ListenError(opts.host, opts.port, err)));
    probe.listen(opts.port, opts.host, () => {
      const port = (probe.address() as AddressInfo).port;
      // The file descriptor is closed now, not at the close event: the bind follows at once.
      probe.close();
      resolve(bind(port));
    });
  });
}
