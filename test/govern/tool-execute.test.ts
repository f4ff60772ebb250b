import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { ENGINES, type Engine, startService, type TestService } from '../helpers/service.js';

/**
 * `/v1/tools/execute` records what happened to the tool call, as the tool saw it: a call the
 * agent walks away from runs to its end (a tool acts on arrival), and a failed call says whether
 * its request reached the tool (test-plan: review findings F2 and F9).
 */

interface ToolCall {
  readonly method: string;
  readonly url: string;
  readonly body: string;
}

interface ToolServer {
  readonly calls: ToolCall[];
  /** Answers the tool wrote to the end (not cut off by govgate going away). */
  readonly answered: number[];
  readonly url: string;
  readonly hostPort: string;
  close(): Promise<void>;
}

/**
 * A recording HTTP tool on 127.0.0.1:0. It has acted once it has read the request; `answer`
 * then decides: a delay and a status, or `drop` (the connection is destroyed, no answer).
 */
async function startTool(answer: { delayMs?: number; status?: number; drop?: boolean }): Promise<ToolServer> {
  const calls: ToolCall[] = [];
  const answered: number[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => {
      calls.push({ method: req.method ?? '', url: req.url ?? '', body });
      if (answer.drop) {
        req.socket.destroy();
        return;
      }
      const status = answer.status ?? 200;
      setTimeout(() => {
        if (res.destroyed) return;
        res.on('finish', () => answered.push(status));
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ done: true, got: body }));
      }, answer.delayMs ?? 0);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    calls,
    answered,
    url: `http://127.0.0.1:${port}/run`,
    hostPort: `127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The org's tool.execution events, newest first. */
async function executions(svc: TestService): Promise<any[]> {
  const res = await svc.call('/api/audit?event_type=tool.execution&limit=100', { token: svc.pat });
  if (res.status !== 200) throw new Error(JSON.stringify(res.body));
  return res.body.data;
}

async function waitFor<T>(fn: () => Promise<T | undefined>, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('timed out waiting');
    await sleep(20);
  }
}

/** Configures `tools` for org default. */
async function setUp(
  svc: TestService,
  tools: { name: string; url: string; method?: string; timeout_ms?: number }[],
): Promise<void> {
  const res = await svc.call('/api/settings/tools', { method: 'PUT', token: svc.pat, body: { tools } });
  if (res.status !== 200) throw new Error(JSON.stringify(res.body));
}

/** Governs a call of `name` with `args` (the default policy allows it); its mandate. */
async function mandateFor(svc: TestService, name: string, args: Record<string, unknown>): Promise<string> {
  const g = await svc.call('/v1/tools/govern', { token: svc.agentKey, body: { name, arguments: args } });
  if (g.body.outcome !== 'allow') throw new Error(JSON.stringify(g.body));
  return g.body.mandate as string;
}

async function serviceFor(
  t: { teardown(fn: () => Promise<void>): void },
  tool: ToolServer,
  engine: Engine = 'uws',
  alsoAllow: string[] = [],
): Promise<TestService> {
  const svc = await startService({
    engine,
    env: { SERVICE_EGRESS_ALLOW: [tool.hostPort, ...alsoAllow].join(',') },
  });
  t.teardown(async () => {
    await svc.close();
    await tool.close();
  });
  return svc;
}

/** Sends the call and hangs up once the tool has it (after `afterMs`): the agent walks away. */
async function leaveOnceSent(
  svc: TestService,
  tool: ToolServer,
  body: Record<string, unknown>,
  afterMs = 0,
): Promise<string | Response> {
  const ac = new AbortController();
  const sent = fetch(`${svc.url}/v1/tools/execute`, {
    method: 'POST',
    signal: ac.signal,
    headers: { authorization: `Bearer ${svc.agentKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  }).catch((err: Error) => err.name);
  await waitFor(async () => (tool.calls.length > 0 ? true : undefined));
  if (afterMs > 0) await sleep(afterMs);
  ac.abort();
  return sent;
}

/** The same service started again on `svc`'s data, after `svc.close(true)`; closed after `t`. */
async function restarted(
  t: { teardown(fn: () => Promise<void>): void },
  svc: TestService,
  tool: ToolServer,
  env: Record<string, string>,
): Promise<TestService> {
  const again = await startService({
    dataDir: svc.dataDir,
    env: { ...env, SERVICE_BOOTSTRAP_TOKEN: svc.pat },
  });
  t.teardown(async () => {
    await again.close();
    await tool.close();
  });
  return again;
}

