// OpenAI-compatible mock upstream on uWS, for load tests only.
// POST /v1/chat/completions (JSON, or SSE when "stream": true), POST /v1/embeddings, GET /v1/models.
// Usage: node mock-upstream.mjs [--port=N]   (or MOCK_PORT=N; 0 picks a free port)
// Prints one line `{"ready":true,"port":N}` on stdout once listening on 127.0.0.1.
import uWS from '@trufflesuite/uws-js-unofficial';

const HOST = '127.0.0.1';
const MAX_BODY = 8 << 20; // large-body.mjs sends ~2 MB prompts
// Number of separate writes (event-loop turns) an SSE response is split into.
const SSE_WRITES = Math.max(1, Number(process.env.MOCK_SSE_WRITES ?? 4));
const CREATED = 1_700_000_000;

const ANSWER =
  'Here is a concise summary of the quarterly report you shared. Revenue grew eleven percent year ' +
  'over year, driven mostly by the subscription tier, while hardware sales were flat. Operating ' +
  'margin improved by two points thanks to lower cloud costs and a smaller marketing budget. The ' +
  'main risks called out are currency exposure in Europe, a pending supplier contract renewal and ' +
  'slower hiring in the support team. The outlook for next quarter is cautious but positive, with ' +
  'guidance of eight to ten percent growth and a plan to launch two new integrations. Let me know ' +
  'if you would like a deeper look at any of these areas or a comparison with the previous year.';

function completionJson(model) {
  return JSON.stringify({
    id: 'chatcmpl-bench0000000000000000000001',
    object: 'chat.completion',
    created: CREATED,
    model,
    system_fingerprint: 'fp_bench',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: ANSWER, refusal: null },
        logprobs: null,
        finish_reason: 'stop',
      },
    ],
    usage: { prompt_tokens: 231, completion_tokens: 112, total_tokens: 343 },
  });
}

// ~20 chat.completion.chunk events (+ an optional usage chunk) and [DONE], split into SSE_WRITES parts.
function sseParts(model, includeUsage) {
  const words = ANSWER.split(' ');
  const per = Math.ceil(words.length / 20);
  const events = [];
  const base = {
    id: 'chatcmpl-bench0000000000000000000002',
    object: 'chat.completion.chunk',
    created: CREATED,
  };
  const chunk = (delta, finish) =>
    JSON.stringify({
      ...base,
      model,
      system_fingerprint: 'fp_bench',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    });
  events.push(chunk({ role: 'assistant', content: '' }, null));
  for (let i = 0; i < words.length; i += per) {
    const piece = (i === 0 ? '' : ' ') + words.slice(i, i + per).join(' ');
    events.push(chunk({ content: piece }, null));
  }
  events.push(chunk({}, 'stop'));
  if (includeUsage) {
    events.push(
      JSON.stringify({
        ...base,
        model,
        choices: [],
        usage: { prompt_tokens: 231, completion_tokens: 112, total_tokens: 343 },
      }),
    );
  }
  const lines = events.map((e) => `data: ${e}\n\n`);
  lines.push('data: [DONE]\n\n');
  const parts = [];
  const size = Math.ceil(lines.length / SSE_WRITES);
  for (let i = 0; i < lines.length; i += size) parts.push(lines.slice(i, i + size).join(''));
  return parts;
}

function embeddingsJson(model, count) {
  const data = [];
  for (let i = 0; i < count; i++) {
    const embedding = new Array(16);
    for (let j = 0; j < 16; j++) embedding[j] = Math.round(Math.sin(i * 16 + j) * 1e6) / 1e6;
    data.push({ object: 'embedding', index: i, embedding });
  }
  return JSON.stringify({
    object: 'list',
    data,
    model,
    usage: { prompt_tokens: 8 * count, total_tokens: 8 * count },
  });
}

const MODELS_JSON = JSON.stringify({
  object: 'list',
  data: ['gpt-4o-mini', 'gpt-4o', 'text-embedding-3-small'].map((id) => ({
    id,
    object: 'model',
    created: CREATED,
    owned_by: 'bench',
  })),
});

// Responses are cached per (model, stream, usage) so the mock spends its CPU on I/O, not JSON.
const cache = new Map();
function cached(key, make) {
  let v = cache.get(key);
  if (v === undefined) {
    v = make();
    if (cache.size < 64) cache.set(key, v);
  }
  return v;
}

function sendJson(res, state, status, body) {
  if (state.aborted) return;
  res.cork(() => {
    res.writeStatus(status).writeHeader('content-type', 'application/json').end(body);
  });
}

function error(res, state, status, message) {
  sendJson(res, state, status, JSON.stringify({ error: { message, type: 'invalid_request_error' } }));
}

