import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import t from 'tap';
import { randomBase62 } from '../../src/util/ids.js';
import { exited, type Running, startCli } from '../helpers/cli-process.js';
import { callHttp } from '../helpers/http.js';
import { startMockUpstream } from '../helpers/mock-upstream.js';
import { RawConnection } from '../helpers/raw-http.js';
import { ENGINES } from '../helpers/service.js';
import { tempDir } from '../helpers/tmp.js';

// What `govgate start` prints and how it stops, as an operator sees it.

const AGENT_KEY_LINE = /agent key \([^)]*\): gk_agent_\w+\n/;

/** The agent key a first start printed. */
const agentKeyOf = (run: Running): string =>
  /agent key \([^)]*\): (gk_agent_\w+)/.exec(run.out())?.[1] as string;

/** Points the started service's openai provider at `upstream`; the agent key it printed. */
async function onUpstream(t: Test, run: Running, pat: string, upstream: { url: string }): Promise<string> {
  const put = await callHttp(`${run.base}/api/settings/providers`, {
    method: 'PUT',
    token: pat,
    body: JSON.stringify({
      providers: [{ name: 'openai', api_key: 'sk-x-0001', base_url: `${upstream.url}/v1` }],
    }),
  });
  t.equal(put.status, 200);
  return agentKeyOf(run);
}

t.test(
  'first start with a provider key: the try-it line lists models; a chosen token is not echoed',
  async (t) => {
    const dir = tempDir('govgate-cli-');
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const pat = `gk_pat_${randomBase62(40)}`;
    const run = await startCli(dir, pat, /\/v1\/models/, { OPENAI_API_KEY: 'sk-test-cli-0000' });
    t.teardown(() => run.child.kill('SIGKILL'));
    const out = run.out();
    t.match(out, AGENT_KEY_LINE);
    t.notMatch(out, /mock-echo/, 'no call to a model this org does not serve');
    t.match(out, /curl -s http:\/\/127\.0\.0\.1:\d+\/v1\/models -H 'Authorization: Bearer gk_agent_\w+'/);
    t.notOk(out.includes(pat), 'the operator-chosen bootstrap token is not printed');
    t.match(out, /super_admin token: \(the SERVICE_BOOTSTRAP_TOKEN you set\)/);
    run.child.kill('SIGTERM');
    t.equal(await exited(run.child), 0, 'SIGTERM drains and exits 0');
  },
);

t.test(
  'a second signal stops at once, without waiting for the drain; a repeat of the first does not',
  async (t) => {
    const upstream = await startMockUpstream();
    t.teardown(() => upstream.close());
    upstream.behaviour = { kind: 'hang' };
    const dir = tempDir('govgate-cli-');
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const pat = `gk_pat_${randomBase62(40)}`;
    const run = await startCli(dir, pat, AGENT_KEY_LINE, { SERVICE_EGRESS_ALLOW: upstream.hostPort });
    t.teardown(() => run.child.kill('SIGKILL'));
    const agentKey = await onUpstream(t, run, pat, upstream);
    // A call the upstream never answers keeps the drain waiting (up to its 10 s grace).
    const pending = callHttp(`${run.base}/v1/chat/completions`, {
      token: agentKey,
      body: JSON.stringify({ model: 'gpt-test', messages: [{ role: 'user', content: 'wait' }] }),
    }).catch(() => undefined);
    while (upstream.requests.length === 0) await new Promise((r) => setTimeout(r, 20));
    run.child.kill('SIGINT');
    // A supervisor may deliver one stop twice (`timeout` signals the child and its group): a repeat
    // within a second is the same stop.
    run.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    t.equal(run.child.exitCode, null, 'the first signal drains: still running with a call in flight');
    t.equal(run.child.signalCode, null, 'and the repeat 0 ms after it did not stop it');
    await new Promise((r) => setTimeout(r, 900));
    run.child.kill('SIGINT');
    // A drain would end in a clean exit (0) once the grace ran out; 130 is the immediate stop.
    t.equal(await exited(run.child), 130, 'the second exits at once, with 130');
    await pending;
  },
);