for (const engine of ENGINES) {
  t.test(
    `${engine}: an agent that disconnects does not cancel the tool call; its answer is recorded`,
    async (t) => {
      const tool = await startTool({ delayMs: 600, status: 201 });
      const svc = await serviceFor(t, tool, engine);
      await setUp(svc, [{ name: 'payments.transfer', url: tool.url }]);
      const args = { amount: 250, to: 'acct-42' };
      const mandate = await mandateFor(svc, 'payments.transfer', args);
      const left = leaveOnceSent(svc, tool, { mandate, name: 'payments.transfer', arguments: args }, 100);
      t.equal(await left, 'AbortError');
      const event = await waitFor(async () => (await executions(svc))[0]);
      t.equal(tool.calls.length, 1, 'the tool got the call once');
      t.same(tool.answered, [201], 'the tool answered to the end: govgate did not cut it off');
      t.equal(event.outcome, 'ok', JSON.stringify(event));
      t.equal(event.reason, null);
      t.equal(event.details.status, 201, "the tool's answer is recorded");
      t.equal(event.details.client_disconnected, true);
      t.equal(event.details.request_sent, true);
      t.ok(event.details.duration_ms >= 500, `duration_ms ${event.details.duration_ms}`);
      // At most once: the mandate was used by the call the agent left.
      const again = await svc.call('/v1/tools/execute', {
        token: svc.agentKey,
        body: { mandate, name: 'payments.transfer', arguments: args },
      });
      t.equal(again.status, 403);
      t.equal(again.body.error.code, 'mandate_invalid');
      t.equal(tool.calls.length, 1);
    },
  );
}

t.test('a tool call its agent left is recorded even when govgate shuts down meanwhile', async (t) => {
  const tool = await startTool({ delayMs: 800, status: 201 });
  const env = { SERVICE_EGRESS_ALLOW: tool.hostPort };
  const svc = await startService({ env });
  await setUp(svc, [{ name: 'payments.transfer', url: tool.url }]);
  const args = { amount: 90, to: 'acct-7' };
  const mandate = await mandateFor(svc, 'payments.transfer', args);
  t.equal(
    await leaveOnceSent(svc, tool, { mandate, name: 'payments.transfer', arguments: args }),
    'AbortError',
  );
  // The drain (2 s of grace) begins while the tool is still working on the call.
  await svc.close(true);
  t.same(tool.answered, [201], 'the tool answered to the end');
  const again = await restarted(t, svc, tool, env);
  const [event] = await executions(again);
  t.equal(event?.outcome, 'ok', 'the execution was committed before the store closed');
  t.equal(event?.details.status, 201);
  t.equal(event?.details.client_disconnected, true);
});

t.test(
  'a tool call is in the trail before it is sent: one that outlives the shutdown still shows',
  async (t) => {
    // The test service drains for 2 s; this tool answers after 4.
    const tool = await startTool({ delayMs: 4000, status: 201 });
    const env = { SERVICE_EGRESS_ALLOW: tool.hostPort };
    const svc = await startService({ env });
    await setUp(svc, [{ name: 'payments.transfer', url: tool.url }]);
    const args = { amount: 30, to: 'acct-9' };
    const g = await svc.call('/v1/tools/govern', {
      token: svc.agentKey,
      body: { name: 'payments.transfer', arguments: args },
    });
    const body = { mandate: g.body.mandate, name: 'payments.transfer', arguments: args };
    t.equal(await leaveOnceSent(svc, tool, body), 'AbortError');
    await svc.close(true);
    const again = await restarted(t, svc, tool, env);
    const view = await again.call(`/api/audit/pipeline/${g.body.pipeline_id}`, { token: again.pat });
    const started = (view.body.data as any[]).find((e) => e.event_type === 'tool.execution_started');
    t.ok(started, JSON.stringify(view.body.data.map((e: any) => e.event_type)));
    t.equal(started?.details.tool, 'payments.transfer');
    const claims = JSON.parse(
      Buffer.from(String(g.body.mandate).split('.')[1] as string, 'base64url').toString(),
    );
    t.equal(started?.details.mandate_jti, claims.jti);
    t.equal(started?.details.method, 'POST');
  },
);

