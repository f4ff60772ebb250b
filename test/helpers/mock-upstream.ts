import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: unknown;
  readonly raw: string;
}

export interface MockUpstream {
  readonly url: string;
  readonly hostPort: string;
  readonly requests: RecordedRequest[];
  /** Next requests get this behaviour instead of a normal answer. */
  behaviour:
    | { kind: 'normal' }
    | { kind: 'status'; status: number; body?: unknown }
    | { kind: 'hang' }
    | { kind: 'delay'; ms: number }
    /** Answers normally once `open` resolves (a test decides when, instead of sleeping). */
    | { kind: 'gate'; open: Promise<void> }
    /**
     * An OpenAI stream answered normally, except that it begins once `start` resolves (at once
     * without it) and its second half (its last `tail` writes, when set: 2 holds back the usage
     * chunk and [DONE]) waits for `resume`.
     */
    | { kind: 'paused-stream'; start?: Promise<void>; resume: Promise<void>; tail?: number }
    /**
     * SSE headers and one chunk (`partial `), then nothing (the stream never ends). On
     * /v1/messages: message_start (its placeholder usage) and a text block's first delta.
     */
    | { kind: 'stall-stream' }
    /**
     * An OpenAI stream answered normally but sent as a UTF-8 BOM and then the body, in writes 2 ms
     * apart (so they arrive as separate reads) of at most `bytes` bytes, with every byte of a
     * multi-byte character in a write of its own (so every such character is split).
     */
    | { kind: 'byte-stream'; bytes: number }
    /**
     * SSE headers and one chunk (`partial `), then `bytes` bytes of `a` in 64 KiB writes as fast
     * as the reader takes them: as one line that never ends, or (`comments`) as comment lines.
     * `afterDone`: a whole answer and `[DONE]` first, then the comment lines.
     */
    | { kind: 'flood-stream'; bytes: number; comments?: boolean; afterDone?: boolean }
    /**
     * An OpenAI stream of `chunks` content deltas of `chars` characters each (`bigStreamText`),
     * then a finish, usage and [DONE]: written as fast as the connection takes them (a write that
     * node says to wait after waits for 'drain'). `progress.bytes` counts the bytes written so far,
     * `progress.done` turns true once the whole stream was written.
     */
    | {
        kind: 'big-stream';
        chunks: number;
        chars: number;
        progress: { bytes: number; done: boolean };
      }
    /** This answer exactly as given (status 200 unless set), whatever was asked. */
    | { kind: 'raw'; contentType: string; body: string; status?: number };
  /** Requests whose client closed the connection before an answer. */
  readonly aborted: string[];
  /** When set, the assistant text of every answer (instead of echoing the prompt). */
  reply: string | undefined;
  /**
   * The input of the custom tool call an OpenAI answer makes when the request's first tool is a
   * custom (freeform) tool (streamed in 5-character pieces); `ls -la` when unset.
   */
  customInput: string | undefined;
  /**
   * When set, every /v1/messages answer is this Anthropic message (streamed as its events when
   * asked: text in 6-character deltas, tool input in two JSON pieces, thinking and its signature).
   */
  anthropicMessage: Record<string, unknown> | undefined;
  close(): Promise<void>;
}

function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: string; content?: unknown };
    if (m.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (Array.isArray(m.content)) {
      return m.content.map((p: { text?: string }) => p.text ?? '').join('');
    }
  }
  return '';
}

type ToolParam = { type?: string; function?: { name: string }; custom?: { name: string } };

function openaiAnswer(
  body: Record<string, unknown>,
  reply?: string,
  customInput = 'ls -la',
): Record<string, unknown> {
  const tools = body.tools as ToolParam[] | undefined;
  const message: Record<string, unknown> = {
    role: 'assistant',
    content: reply ?? `upstream-openai: ${lastUserText(body.messages)}`,
  };
  let finish = 'stop';
  const first = tools?.[0];
  if (first && body.tool_choice !== 'none') {
    message.content = null;
    message.tool_calls = [
      first.type === 'custom'
        ? { id: 'call_up_1', type: 'custom', custom: { name: first.custom?.name, input: customInput } }
        : {
            id: 'call_up_1',
            type: 'function',
            function: { name: first.function?.name, arguments: '{"city":"Paris"}' },
          },
    ];
    finish = 'tool_calls';
  }
  return {
    id: 'chatcmpl-up-1',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: body.model,
    choices: [{ index: 0, message, finish_reason: finish }],
    usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
  };
}

