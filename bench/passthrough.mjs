// The bare ceiling: a uWS server that forwards each request to one upstream with an undici Pool and
// writes the upstream's status and body back. No parsing, no policy, nothing else; SSE is piped chunk
// by chunk, other bodies are buffered and sent with a content-length.
// Usage: node passthrough.mjs --upstream=http://127.0.0.1:PORT [--port=N]
// Prints one line `{"ready":true,"port":N}` on stdout once listening on 127.0.0.1.
import { STATUS_CODES } from 'node:http';
import uWS from '@trufflesuite/uws-js-unofficial';
import { Pool } from 'undici';

const HOST = '127.0.0.1';
const MAX_BODY = 4 << 20;
const FORWARD_REQUEST_HEADERS = ['content-type', 'authorization', 'accept'];

function arg(name, fallback) {
  const prefix = `--${name}=`;
  const a = process.argv.find((x) => x.startsWith(prefix));
  return a ? a.slice(prefix.length) : fallback;
}

const upstream = new URL(arg('upstream', process.env.PASSTHROUGH_UPSTREAM ?? ''));
if (upstream.hostname !== '127.0.0.1' && upstream.hostname !== 'localhost') {
  throw new Error('passthrough: the upstream must be on loopback');
}
const pool = new Pool(upstream.origin, {
  connections: Number(arg('connections', '64')),
  pipelining: 1,
  keepAliveTimeout: 30_000,
});

const statusLines = new Map();
function statusLine(code) {
  let s = statusLines.get(code);
  if (s === undefined) {
    s = `${code} ${STATUS_CODES[code] ?? 'Unknown'}`;
    statusLines.set(code, s);
  }
  return s;
}

function headerValue(headers, name) {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

// One forwarded exchange. uWS objects are touched only while `aborted` is false.
class Exchange {
  constructor(res, path, method, headers) {
    this.res = res;
    this.path = path;
    this.method = method;
    this.headers = headers;
    this.aborted = false;
    this.done = false;
    this.controller = null;
    this.streaming = false;
    this.started = false;
    this.status = 502;
    this.contentType = null;
    this.chunks = [];
    this.size = 0;
    this.paused = false;
  }

  send(body) {
    pool.dispatch({ path: this.path, method: this.method, headers: this.headers, body }, this);
  }

  // undici DispatchHandler
  onRequestStart(controller) {
    this.controller = controller;
    if (this.aborted) controller.abort(new Error('client aborted'));
  }

  onResponseStart(_controller, statusCode, headers) {
    if (statusCode < 200) return;
    this.status = statusCode;
    this.contentType = headerValue(headers, 'content-type') ?? null;
    this.streaming = this.contentType?.startsWith('text/event-stream') === true;
    if (this.streaming && !this.aborted) {
      this.started = true;
      this.res.cork(() => {
        this.res.writeStatus(statusLine(statusCode)).writeHeader('content-type', this.contentType);
        this.res.writeHeader('cache-control', 'no-cache');
      });
    }
  }

  onResponseData(controller, chunk) {
    if (this.aborted) return;
    if (!this.streaming) {
      this.chunks.push(chunk);
      this.size += chunk.length;
      return;
    }
    let ok = true;
    this.res.cork(() => {
      ok = this.res.write(chunk);
    });
    if (!ok && !this.paused) {
      this.paused = true;
      controller.pause();
      this.res.onWritable(() => {
        this.paused = false;
        controller.resume();
        return true;
      });
    }
  }

  onResponseEnd() {
    this.done = true;
    if (this.aborted) return;
    this.res.cork(() => {
      if (this.streaming) {
        this.res.end();
        return;
      }
      this.res.writeStatus(statusLine(this.status));
      if (this.contentType) this.res.writeHeader('content-type', this.contentType);
      this.res.end(this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.size));
    });
  }

  onResponseError(_controller, err) {
    this.done = true;
    if (this.aborted) return;
    if (this.started) {
      this.aborted = true;
      this.res.close();
      return;
    }
    const body = JSON.stringify({ error: { message: `upstream error: ${err.code ?? err.message}` } });
    this.res.cork(() => {
      this.res.writeStatus('502 Bad Gateway').writeHeader('content-type', 'application/json').end(body);
    });
  }

  onClientAborted() {
    this.aborted = true;
    if (!this.done && this.controller) this.controller.abort(new Error('client aborted'));
  }
}

function handle(res, req) {
  // Copy everything needed from req before returning: uWS invalidates it afterwards.
  const method = req.getCaseSensitiveMethod();
  const query = req.getQuery();
  const path = query ? `${req.getUrl()}?${query}` : req.getUrl();
  const headers = {};
  for (const name of FORWARD_REQUEST_HEADERS) {
    const v = req.getHeader(name);
    if (v) headers[name] = v;
  }
  const ex = new Exchange(res, path, method, headers);
  res.onAborted(() => ex.onClientAborted());
  if (method === 'GET' || method === 'HEAD') {
    ex.send(null);
    return;
  }
  const chunks = [];
  let size = 0;
  res.onData((ab, isLast) => {
    if (ex.aborted) return;
    size += ab.byteLength;
    if (size > MAX_BODY) {
      ex.aborted = true;
      res.close();
      return;
    }
    if (ab.byteLength > 0) chunks.push(Buffer.from(ab.slice(0)));
    if (isLast) ex.send(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
  });
}

const app = uWS.App().any('/*', handle);
let listenSocket = null;
app.listen(HOST, Number(arg('port', process.env.PASSTHROUGH_PORT ?? '0')), (socket) => {
  if (!socket) {
    console.error('passthrough: listen failed');
    process.exit(1);
  }
  listenSocket = socket;
  process.stdout.write(`${JSON.stringify({ ready: true, port: uWS.us_socket_local_port(socket) })}\n`);
});

const stop = () => {
  if (listenSocket) uWS.us_listen_socket_close(listenSocket);
  pool.destroy().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
