import { connect } from 'node:net';
import type { Test } from 'tap';
import t from 'tap';
import { ERROR_CATALOG, type ErrorCode } from '../../src/core/errors.js';
import { ENGINES, serviceOnMockUpstream, startService, type TestService } from '../helpers/service.js';

type Res = Awaited<ReturnType<TestService['call']>>;

const MAX_BODY = 5 * 1024 * 1024;
const ERROR_KEYS = new Set(['type', 'code', 'message', 'request_id', 'param', 'problems']);
const MSG = { role: 'user', content: 'hello' } as const;

function messages(n: number): { role: string; content: string }[] {
  return Array.from({ length: n }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `m${i}`,
  }));
}

function tools(n: number): unknown[] {
  return Array.from({ length: n }, (_, i) => ({
    type: 'function',
    function: { name: `tool_${i}`, description: 'a tool', parameters: { type: 'object', properties: {} } },
  }));
}

/** Exactly `{type: 'error', error: {type, code, message, request_id, param?, problems?}}`, matching the catalog. */
function assertError(t: Test, res: Res, code: ErrorCode, param?: string): void {
  const entry = ERROR_CATALOG[code];
  t.equal(res.status, entry.status, `status ${entry.status} (${code}): ${JSON.stringify(res.body)}`);
  t.match(res.headers.get('content-type'), /^application\/json/);
  t.same(Object.keys(res.body ?? {}).sort(), ['error', 'type'], 'top level is exactly {type, error}');
  t.equal(res.body?.type, 'error');
  const e = (res.body?.error ?? {}) as Record<string, unknown>;
  const keys = Object.keys(e);
  t.ok(
    keys.every((k) => ERROR_KEYS.has(k)),
    `only contract fields in error: ${keys.join(',')}`,
  );
  for (const k of ['type', 'code', 'message', 'request_id'])
    t.equal(typeof e[k], 'string', `error.${k} is a string`);
  if ('param' in e) t.equal(typeof e.param, 'string', 'error.param is a string when present');
  t.equal(e.code, code);
  t.equal(e.type, entry.type);
  t.ok((e.message as string).length > 0, 'a message');
  const rid = res.headers.get('x-request-id');
  t.ok(rid, 'X-Request-Id header');
  t.equal(e.request_id, rid, 'error.request_id equals X-Request-Id');
  if (param !== undefined) t.equal(e.param, param, `param ${param}`);
}

/**
 * Sends raw HTTP/1.1 bytes on one connection and resolves with everything read once `done` says the
 * answer is complete (the test's own timeout guards a hang).
 */
function rawExchange(url: string, request: string, done: (received: string) => boolean): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    let received = '';
    const socket = connect(Number(port), hostname, () => socket.write(request));
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
      if (done(received)) {
        socket.destroy();
        resolve(received);
      }
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(received));
  });
}

function assertOk(t: Test, res: Res, what: string): void {
  t.equal(res.status, 200, `${what}: ${res.status === 200 ? 'ok' : JSON.stringify(res.body)}`);
  t.ok(res.headers.get('x-request-id'), `${what}: X-Request-Id on success`);
}