/** `openaiStream`'s events, as written one by one. */
function openaiStreamEvents(body: Record<string, unknown>, reply: string | undefined): string[] {
  const parts: string[] = [];
  const collector = {
    writeHead: () => collector,
    write: (s: string) => parts.push(s) > 0,
    end: (s?: string) => {
      if (s !== undefined) parts.push(s);
    },
  };
  openaiStream(collector as unknown as ServerResponse, body, reply);
  return parts;
}

/** The content of delta `i` of a `big-stream`: its number in brackets, then `x`s, `chars` in all. */
export function bigStreamText(i: number, chars: number): string {
  const head = `<${i}>`;
  return head + 'x'.repeat(chars - head.length);
}

/** Resolves when `res` can take more, or is gone. */
function writable(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

async function bigStream(
  res: ServerResponse,
  body: Record<string, unknown>,
  chunks: number,
  chars: number,
  progress: { bytes: number; done: boolean },
): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const event = (delta: Record<string, unknown>, finish: string | null, usage?: unknown): string =>
    `data: ${JSON.stringify({
      id: 'chatcmpl-big',
      object: 'chat.completion.chunk',
      created: 1,
      model: body.model,
      choices: [{ index: 0, delta, finish_reason: finish }],
      ...(usage ? { usage } : {}),
    })}\n\n`;
  for (let i = 0; i < chunks; i++) {
    if (res.destroyed) return;
    const line = event(
      i === 0
        ? { role: 'assistant', content: bigStreamText(i, chars) }
        : { content: bigStreamText(i, chars) },
      null,
    );
    progress.bytes += line.length;
    if (!res.write(line)) await writable(res);
  }
  if (res.destroyed) return;
  const usage = { prompt_tokens: 11, completion_tokens: chunks, total_tokens: 11 + chunks };
  res.end(`${event({}, 'stop', usage)}data: [DONE]\n\n`);
  progress.done = true;
}

/** `openaiStream`'s first half of events, then the rest once `resume` resolves. */
function pausedStream(
  res: ServerResponse,
  body: Record<string, unknown>,
  reply: string | undefined,
  resume: Promise<void>,
  tail?: number,
) {
  const events = openaiStreamEvents(body, reply);
  const half = tail === undefined ? Math.ceil(events.length / 2) : events.length - tail;
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(events.slice(0, half).join(''));
  void resume.then(() => {
    if (!res.destroyed) res.end(events.slice(half).join(''));
  });
}

/** `openaiStream`'s bytes after a BOM, cut as the `byte-stream` behaviour says. */
function byteStream(
  res: ServerResponse,
  body: Record<string, unknown>,
  reply: string | undefined,
  size: number,
) {
  const bytes = Buffer.from(`\uFEFF${openaiStreamEvents(body, reply).join('')}`, 'utf8');
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let at = 0;
  const next = (): void => {
    if (res.destroyed) return;
    if (at >= bytes.length) {
      res.end();
      return;
    }
    let end = at + 1;
    if ((bytes[at] as number) < 0x80)
      while (end < bytes.length && end - at < size && (bytes[end] as number) < 0x80) end++;
    res.write(bytes.subarray(at, end));
    at = end;
    setTimeout(next, 2);
  };
  next();
}