t.test('a call that stays connected records client_disconnected false', async (t) => {
  const tool = await startTool({ status: 200 });
  const svc = await serviceFor(t, tool);
  await setUp(svc, [{ name: 'lookup', url: tool.url }]);
  const mandate = await mandateFor(svc, 'lookup', { q: 'x' });
  const res = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate, name: 'lookup', arguments: { q: 'x' } },
  });
  t.equal(res.status, 200);
  t.equal(res.body.status, 200);
  const [event] = await executions(svc);
  t.equal(event.id, res.body.event_id);
  t.equal(event.outcome, 'ok');
  t.equal(event.details.client_disconnected, false);
  t.equal(event.details.request_sent, true);
});

t.test('a tool that does not answer in time: 504, and the event says the request was sent', async (t) => {
  const tool = await startTool({ delayMs: 1500 });
  const svc = await serviceFor(t, tool);
  await setUp(svc, [{ name: 'slow.tool', url: tool.url, timeout_ms: 200 }]);
  const args = { n: 1 };
  const mandate = await mandateFor(svc, 'slow.tool', args);
  const res = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate, name: 'slow.tool', arguments: args },
  });
  t.equal(res.status, 504, JSON.stringify(res.body));
  t.equal(res.body.error.code, 'upstream_timeout');
  t.equal(tool.calls.length, 1, 'the tool got the request');
  const [event] = await executions(svc);
  t.equal(event.outcome, 'error');
  t.equal(event.details.request_sent, true);
  t.equal(event.details.client_disconnected, false);
  t.ok(event.details.duration_ms >= 150, `duration_ms ${event.details.duration_ms}`);
  t.match(event.reason, /slow\.tool did not answer within 200 ms \(the request was sent\)/);
  t.notMatch(event.reason, /unreachable/);
  t.match(res.body.error.message, /the request was sent/);
  const again = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate, name: 'slow.tool', arguments: args },
  });
  t.equal(again.status, 403, 'the mandate was used: at most once');
});

t.test('a tool that drops the connection after reading the request: not "unreachable"', async (t) => {
  const tool = await startTool({ drop: true });
  const svc = await serviceFor(t, tool);
  await setUp(svc, [{ name: 'flaky', url: tool.url }]);
  const mandate = await mandateFor(svc, 'flaky', {});
  const res = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate, name: 'flaky', arguments: {} },
  });
  t.equal(res.status, 502, JSON.stringify(res.body));
  t.equal(res.body.error.code, 'upstream_error');
  t.equal(tool.calls.length, 1);
  const [event] = await executions(svc);
  t.equal(event.outcome, 'error');
  t.equal(event.details.request_sent, true);
  t.equal(event.reason, 'tool flaky did not answer (the request was sent)');
});

t.test('a tool nobody listens on: unreachable, and the request was not sent', async (t) => {
  const tool = await startTool({});
  const gone = await startTool({});
  await gone.close();
  const svc = await serviceFor(t, tool, 'uws', [gone.hostPort]);
  await setUp(svc, [{ name: 'nowhere', url: gone.url }]);
  const mandate = await mandateFor(svc, 'nowhere', {});
  const res = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate, name: 'nowhere', arguments: {} },
  });
  t.equal(res.status, 502, JSON.stringify(res.body));
  const [event] = await executions(svc);
  t.equal(event.outcome, 'error');
  t.equal(event.details.request_sent, false);
  t.equal(event.reason, 'tool nowhere is unreachable');
});

t.test('the event records the method, and that a GET tool got no body', async (t) => {
  const tool = await startTool({});
  const svc = await serviceFor(t, tool);
  await setUp(svc, [
    { name: 'refund', url: tool.url, method: 'GET' },
    { name: 'refund.post', url: tool.url },
  ]);
  const args = { account: 'acct-9', amount: 70 };
  const viaGet = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate: await mandateFor(svc, 'refund', args), name: 'refund', arguments: args },
  });
  t.equal(viaGet.status, 200);
  t.same(tool.calls[0], { method: 'GET', url: '/run', body: '' }, 'GET sends no arguments');
  const viaPost = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate: await mandateFor(svc, 'refund.post', args), name: 'refund.post', arguments: args },
  });
  t.equal(viaPost.status, 200);
  t.same(JSON.parse(tool.calls[1]?.body ?? ''), args);
  const events = await executions(svc);
  const get = events.find((e) => e.id === viaGet.body.event_id);
  const post = events.find((e) => e.id === viaPost.body.event_id);
  t.equal(get.details.method, 'GET');
  t.equal(get.details.body_sent, false, 'the args were governed but not sent');
  t.ok(get.personal?.args, 'the args the mandate covered stay in the record');
  t.equal(post.details.method, 'POST');
  t.equal(post.details.body_sent, true);
});

