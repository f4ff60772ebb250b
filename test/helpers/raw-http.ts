import { connect, type Socket } from 'node:net';
import { connect as connectTls, type TLSSocket } from 'node:tls';

export interface RawResponse {
  readonly status: number;
  /** Lower-case names; a repeated header's values joined with ', '. */
  readonly headers: Readonly<Record<string, string>>;
  /** How many times each header came (a duplicated `Connection` would be a bug). */
  readonly headerCounts: Readonly<Record<string, number>>;
  readonly body: string;
}

export interface RawRequest {
  readonly method: string;
  readonly path: string;
  readonly headers?: Record<string, string>;
  readonly body?: string;
}

/**
 * One HTTP/1.1 connection the test holds on to, so it can send a request on a connection that
 * stays open between requests (what fetch's pool hides). `request` sends one and reads its
 * answer; `send` writes several at once (pipelined) and `answer` reads their answers in order.
 * Answers with a Content-Length, chunked, or (for HEAD) without a body are read.
 */
export class RawConnection {
  private buffer = Buffer.alloc(0);
  private waiter: (() => void) | undefined;
  private ended = false;
  /** Resolves when the server closes the connection (or it fails). */
  readonly closed: Promise<void>;

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.waiter?.();
    });
    this.closed = new Promise((resolve) => {
      const done = (): void => {
        this.ended = true;
        this.waiter?.();
        resolve();
      };
      socket.once('end', done);
      socket.once('close', done);
      socket.on('error', done);
    });
  }

  static open(url: string): Promise<RawConnection> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname, () => {
        socket.off('error', reject);
        resolve(new RawConnection(socket));
      });
      socket.once('error', reject);
    });
  }

  /** The same over TLS, trusting `ca` (PEM), once the handshake is done. */
  static openTls(url: string, ca: string): Promise<RawConnection> {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      const socket = connectTls({ host: hostname, port: Number(port), ca }, () => {
        socket.off('error', reject);
        resolve(new RawConnection(socket));
      });
      socket.once('error', reject);
    });
  }

  /** Over TLS: the SHA-256 fingerprint of the certificate the server gave this connection. */
  get peerFingerprint(): string {
    return (this.socket as TLSSocket).getPeerCertificate().fingerprint256;
  }

  /** What arrived and is not yet read as an answer (to see that a stream has begun). */
  get received(): string {
    return this.buffer.toString('utf8');
  }

  /** True once the server closed its side. */
  get isClosed(): boolean {
    return this.ended;
  }

  /** Sends one request and reads its answer; rejects when the connection closes first or after `ms`. */
  request(
    method: string,
    path: string,
    opts: { headers?: Record<string, string>; body?: string; ms?: number } = {},
  ): Promise<RawResponse> {
    this.send({ method, path, headers: opts.headers, body: opts.body });
    return this.answer({ head: method === 'HEAD', ms: opts.ms, what: `${method} ${path}` });
  }

  /** Writes the requests in one write, without waiting for an answer (HTTP/1.1 pipelining). */
  send(...requests: RawRequest[]): void {
    let text = '';
    for (const { method, path, headers, body = '' } of requests) {
      text += `${method} ${path} HTTP/1.1\r\nHost: test\r\n`;
      for (const [k, v] of Object.entries(headers ?? {})) text += `${k}: ${v}\r\n`;
      if (body !== '' || method === 'POST') text += `Content-Length: ${Buffer.byteLength(body)}\r\n`;
      text += `\r\n${body}`;
    }
    this.socket.write(text);
  }

  /**
   * Reads the next answer (`head`: one to a HEAD, without a body); rejects when the connection
   * closes first or after `ms`.
   */
  async answer(opts: { head?: boolean; ms?: number; what?: string } = {}): Promise<RawResponse> {
    const ms = opts.ms ?? 5000;
    const what = opts.what ?? 'the request';
    const deadline = Date.now() + ms;
    for (;;) {
      const parsed = this.parse(opts.head === true);
      if (parsed !== undefined) return parsed;
      if (this.ended) throw new Error(`connection closed before a complete answer to ${what}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no complete answer to ${what} within ${ms} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          this.waiter = undefined;
          resolve();
        };
      });
    }
  }

  destroy(): void {
    this.socket.destroy();
  }

  /** One complete answer taken off the buffer, or undefined while it is incomplete. */
  private parse(noBody: boolean): RawResponse | undefined {
    const headEnd = this.buffer.indexOf('\r\n\r\n');
    if (headEnd < 0) return undefined;
    const lines = this.buffer.subarray(0, headEnd).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(lines[0] ?? '')?.[1]);
    const headers: Record<string, string> = {};
    const headerCounts: Record<string, number> = {};
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
      headerCounts[name] = (headerCounts[name] ?? 0) + 1;
    }
    const start = headEnd + 4;
    let end: number;
    let text: string;
    if (noBody) {
      end = start;
      text = '';
    } else if (headers['transfer-encoding'] === 'chunked') {
      const parts: Buffer[] = [];
      let at = start;
      for (;;) {
        const lineEnd = this.buffer.indexOf('\r\n', at);
        if (lineEnd < 0) return undefined;
        const size = Number.parseInt(this.buffer.subarray(at, lineEnd).toString('latin1'), 16);
        if (!Number.isFinite(size)) throw new Error('a malformed chunk size');
        if (this.buffer.length < lineEnd + 2 + size + 2) return undefined;
        if (size === 0) {
          end = lineEnd + 4;
          break;
        }
        parts.push(this.buffer.subarray(lineEnd + 2, lineEnd + 2 + size));
        at = lineEnd + 2 + size + 2;
      }
      text = Buffer.concat(parts).toString('utf8');
    } else {
      const length = Number(headers['content-length'] ?? 0);
      if (this.buffer.length < start + length) return undefined;
      end = start + length;
      text = this.buffer.subarray(start, end).toString('utf8');
    }
    this.buffer = this.buffer.subarray(end);
    return { status, headers, headerCounts, body: text };
  }
}