function openaiStream(
  res: ServerResponse,
  body: Record<string, unknown>,
  reply?: string,
  customInput?: string,
): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const answer = openaiAnswer(body, reply, customInput);
  const choice = (
    answer.choices as {
      message: { content: string | null; tool_calls?: { custom?: { name: string; input: string } }[] };
      finish_reason: string;
    }[]
  )[0];
  const base = {
    id: 'chatcmpl-up-s',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: body.model,
  };
  const send = (o: unknown): boolean => res.write(`data: ${JSON.stringify(o)}\n\n`);
  send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
  if (choice?.message.content) {
    for (const piece of choice.message.content.match(/.{1,5}/gs) ?? [])
      send({ ...base, choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] });
  }
  const custom = choice?.message.tool_calls?.[0]?.custom;
  if (custom) {
    // The shape OpenAI streams custom tool calls in (its SDK's chunk types do not model it yet):
    // the first delta names the call, the next ones carry pieces of its input.
    const delta = (call: Record<string, unknown>): boolean =>
      send({ ...base, choices: [{ index: 0, delta: { tool_calls: [call] }, finish_reason: null }] });
    delta({ index: 0, id: 'call_up_1', type: 'custom', custom: { name: custom.name, input: '' } });
    for (const piece of custom.input.match(/.{1,5}/gs) ?? []) delta({ index: 0, custom: { input: piece } });
  } else if (choice?.message.tool_calls) {
    send({
      ...base,
      choices: [
        {
          index: 0,
          delta: {
            tool_calls: [
              {
                index: 0,
                id: 'call_up_1',
                type: 'function',
                function: {
                  name: (body.tools as ToolParam[])[0]?.function?.name,
                  arguments: '',
                },
              },
            ],
          },
          finish_reason: null,
        },
      ],
    });
    send({
      ...base,
      choices: [
        {
          index: 0,
          delta: { tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] },
          finish_reason: null,
        },
      ],
    });
    send({
      ...base,
      choices: [
        {
          index: 0,
          delta: { tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] },
          finish_reason: null,
        },
      ],
    });
  }
  send({ ...base, choices: [{ index: 0, delta: {}, finish_reason: choice?.finish_reason }] });
  if ((body.stream_options as { include_usage?: boolean } | undefined)?.include_usage) {
    send({ ...base, choices: [], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } });
  }
  res.end('data: [DONE]\n\n');
}

function anthropicAnswer(body: Record<string, unknown>, reply?: string): Record<string, unknown> {
  const tools = body.tools as { name: string }[] | undefined;
  const system = typeof body.system === 'string' ? body.system : Array.isArray(body.system) ? 'blocks' : '';
  const content: unknown[] = [
    {
      type: 'text',
      text:
        reply ?? `upstream-anthropic${system ? ` [system:${system}]` : ''}: ${lastUserText(body.messages)}`,
    },
  ];
  let stop = 'end_turn';
  if (tools && tools.length > 0 && (body.tool_choice as { type?: string } | undefined)?.type !== 'none') {
    content.push({ type: 'tool_use', id: 'toolu_up_1', name: tools[0]?.name, input: { city: 'Paris' } });
    stop = 'tool_use';
  }
  return {
    id: 'msg_up_1',
    type: 'message',
    role: 'assistant',
    model: body.model,
    content,
    stop_reason: stop,
    stop_sequence: null,
    usage: { input_tokens: 13, output_tokens: 9 },
  };
}

function anthropicStream(res: ServerResponse, body: Record<string, unknown>, reply?: string): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const answer = anthropicAnswer(body, reply) as {
    content: { type: string; text?: string; id?: string; name?: string }[];
    stop_reason: string;
  };
  const ev = anthropicEvents(res);
  ev('message_start', { message: messageStart('msg_up_s', body.model) });
  answer.content.forEach((block, index) => {
    if (block.type === 'text') {
      ev('content_block_start', { index, content_block: { type: 'text', text: '' } });
      for (const piece of (block.text ?? '').match(/.{1,6}/gs) ?? [])
        ev('content_block_delta', { index, delta: { type: 'text_delta', text: piece } });
    } else {
      ev('content_block_start', {
        index,
        content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
      });
      ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '{"city":' } });
      ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '"Paris"}' } });
    }
    ev('content_block_stop', { index });
  });
  ev('message_delta', {
    delta: { stop_reason: answer.stop_reason, stop_sequence: null },
    usage: { output_tokens: 9 },
  });
  ev('message_stop', {});
  res.end();
}