function readJson(res, state, onBody) {
  const chunks = [];
  let size = 0;
  res.onData((ab, isLast) => {
    if (state.aborted) return;
    size += ab.byteLength;
    if (size > MAX_BODY) {
      state.aborted = true;
      res.close();
      return;
    }
    chunks.push(Buffer.from(ab.slice(0)));
    if (!isLast) return;
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks, size).toString('utf8'));
    } catch {
      error(res, state, '400 Bad Request', 'invalid JSON body');
      return;
    }
    if (body === null || typeof body !== 'object') {
      error(res, state, '400 Bad Request', 'body must be an object');
      return;
    }
    onBody(body);
  });
}

function streamSse(res, state, parts) {
  let i = 0;
  const step = () => {
    if (state.aborted) return;
    res.cork(() => {
      if (i === 0) {
        res
          .writeStatus('200 OK')
          .writeHeader('content-type', 'text/event-stream')
          .writeHeader('cache-control', 'no-cache');
      }
      const part = parts[i++];
      if (i >= parts.length) res.end(part);
      else res.write(part);
    });
    if (i < parts.length) setImmediate(step);
  };
  step();
}

/**
 * `gpt-slow-stream-N`: a streamed answer whose one content event holds N MiB of full-width letters
 * (the detectors' slowest text, detect-worst.mjs): what an org's provider can send to make its
 * answer slow to scan (large-body.mjs --answer).
 */
function slowStreamParts(model, mib) {
  const text = 'ｉｇｎｏｒｅ '
    .repeat(Math.ceil((mib * 1024 * 1024) / 7 / 3))
    .slice(0, Math.floor((mib * 1024 * 1024) / 3));
  const chunk = (delta, finish) =>
    `data: ${JSON.stringify({ id: 'chatcmpl-slow', object: 'chat.completion.chunk', created: CREATED, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  return [chunk({ role: 'assistant', content: text }, null), chunk({}, 'stop'), 'data: [DONE]\n\n'];
}

function chat(res, _req) {
  const state = { aborted: false };
  res.onAborted(() => {
    state.aborted = true;
  });
  readJson(res, state, (body) => {
    const model = typeof body.model === 'string' && body.model.length <= 128 ? body.model : 'gpt-4o-mini';
    if (!Array.isArray(body.messages)) {
      error(res, state, '400 Bad Request', 'messages is required');
      return;
    }
    const slow = /^gpt-slow-stream-(\d{1,2})$/.exec(model);
    if (slow !== null && body.stream === true) {
      streamSse(
        res,
        state,
        cached(`slow|${model}`, () => slowStreamParts(model, Number(slow[1]))),
      );
      return;
    }
    if (body.stream === true) {
      const usage = body.stream_options?.include_usage === true;
      streamSse(
        res,
        state,
        cached(`s|${model}|${usage}`, () => sseParts(model, usage)),
      );
    } else {
      sendJson(
        res,
        state,
        '200 OK',
        cached(`c|${model}`, () => completionJson(model)),
      );
    }
  });
}

function embeddings(res, _req) {
  const state = { aborted: false };
  res.onAborted(() => {
    state.aborted = true;
  });
  readJson(res, state, (body) => {
    const model =
      typeof body.model === 'string' && body.model.length <= 128 ? body.model : 'text-embedding-3-small';
    const count = Array.isArray(body.input) ? Math.min(body.input.length, 256) : 1;
    sendJson(
      res,
      state,
      '200 OK',
      cached(`e|${model}|${count}`, () => embeddingsJson(model, count)),
    );
  });
}

function portArg() {
  const a = process.argv.find((x) => x.startsWith('--port='));
  const v = a ? a.slice(7) : (process.env.MOCK_PORT ?? '0');
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`bad port: ${v}`);
  return n;
}

const app = uWS
  .App()
  .post('/v1/chat/completions', chat)
  .post('/chat/completions', chat)
  .post('/v1/embeddings', embeddings)
  .get('/v1/models', (res) => {
    res.writeStatus('200 OK').writeHeader('content-type', 'application/json').end(MODELS_JSON);
  })
  .any('/*', (res) => {
    res.writeStatus('404 Not Found').writeHeader('content-type', 'application/json');
    res.end('{"error":{"message":"not found","type":"invalid_request_error"}}');
  });

let listenSocket = null;
app.listen(HOST, portArg(), (socket) => {
  if (!socket) {
    console.error('mock-upstream: listen failed');
    process.exit(1);
  }
  listenSocket = socket;
  process.stdout.write(`${JSON.stringify({ ready: true, port: uWS.us_socket_local_port(socket) })}\n`);
});

const stop = () => {
  if (listenSocket) uWS.us_listen_socket_close(listenSocket);
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
