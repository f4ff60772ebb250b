import { listenNode } from './node-adapter.js';
import type { HttpHandler, HttpServer, ListenOptions } from './types.js';
import { listenUws, loadUws } from './uws-adapter.js';

/**
 * Starts the HTTP engine. uWS is preferred; node:http serves when it is asked for, or when the
 * native uWS binary cannot load on this machine. Both hand the same plain objects to `handler`.
 */
export function listen(
  engine: 'uws' | 'node',
  opts: ListenOptions,
  handler: HttpHandler,
): Promise<HttpServer> {
  if (engine === 'uws') {
    const uws = loadUws();
    if (uws) return listenUws(uws, opts, handler);
  }
  return listenNode(opts, handler);
}

/** The URL this machine reaches a listener at: `0.0.0.0` is reached on loopback, IPv6 in brackets. */
export function localUrl(host: string, port: number, tls: boolean): string {
  const h = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
  return `${tls ? 'https' : 'http'}://${h}:${port}`;
}