/** `message` as the events of an Anthropic stream. */
function streamMessage(res: ServerResponse, message: Record<string, unknown>): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const ev = (type: string, data: Record<string, unknown>): boolean =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  const usage = message.usage as Record<string, number>;
  ev('message_start', {
    message: {
      ...message,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { ...usage, output_tokens: 1 },
    },
  });
  ev('ping', {});
  (message.content as Record<string, unknown>[]).forEach((block, index) => {
    const delta = (d: Record<string, unknown>): boolean => ev('content_block_delta', { index, delta: d });
    if (block.type === 'text') {
      ev('content_block_start', { index, content_block: { type: 'text', text: '' } });
      for (const piece of (block.text as string).match(/.{1,6}/gs) ?? [])
        delta({ type: 'text_delta', text: piece });
    } else if (block.type === 'tool_use') {
      ev('content_block_start', { index, content_block: { ...block, input: {} } });
      const json = JSON.stringify(block.input);
      const half = Math.floor(json.length / 2);
      delta({ type: 'input_json_delta', partial_json: json.slice(0, half) });
      delta({ type: 'input_json_delta', partial_json: json.slice(half) });
    } else if (block.type === 'thinking') {
      ev('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } });
      for (const piece of (block.thinking as string).match(/.{1,10}/gs) ?? [])
        delta({ type: 'thinking_delta', thinking: piece });
      delta({ type: 'signature_delta', signature: block.signature });
    } else {
      ev('content_block_start', { index, content_block: block });
    }
    ev('content_block_stop', { index });
  });
  ev('message_delta', {
    delta: { stop_reason: message.stop_reason, stop_sequence: message.stop_sequence ?? null },
    usage: { output_tokens: usage.output_tokens },
  });
  ev('message_stop', {});
  res.end();
}

/** A recording upstream that speaks both the OpenAI (/v1/…) and Anthropic (/v1/messages) APIs. */
/** Writes one Anthropic SSE event (`type` is also the data's `type`). */
function anthropicEvents(res: ServerResponse): (type: string, data: Record<string, unknown>) => boolean {
  return (type, data) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
}

/** The message of an Anthropic stream's message_start: its usage's output_tokens is a placeholder. */
function messageStart(id: string, model: unknown): Record<string, unknown> {
  return {
    id,
    type: 'message',
    role: 'assistant',
    model,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 13, output_tokens: 1 },
  };
}