t.test('a tool answer is read up to 1 MiB and no further', async (t) => {
  // 64 MiB in 64 KiB writes, each after the last drained: the tool finishes only if all is read.
  let finished = false;
  let closedEarly = false;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      let left = 1024;
      const pump = (): void => {
        while (left > 0) {
          left--;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      res.on('finish', () => {
        finished = true;
      });
      res.on('close', () => {
        if (!finished) closedEarly = true;
      });
      pump();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const svc = await startService({ env: { SERVICE_EGRESS_ALLOW: `127.0.0.1:${port}` } });
  t.teardown(async () => {
    await svc.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  await setUp(svc, [{ name: 'export', url: `http://127.0.0.1:${port}/run` }]);
  const res = await svc.call('/v1/tools/execute', {
    token: svc.agentKey,
    body: { mandate: await mandateFor(svc, 'export', {}), name: 'export', arguments: {} },
  });
  t.equal(res.status, 200);
  t.equal(res.body.status, 200);
  t.equal(String(res.body.body).length, 1024 * 1024, 'the first 1 MiB is returned');
  await waitFor(async () => (closedEarly || finished ? true : undefined));
  t.ok(closedEarly, 'govgate stopped reading and closed the connection');
  t.notOk(finished, 'the rest of the 64 MiB was never read');
});

t.test('a tool call governed without arguments runs without them, whichever route governed it', async (t) => {
  const tool = await startTool({});
  const svc = await serviceFor(t, tool);
  await setUp(svc, [{ name: 'ping', url: tool.url }]);
  const governed = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'ping' } },
  });
  t.equal(governed.body.outcome, 'allow');
  for (const args of [undefined, null, {}]) {
    const mandate =
      args === undefined
        ? (governed.body.mandate as string)
        : (
            await svc.call('/v1/govern', {
              token: svc.agentKey,
              body: { type: 'TOOL_CALL', payload: { tool: 'ping' } },
            })
          ).body.mandate;
    const run = await svc.call('/v1/tools/execute', {
      token: svc.agentKey,
      body: { mandate, name: 'ping', ...(args === undefined ? {} : { arguments: args }) },
    });
    t.equal(run.status, 200, `arguments ${JSON.stringify(args)}`);
  }
  t.equal(tool.calls.length, 3);
  t.same(JSON.parse(tool.calls[0]?.body ?? ''), {}, 'sent as {}');
  // The same action governed through /v1/tools/govern has the same fingerprint.
  const viaTools = await svc.call('/v1/tools/govern', { token: svc.agentKey, body: { name: 'ping' } });
  t.equal(viaTools.body.outcome, 'allow');
  const events = await svc.call('/api/audit?event_type=govern.decision&limit=10', { token: svc.pat });
  const prints = new Set(events.body.data.map((e: any) => e.details.fingerprint));
  t.equal(prints.size, 1, 'one fingerprint for the action, by either route');
});

t.test('/v1/govern/approve reads a TOOL_CALL as /v1/govern does', async (t) => {
  const tool = await startTool({});
  const svc = await serviceFor(t, tool);
  const approve = (body: Record<string, unknown>) =>
    svc.call('/v1/govern/approve', { token: svc.pat, body: { agent_id: 'default-agent', ...body } });
  const noTool = await approve({});
  t.same([noTool.status, noTool.body.error.param], [400, 'tool']);
  const twoTools = await approve({ tool: 'a.a', payload: { tool: 'b.b' } });
  t.same([twoTools.status, twoTools.body.error.param], [400, 'tool']);
  const ok = await approve({ tool: 'ping' });
  t.equal(ok.status, 200);
  const governed = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'ping' } },
  });
  const event = await svc.call(`/api/audit/events/${governed.body.details.event_id}`, { token: svc.pat });
  t.equal(ok.body.fingerprint, event.body.details.fingerprint, 'the fingerprint /v1/govern gives the action');
});
