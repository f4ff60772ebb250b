import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { publishOrgPolicy, serviceOnMockUpstream } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/** The control plane's events of `pipeline` (forwarded through the sidecar or not), once `n` are there. */
async function pipelineEvents(
  call: (path: string, init: { token: string }) => Promise<{ status: number; body: any }>,
  token: string,
  pipeline: string,
  n = 1,
): Promise<any[]> {
  let data: any[] = [];
  const end = Date.now() + 10_000;
  while (Date.now() < end) {
    const res = await call(`/api/audit/pipeline/${pipeline}`, { token });
    data = res.body.data ?? [];
    if (data.length >= n) return data;
    await new Promise((r) => setTimeout(r, 20));
  }
  return data;
}

for (const engine of ['uws', 'node'] as const) {
  t.test(`an agent's calls through its sidecar (${engine})`, async (t) => {
    const { svc, upstream } = await serviceOnMockUpstream(t, { engine });
    const { sidecarId, token } = await createSidecarToken(svc, svc.pat, 'pod-a');
    const sc = await startTestSidecar({
      controlUrl: svc.url,
      token,
      engine,
      env: { SERVICE_EGRESS_ALLOW: upstream.hostPort },
    });
    t.teardown(() => sc.close());
    const openai = new OpenAI({ apiKey: svc.agentKey, baseURL: `${sc.url}/v1`, maxRetries: 0 });
    const anthropic = new Anthropic({ apiKey: svc.agentKey, baseURL: sc.url, maxRetries: 0 });

    t.test(
      'the openai client: decided at the sidecar, recorded at the control plane with its origin',
      async (t) => {
        upstream.requests.length = 0;
        const res = await openai.chat.completions.create({
          model: 'gpt-test',
          messages: [{ role: 'user', content: 'hello there' }],
        });
        t.equal(res.choices[0]?.message.content, 'upstream-openai: hello there');
        t.equal(upstream.requests.at(-1)?.headers.authorization, 'Bearer sk-test-openai-0001');
        const service = (res as unknown as { service: { audit_url: string; blocked: boolean } }).service;
        t.equal(service.blocked, false);
        t.match(service.audit_url, new RegExp(`^${sc.url}/api/audit/pipeline/pl_`));
        // The audit URL the agent got is the sidecar's; it forwards to the control plane.
        const pipeline = service.audit_url.split('/').at(-1) as string;
        const events = await pipelineEvents(sc.call, svc.pat, pipeline);
        t.equal(events.length, 1);
        const e = events[0];
        t.equal(e.event_type, 'llm_call');
        t.equal(e.provider, 'openai');
        t.equal(e.agent_id, 'default-agent');
        t.equal(e.origin.sidecar_id, sidecarId);
        t.equal(e.origin.epoch, sc.sidecar.epoch);
        t.ok(Number.isInteger(e.origin.index) && e.origin.index >= 1);
        t.match(e.origin.hash, /^[0-9a-f]{64}$/);
      },
    );

    t.test('streaming and the anthropic client work the same way', async (t) => {
      const stream = await openai.chat.completions.create({
        model: 'gpt-test',
        stream: true,
        messages: [{ role: 'user', content: 'stream me' }],
      });
      let text = '';
      let last: Record<string, unknown> | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        last = chunk as unknown as Record<string, unknown>;
      }
      t.equal(text, 'upstream-openai: stream me');
      t.equal((last?.service as { blocked: boolean }).blocked, false);
      const msg = await anthropic.messages.create({
        model: 'claude-test-1',
        max_tokens: 50,
        system: 'be brief',
        messages: [{ role: 'user', content: 'hi' }],
      });
      t.equal(
        msg.content[0]?.type === 'text' ? msg.content[0].text : '',
        'upstream-anthropic [system:be brief]: hi',
      );
      t.equal(upstream.requests.at(-1)?.headers['x-api-key'], 'sk-ant-test-0002');
      const models = await openai.models.list();
      t.ok(models.data.some((m) => m.id === 'mock-echo'));
    });

    t.test('every entry reaches the control plane once, and its chain stays intact', async (t) => {
      await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'the sidecar log shipped');
      const listed = await svc.call('/api/sidecars', { token: svc.pat });
      const mine = listed.body.data.find((s: any) => s.sidecar_id === sidecarId);
      t.equal(mine.sync.epoch, sc.sidecar.epoch);
      t.ok(mine.sync.index >= 3, 'the chat, the stream and the message were taken in');
      t.notOk('token' in mine, 'the token is shown once, at creation');
      const ingested = await svc.call(`/api/audit?agent_id=default-agent&limit=1000`, { token: svc.pat });
      const origins = ingested.body.data.filter((e: any) => e.origin?.sidecar_id === sidecarId);
      const indexes = origins.map((e: any) => e.origin.index).sort((a: number, b: number) => a - b);
      t.same(
        indexes,
        Array.from({ length: mine.sync.index }, (_, i) => i + 1),
        'indexes 1..n, each once',
      );
      const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
      t.equal(integrity.body.status, 'intact');
    });

    t.test('paths the sidecar does not serve are forwarded, credentials and all', async (t) => {
      const me = await sc.call('/api/me', { token: svc.pat });
      t.equal(me.status, 200);
      t.equal(me.body.kind, 'user');
      t.equal(me.body.role, 'super_admin');
      const bad = await sc.call('/api/me', { token: 'gk_pat_nope' });
      t.equal(bad.status, 401);
      t.equal(bad.body.error.code, 'unauthenticated');
      // A POST with a body, answered by the control plane.
      const verify = await sc.call('/v1/tokens/verify', { body: { token: 'not-a-mandate' } });
      t.equal(verify.status, 200);
      t.same(verify.body, { valid: false, error: 'malformed' });
      t.ok(verify.headers.get('x-request-id'));
      // A streamed body (the JSONL export) comes through whole.
      const direct = await svc.call('/api/audit/export?format=jsonl', { token: svc.pat });
      const through = await sc.call('/api/audit/export?format=jsonl', { token: svc.pat });
      t.equal(through.status, 200);
      const lines = (s: unknown) => String(s).trim().split('\n').length;
      t.ok(lines(through.body) >= lines(direct.body), 'the export through the sidecar has every line');
      const missing = await sc.call('/api/nothing-here', { token: svc.pat });
      t.equal(missing.status, 404);
    });

    t.test('a policy published at the control plane is in force at the sidecar within 2 s', async (t) => {
      await publishOrgPolicy(svc, `no-gpt-${engine}`, {
        rules: [
          {
            id: 'no-gpt',
            when: { type: 'LLM_CALL', model: 'gpt-test' },
            then: 'block',
            reason: 'gpt is off',
          },
        ],
      });
      upstream.requests.length = 0;
      const started = Date.now();
      let blocked = false;
      while (!blocked && Date.now() - started < 2_000) {
        const res = await openai.chat.completions.create({
          model: 'gpt-test',
          messages: [{ role: 'user', content: 'x' }],
        });
        blocked = (res as unknown as { service: { blocked: boolean } }).service.blocked;
        if (!blocked) await new Promise((r) => setTimeout(r, 50));
      }
      t.ok(blocked, 'blocked within 2 s of the publish');
      const before = upstream.requests.length;
      const res = await openai.chat.completions.create({
        model: 'gpt-test',
        messages: [{ role: 'user', content: 'y' }],
      });
      const service = (res as unknown as { service: { blocked: boolean; rule_id: string } }).service;
      t.equal(service.blocked, true);
      t.equal(service.rule_id, 'no-gpt');
      t.equal(upstream.requests.length, before, 'the provider never saw the blocked call');
    });

    t.test('a call the policy sends for approval gets its approval at the control plane', async (t) => {
      await publishOrgPolicy(svc, `approve-claude-${engine}`, {
        rules: [
          {
            id: 'ask',
            when: { type: 'LLM_CALL', model: 'claude-test-1' },
            then: 'require_approval',
            reason: 'ask first',
          },
        ],
      });
      // The agent's decision stream, through the sidecar: frames arrive as they are written.
      const ac = new AbortController();
      t.teardown(() => ac.abort());
      const stream = await fetch(`${sc.url}/v1/me/approvals/stream`, {
        headers: { authorization: `Bearer ${svc.agentKey}`, accept: 'text/event-stream' },
        signal: ac.signal,
      });
      t.equal(stream.status, 200);
      t.match(stream.headers.get('content-type'), /^text\/event-stream/);
      const reader = (stream.body as ReadableStream<Uint8Array>).getReader();
      let received = '';
      let pending: ReturnType<typeof reader.read> | undefined;
      const readUntil = async (what: string): Promise<boolean> => {
        const end = Date.now() + 5_000;
        while (!received.includes(what) && Date.now() < end) {
          // One read in flight at a time: a read the timer beat is awaited on the next turn.
          pending ??= reader.read();
          const next = await Promise.race([
            pending,
            new Promise<undefined>((r) => setTimeout(() => r(undefined), 200)),
          ]);
          if (next === undefined) continue;
          pending = undefined;
          if (next.value) received += Buffer.from(next.value).toString('utf8');
          if (next.done) break;
        }
        return received.includes(what);
      };
      t.ok(await readUntil('retry:'), 'the stream opened through the sidecar');
      let approval: { request_id: string } | undefined;
      const end = Date.now() + 3_000;
      while (approval === undefined && Date.now() < end) {
        const res = await openai.chat.completions.create({
          model: 'claude-test-1',
          messages: [{ role: 'user', content: 'may I' }],
        });
        approval = (res as unknown as { service: { approval?: { request_id: string } } }).service.approval;
        if (approval === undefined) await new Promise((r) => setTimeout(r, 50));
      }
      t.ok(approval, 'the blocked answer names the approval');
      t.ok(await readUntil('approval.created'), 'the forwarded stream carries the approval as it is created');
      t.ok(received.includes(approval?.request_id as string));
      const rec = await svc.call(`/api/approvals/${approval?.request_id}`, { token: svc.pat });
      t.equal(rec.status, 200);
      t.equal(rec.body.status, 'pending');
      t.equal(rec.body.agent_id, 'default-agent');
      // Approved at the control plane: the identical call through the sidecar goes through, once.
      const decided = await svc.call(`/v1/me/approvals/${approval?.request_id}/decide`, {
        token: svc.pat,
        body: { decision: 'approve' },
      });
      t.equal(decided.status, 200);
      const ask = () =>
        openai.chat.completions.create({
          model: 'claude-test-1',
          messages: [{ role: 'user', content: 'may I' }],
        });
      const through = await ask();
      t.equal((through as unknown as { service: { blocked: boolean } }).service.blocked, false);
      t.equal(through.choices[0]?.message.content, 'upstream-anthropic: may I');
      const second = await ask();
      t.equal((second as unknown as { service: { blocked: boolean } }).service.blocked, true, 'once only');
    });

    t.test('an agent key revoked at the control plane stops working at the sidecar', async (t) => {
      const onboard = await svc.call('/api/agents/onboard', {
        token: svc.pat,
        body: { agent_id: `short-lived-${engine}` },
      });
      const key = onboard.body.api_key;
      let ok = 0;
      const end = Date.now() + 3_000;
      while (ok !== 200 && Date.now() < end) {
        ok = (await sc.call('/v1/models', { token: key.api_key })).status;
        if (ok !== 200) await new Promise((r) => setTimeout(r, 50));
      }
      t.equal(ok, 200, 'a new agent key works at the sidecar once the snapshot has it');
      const del = await svc.call(`/api/agents/${onboard.body.agent_uuid}/keys/${key.key_id}`, {
        method: 'DELETE',
        token: svc.pat,
      });
      t.equal(del.status, 200);
      let status = 200;
      const end2 = Date.now() + 3_000;
      while (status === 200 && Date.now() < end2) {
        status = (await sc.call('/v1/models', { token: key.api_key })).status;
        if (status === 200) await new Promise((r) => setTimeout(r, 50));
      }
      t.equal(status, 401);
    });
  });
}