export async function startMockUpstream(): Promise<MockUpstream> {
  const requests: RecordedRequest[] = [];
  const aborted: string[] = [];
  const state: MockUpstream = {
    url: '',
    hostPort: '',
    requests,
    aborted,
    behaviour: { kind: 'normal' },
    reply: undefined,
    customInput: undefined,
    anthropicMessage: undefined,
    close: async () => {},
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: Record<string, unknown> = {};
      try {
        body = raw ? (JSON.parse(raw) as Record<string, unknown>) : {};
      } catch {
        /* recorded raw */
      }
      const path = req.url ?? '/';
      requests.push({ method: req.method ?? 'GET', path, headers: req.headers, body, raw });
      res.on('close', () => {
        if (!res.writableFinished) aborted.push(path);
      });
      const b = state.behaviour;
      if (b.kind === 'hang') return;
      if (b.kind === 'stall-stream' && path === '/v1/messages') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const ev = anthropicEvents(res);
        ev('message_start', { message: messageStart('msg_stall', body.model) });
        ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'partial ' } });
        return;
      }
      if (b.kind === 'flood-stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const first = {
          id: 'chatcmpl-flood',
          object: 'chat.completion.chunk',
          created: 1,
          model: body.model,
          choices: [{ index: 0, delta: { role: 'assistant', content: 'partial ' }, finish_reason: null }],
        };
        const last = { ...first, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] };
        res.write(
          `data: ${JSON.stringify(first)}\n\n` +
            (b.afterDone ? `data: ${JSON.stringify(last)}\n\ndata: [DONE]\n\n` : b.comments ? '' : 'data: '),
        );
        const piece = b.comments ? `: ${'a'.repeat(64 * 1024 - 3)}\n` : 'a'.repeat(64 * 1024);
        let left = b.bytes;
        const more = (): void => {
          while (left > 0 && !res.destroyed) {
            left -= piece.length;
            if (!res.write(piece)) {
              res.once('drain', more);
              return;
            }
          }
          res.end();
        };
        res.on('close', () => res.removeAllListeners('drain'));
        more();
        return;
      }
      if (b.kind === 'stall-stream') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const chunk = {
          id: 'chatcmpl-stall',
          object: 'chat.completion.chunk',
          created: 1,
          model: body.model,
          choices: [{ index: 0, delta: { role: 'assistant', content: 'partial ' }, finish_reason: null }],
        };
        res.write(`data: ${JSON.stringify(chunk)}\n\n`);
        return;
      }
      if (b.kind === 'raw') {
        res.writeHead(b.status ?? 200, { 'content-type': b.contentType });
        res.end(b.body);
        return;
      }
      if (b.kind === 'status') {
        res.writeHead(b.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(b.body ?? { error: { message: `mock failure ${b.status}` } }));
        return;
      }
      const answer = (): void => {
        if (path === '/v1/chat/completions' && body.stream && b.kind === 'byte-stream') {
          byteStream(res, body, state.reply, b.bytes);
          return;
        }
        if (path === '/v1/chat/completions' && body.stream && b.kind === 'big-stream') {
          void bigStream(res, body, b.chunks, b.chars, b.progress);
          return;
        }
        if (path === '/v1/chat/completions' && body.stream && b.kind === 'paused-stream') {
          const begin = (): void => pausedStream(res, body, state.reply, b.resume, b.tail);
          if (b.start) void b.start.then(begin);
          else begin();
          return;
        }
        if (path === '/v1/chat/completions') {
          if (body.stream) openaiStream(res, body, state.reply, state.customInput);
          else json(res, openaiAnswer(body, state.reply, state.customInput));
        } else if (path === '/v1/messages' && state.anthropicMessage) {
          if (body.stream) streamMessage(res, state.anthropicMessage);
          else json(res, state.anthropicMessage);
        } else if (path === '/v1/messages') {
          if (body.stream) anthropicStream(res, body, state.reply);
          else json(res, anthropicAnswer(body, state.reply));
        } else if (path === '/v1/embeddings') {
          const inputs = Array.isArray(body.input) ? body.input : [body.input];
          // As OpenAI: floats, or their float32 little-endian bytes in base64 when asked.
          const embedding =
            body.encoding_format === 'base64'
              ? Buffer.from(new Float32Array([0.1, 0.2, 0.3]).buffer).toString('base64')
              : [0.1, 0.2, 0.3];
          json(res, {
            object: 'list',
            data: inputs.map((_, index) => ({ object: 'embedding', index, embedding })),
            model: body.model,
            usage: { prompt_tokens: 3, total_tokens: 3 },
          });
        } else if (path === '/v1/models') {
          const anthropic = req.headers['anthropic-version'] !== undefined;
          json(res, {
            object: 'list',
            data: (anthropic ? ['claude-test-1', 'claude-test-2'] : ['gpt-test', 'o9-test', 'dall-e-x']).map(
              (id) => ({ id, object: 'model' }),
            ),
          });
        } else {
          res.writeHead(404);
          res.end();
        }
      };
      if (b.kind === 'delay') setTimeout(answer, b.ms);
      else if (b.kind === 'gate') void b.open.then(answer);
      else answer();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  Object.assign(state, {
    url: `http://127.0.0.1:${port}`,
    hostPort: `127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  });
  return state;
}

function json(res: ServerResponse, body: unknown): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/**
 * An Anthropic Messages stream (SSE text) of one text block sent as `texts`, one delta each: what
 * a test's own provider answers with.
 */
export function anthropicTextSse(id: string, texts: readonly string[]): string {
  return [
    {
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model: 'claude-test-1',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 1, output_tokens: 0 },
      },
    },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    ...texts.map((text) => ({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } })),
    { type: 'content_block_stop', index: 0 },
    {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { output_tokens: 5 },
    },
    { type: 'message_stop' },
  ]
    .map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`)
    .join('');
}
