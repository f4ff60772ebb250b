import { rmSync } from 'node:fs';
import { connect as connectSocket, type Socket } from 'node:net';
import { connect as connectTls, type TLSSocket } from 'node:tls';
import {
  type ForwardProxy,
  type ForwardProxyLimits,
  type ProviderHost,
  startForwardProxy,
} from '../../src/sidecar/proxy.js';
import { ProxyCa } from '../../src/sidecar/proxy-ca.js';
import { createLogger, type Logger } from '../../src/util/log.js';
import { tempDir } from './tmp.js';

/** The one agent key the bare proxy admits. */
export const KEY = `gk_agent_${'A'.repeat(40)}`;
export const basic = (key: string): string => `Basic ${Buffer.from(`agent:${key}`).toString('base64')}`;
/** A tunnel to the bare proxy's provider host, with its credential. */
export const CONNECT = `CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\nProxy-Authorization: ${basic(KEY)}\r\n\r\n`;

/**
 * The forward proxy on its own, on 127.0.0.1:0, with the proxy CA of a fresh keys dir, the
 * provider hosts `hosts` (api.openai.com unless given) and a handler that answers every call 200
 * with its path: what the proxy itself does is under test, not the gateway behind it.
 */
export async function bareProxy(
  t: { teardown(fn: () => Promise<void>): void },
  opts: {
    limits?: ForwardProxyLimits;
    authenticate?: (secret: string) => boolean;
    hosts?: readonly string[];
    /** The provider hosts as the sidecar builds them (RemoteSnapshot.providerHosts), instead of `hosts`. */
    providerHosts?: () => ReadonlyMap<string, ProviderHost>;
    logger?: Logger;
    /** What the proxy counts of its own refusals (ForwardProxyOptions.onRefused). */
    onRefused?: (method: string, status: number, seconds: number) => void;
  } = {},
): Promise<{ proxy: ForwardProxy; caPem: string; handled: () => number }> {
  const dir = tempDir('govgate-proxy-');
  const ca = ProxyCa.load(dir);
  let handled = 0;
  const hosts = new Map<string, ProviderHost>(
    (opts.hosts ?? ['api.openai.com']).map((host) => [host, { host, prefixes: [''] }]),
  );
  const proxy = await startForwardProxy({
    host: '127.0.0.1',
    port: 0,
    ca,
    providerHosts: opts.providerHosts ?? (() => hosts),
    authenticate: opts.authenticate ?? ((secret) => secret === KEY),
    handler: (req, res) => {
      handled++;
      res.send(200, { 'content-type': 'application/json' }, JSON.stringify({ path: req.path }));
    },
    logger: opts.logger ?? createLogger('error'),
    ...(opts.limits === undefined ? {} : { limits: opts.limits }),
    ...(opts.onRefused === undefined ? {} : { onRefused: opts.onRefused }),
  });
  t.teardown(async () => {
    await proxy.close(100);
    rmSync(dir, { recursive: true, force: true });
  });
  return { proxy, caPem: ca.certPem, handled: () => handled };
}

/** What a socket receives until it closes (`limitMs` only keeps a broken test from hanging). */
export function untilClosed(socket: Socket | TLSSocket, limitMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      got += d;
    });
    socket.on('error', () => undefined);
    const guard = setTimeout(() => {
      socket.destroy();
      reject(new Error(`still open after ${limitMs} ms: ${JSON.stringify(got)}`));
    }, limitMs);
    socket.once('close', () => {
      clearTimeout(guard);
      resolve(got);
    });
  });
}

/** Sends `request` to the proxy on a fresh connection; resolves with the proxy's head (up to its blank line). */
export function proxyHead(
  port: number,
  request: string,
): Promise<{ socket: Socket; head: string; rest: string }> {
  return new Promise((resolve, reject) => {
    const socket = connectSocket(port, '127.0.0.1', () => socket.write(request));
    let got = '';
    const onData = (d: Buffer): void => {
      got += d.toString('latin1');
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.pause();
      resolve({ socket, head: got.slice(0, end), rest: got.slice(end + 4) });
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error(`closed before an answer: ${JSON.stringify(got)}`)));
  });
}

/** A tunnel to `host` (api.openai.com) through the proxy, its TLS handshake done (trusting the proxy CA). */
export async function openTunnel(port: number, caPem: string, host = 'api.openai.com'): Promise<TLSSocket> {
  const { socket, head } = await proxyHead(
    port,
    `CONNECT ${host}:443 HTTP/1.1\r\nHost: ${host}:443\r\nProxy-Authorization: ${basic(KEY)}\r\n\r\n`,
  );
  if (!head.startsWith('HTTP/1.1 200 ')) throw new Error(`tunnel refused: ${head}`);
  socket.removeAllListeners('close');
  return new Promise((resolve, reject) => {
    const tls = connectTls({ socket, servername: host, ca: caPem }, () => resolve(tls));
    tls.once('error', reject);
  });
}

/** The status, head and JSON body (if any) of an answer read whole. */
export function parsed(answer: string): { status: number; head: string; body: any } {
  const end = answer.indexOf('\r\n\r\n');
  const head = end < 0 ? answer : answer.slice(0, end);
  const body = end < 0 ? '' : answer.slice(end + 4);
  return { status: Number(head.split(' ')[1]), head, body: body === '' ? undefined : JSON.parse(body) };
}