t.test('a start an operator must fix says why in one line, without a stack trace', async (t) => {
  const dir = tempDir('govgate-cli-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pat = `gk_pat_${randomBase62(40)}`;
  const first = await startCli(dir, pat, /listening on/);
  t.teardown(() => first.child.kill('SIGKILL'));
  const second = await startCli(dir, pat, /listening on/).then(
    () => undefined,
    (err: Error) => err.message,
  );
  t.match(
    second,
    /exited \(1\) before listening: govgate: the data dir .* is in use by another govgate process/,
  );
  t.notMatch(second ?? '', /\n\s+at /, 'no stack trace');
});

t.test('key material an operator supplied or protected wrongly is said in one line', async (t) => {
  const dir = tempDir('govgate-cli-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pat = `gk_pat_${randomBase62(40)}`;
  const refused = (env: Record<string, string>): Promise<string> =>
    startCli(dir, pat, /listening on/, env).then(
      (run) => {
        run.child.kill('SIGKILL');
        return 'started';
      },
      (err: Error) => err.message,
    );
  // The variable takes the PEM text; a path is the usual slip.
  const path = await refused({ SERVICE_AUDIT_SIGNING_KEY: join(dir, 'audit-ed25519.pem') });
  t.match(path, /exited \(1\) before listening: govgate: SERVICE_AUDIT_SIGNING_KEY .*not a file path/);
  t.notMatch(path, /\n\s+at /, 'no stack trace');

  const first = await startCli(dir, pat, /listening on/, { SERVICE_AUDIT_KEY_PASSWORD: 'right-password' });
  first.child.kill('SIGINT');
  t.equal(await exited(first.child), 0);
  for (const password of ['', 'wrong-password']) {
    const out = await refused({ SERVICE_AUDIT_KEY_PASSWORD: password });
    t.match(
      out,
      /exited \(1\) before listening: govgate: .*SERVICE_AUDIT_KEY_PASSWORD/,
      `password "${password}"`,
    );
    t.notMatch(out, /\n\s+at /, 'no stack trace');
  }
});

t.test('UWS_USE_FALLBACK is the operator choosing node:http, not a failure to load', async (t) => {
  const dir = tempDir('govgate-cli-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const run = await startCli(dir, `gk_pat_${randomBase62(40)}`, /UWS_USE_FALLBACK/, {
    UWS_USE_FALLBACK: '1',
    SERVICE_LOG_LEVEL: 'info',
  });
  t.teardown(() => run.child.kill('SIGKILL'));
  t.match(run.out(), /"level":"info","msg":"UWS_USE_FALLBACK is set; serving with node:http"/);
  t.notMatch(run.out(), /could not load/);
});

t.test(
  'with a public URL the banner still says where it listens, and the try-it line works here',
  async (t) => {
    const dir = tempDir('govgate-cli-');
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const run = await startCli(dir, `gk_pat_${randomBase62(40)}`, /\/v1\/chat\/completions/, {
      SERVICE_PUBLIC_URL: 'https://gw.example.test',
    });
    t.teardown(() => run.child.kill('SIGKILL'));
    t.match(
      run.out(),
      /listening on http:\/\/127\.0\.0\.1:\d+ \(\w+, public URL https:\/\/gw\.example\.test, data in /,
    );
    t.match(run.out(), /curl -s http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions/);
    const key = agentKeyOf(run);
    const chat = await callHttp(`${run.base}/v1/chat/completions`, {
      token: key,
      body: JSON.stringify({ model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] }),
    });
    t.equal(chat.status, 200);
    t.match(
      (chat.body as { service: { audit_url: string } }).service.audit_url,
      /^https:\/\/gw\.example\.test\/api\/audit\/pipeline\//,
      'handed-out URLs are public',
    );
  },
);

for (const engine of ENGINES) {
  t.test(
    `after SIGTERM a kept-alive connection gets 503, the call in flight its answer (${engine})`,
    async (t) => {
      const upstream = await startMockUpstream();
      t.teardown(() => upstream.close());
      let openGate = (): void => {};
      t.teardown(() => openGate());
      const dir = tempDir('govgate-cli-');
      t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      const pat = `gk_pat_${randomBase62(40)}`;
      const run = await startCli(dir, pat, AGENT_KEY_LINE, {
        SERVICE_EGRESS_ALLOW: upstream.hostPort,
        SERVICE_HTTP_SERVER: engine,
        SERVICE_LOG_LEVEL: 'info',
      });
      t.teardown(() => run.child.kill('SIGKILL'));
      const agentKey = await onUpstream(t, run, pat, upstream);
      const auth = { authorization: `Bearer ${agentKey}`, 'content-type': 'application/json' };
      const body = JSON.stringify({ model: 'gpt-test', messages: [{ role: 'user', content: 'wait' }] });
      const kept = await RawConnection.open(run.base);
      t.teardown(() => kept.destroy());
      t.equal((await kept.request('GET', '/api/health/live')).status, 200);
      upstream.behaviour = { kind: 'gate', open: new Promise<void>((r) => (openGate = r)) };
      const inflight = await RawConnection.open(run.base);
      t.teardown(() => inflight.destroy());
      const held = inflight
        .request('POST', '/v1/chat/completions', { headers: auth, body, ms: 20_000 })
        .catch((err: Error) => ({ status: 0, headers: {} as Record<string, string>, body: err.message }));
      for (let i = 0; i < 500 && upstream.requests.length < 1; i++)
        await new Promise((r) => setTimeout(r, 10));

      run.child.kill('SIGTERM');
      // Logged in the signal handler right before the drain begins, in the same turn.
      for (let i = 0; i < 500 && !run.out().includes('"shutting down"'); i++)
        await new Promise((r) => setTimeout(r, 10));
      const refused = await kept.request('POST', '/v1/chat/completions', { headers: auth, body });
      t.equal(refused.status, 503);
      t.match(JSON.parse(refused.body), { error: { code: 'unavailable' } });
      t.equal(refused.headers.connection, 'close');
      t.equal(upstream.requests.length, 1, 'the refused call never reached the provider');
      openGate();
      const answered = await held;
      t.equal(answered.status, 200, 'the call in flight is answered');
      t.equal(answered.headers.connection, 'close');
      t.equal(await exited(run.child), 0, 'the drain ends and the process exits 0');
    },
  );
}