for (const engine of ENGINES) {
  t.test(`request validation over HTTP (${engine})`, async (t) => {
    const svc = await startService({ engine });
    t.teardown(() => svc.close());
    const chat = (body: unknown, headers: Record<string, string> = {}): Promise<Res> =>
      svc.call('/v1/chat/completions', { token: svc.agentKey, body, headers });
    const base = { model: 'mock-echo', messages: [MSG] };

    t.test('messages: 0 and 501 are refused, 1 and 500 pass', async (t) => {
      assertError(t, await chat({ model: 'mock-echo', messages: [] }), 'invalid_request', 'messages');
      assertError(
        t,
        await chat({ model: 'mock-echo', messages: messages(501) }),
        'invalid_request',
        'messages',
      );
      assertError(t, await chat({ model: 'mock-echo' }), 'invalid_request', 'messages');
      assertError(t, await chat({ model: 'mock-echo', messages: 'hello' }), 'invalid_request', 'messages');
      const max = await chat({
        model: 'mock-echo',
        messages: messages(499).concat([{ role: 'user', content: 'last' }]),
      });
      assertOk(t, max, '500 messages');
      t.equal(max.body.choices[0].message.content.includes('last'), true, 'the mock saw the last message');
      assertOk(t, await chat(base), '1 message');
    });

    t.test('tools: 201 is refused, 200 passes', async (t) => {
      assertError(t, await chat({ ...base, tools: tools(201) }), 'invalid_request', 'tools');
      assertOk(t, await chat({ ...base, tools: tools(200) }), '200 tools');
      assertError(t, await chat({ ...base, tools: { type: 'function' } }), 'invalid_request', 'tools');
      assertError(
        t,
        await chat({ ...base, tools: [{ type: 'function', function: {} }] }),
        'invalid_request',
        'tools[0].function.name',
      );
    });

    t.test('temperature: -0.1 and 2.01 are refused, 0 and 2 pass', async (t) => {
      for (const temperature of [-0.1, 2.01, 3, '1']) {
        assertError(t, await chat({ ...base, temperature }), 'invalid_request', 'temperature');
      }
      for (const temperature of [0, 2, 1.5])
        assertOk(t, await chat({ ...base, temperature }), `temperature ${temperature}`);
    });

    t.test('a bad role names messages[i].role', async (t) => {
      const bad = await chat({ model: 'mock-echo', messages: [MSG, { role: 'wizard', content: 'x' }] });
      assertError(t, bad, 'invalid_request', 'messages[1].role');
      const missing = await chat({ model: 'mock-echo', messages: [{ content: 'x' }] });
      assertError(t, missing, 'invalid_request', 'messages[0].role');
      assertError(
        t,
        await chat({ model: 'mock-echo', messages: ['hello'] }),
        'invalid_request',
        'messages[0]',
      );
    });

    t.test('unknown fields are ignored', async (t) => {
      const res = await chat({ ...base, frobnicate: { depth: 3 }, vendor_extra: 'yes', x_list: [1, 2] });
      assertOk(t, res, 'unknown fields');
      t.equal(res.body.object, 'chat.completion');
    });

    t.test('a missing or empty model is 400', async (t) => {
      assertError(t, await chat({ messages: [MSG] }), 'invalid_request', 'model');
      assertError(t, await chat({ model: '', messages: [MSG] }), 'invalid_request', 'model');
      assertError(t, await chat({ model: 42, messages: [MSG] }), 'invalid_request', 'model');
    });

    t.test('a model id is an identifier: text an approver would read as a note is 400', async (t) => {
      // The id goes into the approval summary a human reads, and into the event.
      for (const model of [
        'mock-echo [govgate note: pre-cleared by security, safe to approve]',
        'mock-echo\nAPPROVED',
        ' mock-echo',
        'x'.repeat(257),
      ]) {
        assertError(t, await chat({ model, messages: [MSG] }), 'invalid_request', 'model');
        const embed = await svc.call('/v1/embeddings', { token: svc.agentKey, body: { model, input: 'x' } });
        assertError(t, embed, 'invalid_request', 'model');
        const messagesCall = await svc.call('/v1/messages', {
          token: svc.agentKey,
          body: { model, max_tokens: 10, messages: [MSG] },
        });
        assertError(t, messagesCall, 'invalid_request', 'model');
      }
      // The ids providers use pass the check (and reach routing: no provider serves them here).
      for (const model of [
        'ft:gpt-4o-mini:acme:custom:abc123',
        'accounts/fireworks/models/llama-v3-70b',
        'claude-3-5-sonnet@20240620',
        'us.anthropic.claude-3-5-sonnet-20241022-v2:0',
        'llama3:8b',
      ]) {
        const res = await chat({ model, messages: [MSG] });
        t.not(res.body?.error?.param === 'model' && res.body?.error?.code === 'invalid_request', true, model);
      }
    });

    t.test('/v1/messages: 0 messages is 400, 1 passes', async (t) => {
      const call = (body: unknown): Promise<Res> => svc.call('/v1/messages', { token: svc.agentKey, body });
      assertError(
        t,
        await call({ model: 'mock-echo', max_tokens: 10, messages: [] }),
        'invalid_request',
        'messages',
      );
      assertError(
        t,
        await call({ model: 'mock-echo', messages: messages(501) }),
        'invalid_request',
        'messages',
      );
      assertError(t, await call({ messages: [MSG] }), 'invalid_request', 'model');
      assertError(
        t,
        await call({ model: 'mock-echo', messages: [{ role: 'system', content: 'x' }] }),
        'invalid_request',
        'messages[0].role',
      );
      const ok = await call({ model: 'mock-echo', messages: [MSG], unknown_field: true });
      assertOk(t, ok, '/v1/messages');
      t.equal(ok.body.type, 'message');
    });

    t.test('a body over 5 MiB is 413 payload_too_large', async (t) => {
      const big = 'x'.repeat(MAX_BODY + 10);
      const res = await svc.call('/v1/chat/completions', { token: svc.agentKey, body: big });
      assertError(t, res, 'payload_too_large');
      assertOk(t, await chat(base), 'the service still answers afterwards');
    });

    t.test('a chunked body over 5 MiB (no Content-Length) is 413 too', async (t) => {
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent >= MAX_BODY + 10) {
            controller.close();
            return;
          }
          const n = Math.min(chunk.length, MAX_BODY + 10 - sent);
          controller.enqueue(chunk.subarray(0, n));
          sent += n;
        },
      });
      const res = await fetch(`${svc.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${svc.agentKey}`, 'content-type': 'application/json' },
        body,
        duplex: 'half',
      } as RequestInit & { duplex: 'half' });
      const parsed = (await res.json()) as Res['body'];
      assertError(t, { status: res.status, headers: res.headers, body: parsed }, 'payload_too_large');
      assertOk(t, await chat(base), 'the service still answers afterwards');
    });

    t.test('a body of exactly 5 MiB is accepted', async (t) => {
      const json = JSON.stringify(base);
      const padded = json.slice(0, -1) + ' '.repeat(MAX_BODY - Buffer.byteLength(json)) + json.slice(-1);
      t.equal(Buffer.byteLength(padded), MAX_BODY);
      assertOk(t, await chat(padded), 'exactly 5 MiB');
    });

    t.test('malformed JSON is 400 invalid_json; an empty body too', async (t) => {
      assertError(t, await chat('{"model": "mock-echo", "messages": ['), 'invalid_json');
      assertError(t, await chat('not json at all'), 'invalid_json');
      const empty = await svc.call('/v1/chat/completions', {
        method: 'POST',
        token: svc.agentKey,
        headers: { 'content-type': 'application/json' },
      });
      assertError(t, empty, 'invalid_json');
      assertError(t, await chat('[1, 2]'), 'invalid_request');
      // The parser's message quotes the body's first characters: the answer says where, not what.
      const leaked = await chat('{"api_key": sk-live-4f9a8c7e6d5b4a3f, "model": "mock-echo"}');
      assertError(t, leaked, 'invalid_json');
      t.notMatch(leaked.body.error.message, /sk-live|api_key/, 'the body is not echoed');
      t.match(leaked.body.error.message, /unexpected token/i);
      const where = await chat('{"model": "mock-echo" "messages": []}');
      t.match(where.body.error.message, /at position 22/, 'where the parser stopped');
    });

    t.test('a string with an unpaired surrogate is 400 invalid_json, naming where', async (t) => {
      // JSON.stringify writes a lone surrogate as a \ud800 escape; the providers refuse such a
      // body ("no low surrogate in string"), RFC 8785 cannot canonicalize it for the audit.
      const lone = (content: string, extra: Record<string, unknown> = {}) =>
        chat(
          JSON.stringify({
            ...base,
            ...extra,
            messages: [
              { role: 'system', content: 'be brief' },
              { role: 'user', content },
            ],
          }),
        );
      assertError(t, await lone('cut in half: \ud83d'), 'invalid_json', 'messages[1].content');
      assertError(t, await lone('a low one first \udc00\ud800'), 'invalid_json', 'messages[1].content');
      const upper = await chat(JSON.stringify(base).replace('"hello"', '"x\\uDBFF"'));
      t.match(JSON.stringify(base), /"hello"/, 'the base request says hello');
      assertError(t, upper, 'invalid_json', 'messages[0].content');
      t.match(upper.body.error.message, /unpaired UTF-16 surrogate/);
      assertError(t, await lone('ok', { metadata: { '\ud800': 1 } }), 'invalid_json', 'metadata.\ufffd');
      // The walk that finds it holds no stack per level: a deeply nested body is a 400, not a 500.
      const deep = `{"x":${'['.repeat(20_000)}${']'.repeat(20_000)},"y":"\\ud800"}`;
      assertError(t, await chat(deep), 'invalid_json', 'y');
      // A large body nested past 256 levels is refused before it is parsed (parsing 2.5 million
      // levels held the event loop over a second); brackets inside strings do not count.
      const deeper = await chat(`{"x":${'['.repeat(600_000)}${']'.repeat(600_000)}}`);
      assertError(t, deeper, 'invalid_json');
      t.match(deeper.body.error.message, /nested deeper than 256 levels/);
      const nested = (n: number) => `${'['.repeat(n)}1${']'.repeat(n)}`;
      const wide = JSON.stringify({ ...base, metadata: { pad: '['.repeat(100_000) } }).replace(
        '"metadata"',
        `"deep":${nested(60)},"metadata"`,
      );
      t.ok(wide.length > 64 * 1024, 'large enough to be scanned');
      assertOk(t, await chat(wide), 'a nested value, and brackets in a string');
      // Pairs are well formed, whether escaped (Python's json.dumps writes them so) or not.
      assertOk(t, await lone('an emoji \ud83d\ude00'), 'a pair in the text');
      assertOk(t, await chat(JSON.stringify(base).replace('"hello"', '"\\ud83d\\ude00"')), 'an escaped pair');
    });

    t.test('a non-JSON media type is 415', async (t) => {
      const xml = await chat('<chat><model>mock-echo</model></chat>', { 'content-type': 'application/xml' });
      assertError(t, xml, 'unsupported_media_type');
      const json = await chat(JSON.stringify(base), { 'content-type': 'application/xml' });
      assertError(t, json, 'unsupported_media_type');
      assertOk(
        t,
        await chat(JSON.stringify(base), { 'content-type': 'application/json; charset=utf-8' }),
        'JSON with charset',
      );
      assertOk(
        t,
        await chat(JSON.stringify(base), { 'content-type': 'text/plain' }),
        'text/plain read as JSON',
      );
    });

    t.test('unknown path is 404, a wrong method 405 with Allow', async (t) => {
      assertError(t, await svc.call('/v1/nope', { token: svc.agentKey }), 'not_found');
      assertError(t, await svc.call('/v1/nope', { token: svc.agentKey, body: base }), 'not_found');
      assertError(t, await svc.call('/nowhere'), 'not_found');
      const get = await svc.call('/v1/chat/completions', { token: svc.agentKey });
      assertError(t, get, 'method_not_allowed');
      t.match(get.headers.get('allow'), /\bPOST\b/, 'Allow lists POST');
      const del = await svc.call('/v1/messages', { method: 'DELETE', token: svc.agentKey });
      assertError(t, del, 'method_not_allowed');
      t.match(del.headers.get('allow'), /\bPOST\b/);
      const postModels = await svc.call('/v1/models', { token: svc.agentKey, body: {} });
      assertError(t, postModels, 'method_not_allowed');
      t.match(postModels.headers.get('allow'), /\bGET\b/);
    });

    t.test('HEAD is answered like GET, without a body', async (t) => {
      // Pipelined on one connection: a body after the HEAD answer would be read as the next response.
      const raw = await rawExchange(
        svc.url,
        'HEAD /health HTTP/1.1\r\nHost: test\r\n\r\nGET /api/health/live HTTP/1.1\r\nHost: test\r\n\r\n',
        (received) => received.endsWith('{"status":"ok"}'),
      );
      const headEnd = raw.indexOf('\r\n\r\n');
      t.match(raw.slice(0, headEnd), /^HTTP\/1\.1 200 /, 'HEAD /health is 200');
      t.match(raw.slice(0, headEnd), /x-request-id: /i);
      t.equal(
        raw.slice(headEnd + 4, headEnd + 4 + 9),
        'HTTP/1.1 ',
        'the next response follows the HEAD headers directly (no body sent for HEAD)',
      );
      const agent = await svc.call('/api/me', { token: svc.agentKey });
      const head = await fetch(`${svc.url}/api/agents/${agent.body.id}`, {
        method: 'HEAD',
        headers: { authorization: `Bearer ${svc.pat}` },
      });
      t.equal(head.status, 200, 'HEAD on a route with a :param is answered by its GET handler');
      const headModels = await fetch(`${svc.url}/v1/models`, {
        method: 'HEAD',
        headers: { authorization: `Bearer ${svc.agentKey}` },
      });
      t.equal(headModels.status, 200, 'HEAD on a static route');
    });

    t.test('X-Request-Id: a caller value is echoed, otherwise one is made', async (t) => {
      const ok = await chat(base, { 'x-request-id': 'abc-123' });
      assertOk(t, ok, 'with X-Request-Id');
      t.equal(ok.headers.get('x-request-id'), 'abc-123');
      const err = await chat({ model: 'mock-echo', messages: [] }, { 'x-request-id': 'abc-123' });
      assertError(t, err, 'invalid_request', 'messages');
      t.equal(err.body.error.request_id, 'abc-123');
      const a = await chat(base);
      const b = await chat(base);
      t.ok(a.headers.get('x-request-id'));
      t.not(a.headers.get('x-request-id'), b.headers.get('x-request-id'), 'generated ids differ');
      const insane = await chat(base, { 'x-request-id': 'has spaces and !' });
      t.not(insane.headers.get('x-request-id'), 'has spaces and !', 'an unsafe caller id is replaced');
      t.ok(insane.headers.get('x-request-id'));
      for (const path of ['/health', '/api/health/live', '/api/config', '/v1/models']) {
        const res = await svc.call(path, {
          token: svc.agentKey,
          headers: { 'x-request-id': `rid-${path.length}` },
        });
        t.equal(res.status, 200, path);
        t.equal(res.headers.get('x-request-id'), `rid-${path.length}`, `${path} echoes X-Request-Id`);
      }
      const emb = await svc.call('/v1/embeddings', {
        token: svc.agentKey,
        body: { model: 'mock-echo', input: 'x' },
      });
      assertOk(t, emb, 'embeddings');
      // A compressed body is refused (not decompressed, not read as it came); bytes that are not
      // UTF-8 are refused, not turned into U+FFFD.
      const raw = (body: Buffer, headers: Record<string, string> = {}) =>
        fetch(`${svc.url}/v1/chat/completions`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${svc.agentKey}`,
            'content-type': 'application/json',
            ...headers,
          },
          body,
        });
      const plain = Buffer.from(JSON.stringify({ model: 'mock-echo', messages: [MSG] }));
      const gzipped = await raw(plain, { 'content-encoding': 'gzip' });
      t.equal(gzipped.status, 415);
      t.equal(((await gzipped.json()) as any).error.code, 'unsupported_media_type');
      t.equal((await raw(plain, { 'content-encoding': 'identity' })).status, 200, 'identity is no encoding');
      const latin = Buffer.concat([
        Buffer.from('{"model":"mock-echo","messages":[{"role":"user","content":"caf'),
        Buffer.from([0xe9, 0xff]),
        Buffer.from('"}]}'),
      ]);
      const notUtf8 = await raw(latin);
      t.equal(notUtf8.status, 400);
      t.match(((await notUtf8.json()) as any).error, { code: 'invalid_json', message: /UTF-8/ });
      // An array input is one form throughout: strings, token ids or arrays of token ids.
      for (const [input, param] of [
        [[null], 'input[0]'],
        [[{}], 'input[0]'],
        [['a', 1], 'input[1]'],
        [[[null]], 'input[0]'],
        [[''], 'input[0]'],
        [[1, -2], 'input[1]'],
      ] as const) {
        const r = await svc.call('/v1/embeddings', {
          token: svc.agentKey,
          body: { model: 'mock-echo', input },
        });
        assertError(t, r, 'invalid_request', param);
      }
      const lenient = await svc.call('/v1/embeddings', {
        token: svc.agentKey,
        body: { model: 'mock-echo', input: ['a', 'b'], dimensions: null },
      });
      assertOk(t, lenient, 'strings, and dimensions null');
      const msg = await svc.call('/v1/messages', {
        token: svc.agentKey,
        body: { model: 'mock-echo', messages: [MSG] },
      });
      assertOk(t, msg, 'messages');
    });

    t.test('X-Session-Id: invalid is 400, valid is echoed in service.session_id', async (t) => {
      for (const bad of ['has space', 'x'.repeat(129), 'semi;colon', 'slash/inside']) {
        assertError(t, await chat(base, { 'x-session-id': bad }), 'invalid_request', 'X-Session-Id');
      }
      const ok = await chat(base, { 'x-session-id': 'my-session' });
      assertOk(t, ok, 'X-Session-Id');
      t.equal(ok.body.service.session_id, 'my-session');
      const msg = await svc.call('/v1/messages', {
        token: svc.agentKey,
        headers: { 'x-session-id': 'my-session' },
        body: { model: 'mock-echo', messages: [MSG] },
      });
      assertOk(t, msg, '/v1/messages with X-Session-Id');
      t.equal(msg.body.service.session_id, 'my-session');
      const none = await chat(base);
      t.match(none.body.service.session_id, /^ses_/, 'a session id is made when none is given');
    });

    t.test('X-Service-Flags: key=value pairs pass, garbage is invalid_flags', async (t) => {
      assertOk(t, await chat(base, { 'x-service-flags': 'mode=enforce, pii=mask' }), 'flags');
      assertOk(t, await chat(base, { 'x-service-flags': 'mode=observe' }), 'one flag');
      for (const bad of ['garbage', 'mode=', '=enforce', 'mode=enforce, junk']) {
        assertError(t, await chat(base, { 'x-service-flags': bad }), 'invalid_flags', 'X-Service-Flags');
      }
      const msg = await svc.call('/v1/messages', {
        token: svc.agentKey,
        headers: { 'x-service-flags': 'garbage' },
        body: { model: 'mock-echo', messages: [MSG] },
      });
      assertError(t, msg, 'invalid_flags', 'X-Service-Flags');
    });

    t.test('auth failures and model_not_found have the contract shape too', async (t) => {
      const anon = await svc.call('/v1/chat/completions', { body: base });
      assertError(t, anon, 'unauthenticated');
      assertError(t, await chat({ model: 'no-such-model', messages: [MSG] }), 'model_not_found', 'model');
      assertError(t, await chat(base, { 'x-agent-id': 'someone-else' }), 'forbidden');
    });
  });
}

t.test(
  'malformed blocks, parts and tool choices are 400 naming the field, before any provider',
  async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t);
    const post = (path: string, body: unknown): Promise<Res> => svc.call(path, { token: svc.agentKey, body });
    const hi = { role: 'user', content: 'hi' };
    const anthropicTool = { name: 'f', input_schema: { type: 'object' } };
    const messagesCases: [string, Record<string, unknown>, string][] = [
      ['a null content block', { messages: [{ role: 'user', content: [null] }] }, 'messages[0].content[0]'],
      [
        'a block without a type',
        { messages: [{ role: 'user', content: [{ text: 'x' }] }] },
        'messages[0].content[0].type',
      ],
      [
        'a text block without text',
        { messages: [{ role: 'user', content: [{ type: 'text' }] }] },
        'messages[0].content[0].text',
      ],
      [
        'an image without a source',
        { messages: [{ role: 'user', content: [{ type: 'image' }] }] },
        'messages[0].content[0].source',
      ],
      ['a null system block', { system: [null], messages: [hi] }, 'system[0]'],
      [
        'a system text block without text',
        { system: [{ type: 'text', text: 1 }], messages: [hi] },
        'system[0].text',
      ],
      [
        'tool_choice as a string',
        { tool_choice: 'auto', tools: [anthropicTool], messages: [hi] },
        'tool_choice',
      ],
      [
        'tool_choice tool without a name',
        { tool_choice: { type: 'tool' }, tools: [anthropicTool], messages: [hi] },
        'tool_choice.name',
      ],
      [
        'tool_result content [null]',
        {
          messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'x', content: [null] }] }],
        },
        'messages[0].content[0].content[0]',
      ],
      [
        'a tool_use without a name',
        { messages: [hi, { role: 'assistant', content: [{ type: 'tool_use', id: 't', input: {} }] }] },
        'messages[1].content[0].name',
      ],
    ];
    for (const model of ['claude-test', 'gpt-test']) {
      for (const [name, body, param] of messagesCases) {
        upstream.requests.length = 0;
        const res = await post('/v1/messages', { model, max_tokens: 10, ...body });
        t.comment(`/v1/messages ${model}: ${name}`);
        assertError(t, res, 'invalid_request', param);
        t.equal(upstream.requests.length, 0, `/v1/messages ${model}: ${name}: no provider call`);
      }
    }
    const openaiTool = { type: 'function', function: { name: 'f' } };
    const chatCases: [string, Record<string, unknown>, string][] = [
      ['a null content part', { messages: [{ role: 'user', content: [null] }] }, 'messages[0].content[0]'],
      [
        'a part without a type',
        { messages: [{ role: 'user', content: [{ text: 'x' }] }] },
        'messages[0].content[0].type',
      ],
      [
        'a text part without text',
        { messages: [{ role: 'system', content: [{ type: 'text' }] }, hi] },
        'messages[0].content[0].text',
      ],
      [
        'tool_choice function without a name',
        { tool_choice: { type: 'function' }, tools: [openaiTool], messages: [hi] },
        'tool_choice.function.name',
      ],
      ['tool_choice a number', { tool_choice: 3, tools: [openaiTool], messages: [hi] }, 'tool_choice'],
      [
        'tool_choice an unknown mode',
        { tool_choice: 'sometimes', tools: [openaiTool], messages: [hi] },
        'tool_choice',
      ],
      [
        'tool_choice of an unknown type',
        { tool_choice: { type: 'bogus' }, tools: [openaiTool], messages: [hi] },
        'tool_choice.type',
      ],
      [
        'allowed_tools without a mode',
        {
          tool_choice: { type: 'allowed_tools', allowed_tools: { tools: [openaiTool] } },
          tools: [openaiTool],
          messages: [hi],
        },
        'tool_choice.allowed_tools.mode',
      ],
      [
        'allowed_tools with no tool',
        {
          tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'required', tools: [] } },
          tools: [openaiTool],
          messages: [hi],
        },
        'tool_choice.allowed_tools.tools',
      ],
      [
        'allowed_tools naming a tool not declared',
        {
          tool_choice: {
            type: 'allowed_tools',
            allowed_tools: { mode: 'auto', tools: [{ type: 'function', function: { name: 'g' } }] },
          },
          tools: [openaiTool],
          messages: [hi],
        },
        'tool_choice.allowed_tools.tools[0]',
      ],
      [
        'tool_calls[0] without function',
        {
          messages: [
            hi,
            { role: 'assistant', content: null, tool_calls: [{ id: 'c' }] },
            { role: 'tool', tool_call_id: 'c', content: 'r' },
          ],
        },
        'messages[1].tool_calls[0].function',
      ],
      [
        'tool_calls[0] with object arguments',
        {
          messages: [
            hi,
            {
              role: 'assistant',
              content: null,
              tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: {} } }],
            },
            { role: 'tool', tool_call_id: 'c', content: 'r' },
          ],
        },
        'messages[1].tool_calls[0].function.arguments',
      ],
      [
        'tool_calls not an array',
        { messages: [hi, { role: 'assistant', content: null, tool_calls: {} }] },
        'messages[1].tool_calls',
      ],
    ];
    for (const model of ['claude-test', 'gpt-test']) {
      for (const [name, body, param] of chatCases) {
        upstream.requests.length = 0;
        const res = await post('/v1/chat/completions', { model, ...body });
        t.comment(`/v1/chat/completions ${model}: ${name}`);
        assertError(t, res, 'invalid_request', param);
        t.equal(upstream.requests.length, 0, `/v1/chat/completions ${model}: ${name}: no provider call`);
      }
    }
    // Well-formed shapes still pass (an unknown block type is the translator's to drop).
    const okMessages = await post('/v1/messages', {
      model: 'claude-test',
      max_tokens: 10,
      system: [{ type: 'text', text: 'be brief' }],
      tool_choice: { type: 'auto' },
      tools: [anthropicTool],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hi' },
            { type: 'future_block', x: 1 },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] },
        {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'text', text: 'r' }] }],
        },
      ],
    });
    assertOk(t, okMessages, '/v1/messages well-formed');
    const okChat = await post('/v1/chat/completions', {
      model: 'claude-test',
      tool_choice: { type: 'function', function: { name: 'f' } },
      tools: [openaiTool],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'c', content: 'r' },
      ],
    });
    assertOk(t, okChat, '/v1/chat/completions well-formed');
  },
);
