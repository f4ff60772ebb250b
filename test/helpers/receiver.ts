import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedPost {
  readonly path: string;
  readonly raw: string;
  /** The body parsed as JSON, or undefined when it is not JSON (HEC lines). */
  readonly body: any;
  readonly headers: IncomingHttpHeaders;
}

export interface Receiver {
  readonly port: number;
  readonly posts: ReceivedPost[];
  /** The next `n` requests to a path starting with `path` are answered `status` (and not recorded). */
  fail(n: number, status?: number, path?: string): void;
  close(): Promise<void>;
}

/** A webhook, SIEM or OTLP receiver on 127.0.0.1: records each request it answers 200. */
export async function startReceiver(): Promise<Receiver> {
  const posts: ReceivedPost[] = [];
  let failing = 0;
  let failStatus = 503;
  let failPath = '';
  const server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => {
      raw += c;
    });
    req.on('end', () => {
      const path = req.url ?? '';
      if (failing > 0 && path.startsWith(failPath)) {
        failing--;
        res.writeHead(failStatus).end();
        return;
      }
      let body: unknown;
      try {
        body = JSON.parse(raw);
      } catch {
        body = undefined;
      }
      posts.push({ path, raw, body, headers: req.headers });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    posts,
    fail(n, status = 503, path = '') {
      failing = n;
      failStatus = status;
      failPath = path;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
