import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { publishOrgPolicy, startService } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

/**
 * A relay between a sidecar and its control plane that forwards everything, except that it can
 * lose the answer to the next request for one path: the control plane has acted on it, and the
 * sidecar's connection is cut before it hears so (a network fault, a control plane too slow for
 * the sidecar's timeout).
 */
async function lossyRelay(target: string) {
  const upstream = new URL(target);
  let loseNext: string | undefined;
  let lost = 0;
  const server = http.createServer((req, res) => {
    const fwd = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: upstream.host },
      },
      (answer) => {
        if (loseNext !== undefined && req.url?.split('?')[0] === loseNext) {
          loseNext = undefined;
          lost++;
          answer.resume();
          answer.on('end', () => req.socket.destroy());
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    fwd.on('error', () => req.socket.destroy());
    req.pipe(fwd);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    lose(path: string) {
      loseNext = path;
    },
    get lost() {
      return lost;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A control plane, a lossy relay in front of it, and a sidecar that reaches it through the relay. */
async function sidecarBehindRelay(t: { teardown(fn: () => Promise<void>): void }) {
  const control = await startService();
  const relay = await lossyRelay(control.url);
  const { token } = await createSidecarToken(control, control.pat);
  const sc = await startTestSidecar({ controlUrl: relay.url, token });
  t.teardown(async () => {
    await sc.close();
    await relay.close();
    await control.close();
  });
  return { control, relay, sc };
}

t.test('an approval spent at the control plane whose answer the sidecar lost is not lost', async (t) => {
  const { control, relay, sc } = await sidecarBehindRelay(t);
  await publishOrgPolicy(control, 'ask-pay', {
    rules: [
      {
        id: 'ask-pay',
        when: { type: 'TOOL_CALL', tool: 'payments.pay' },
        then: 'require_approval',
        reason: 'ask',
      },
    ],
  });
  const pay = (amount: number) =>
    sc.call('/v1/govern', {
      token: control.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool: 'payments.pay', args: { amount } } },
    });
  let asked = await pay(5);
  const end = Date.now() + 5_000;
  while (asked.body.outcome !== 'needs_approval' && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    asked = await pay(5);
  }
  t.equal(asked.body.outcome, 'needs_approval', 'the sidecar has the policy');
  const id = asked.body.approval.request_id as string;
  const decided = await control.call(`/v1/me/approvals/${id}/decide`, {
    token: control.pat,
    body: { decision: 'approve', reason: 'fine' },
  });
  t.equal(decided.status, 200);

  relay.lose('/api/sync/approvals/consume');
  const cut = await pay(5);
  t.equal(relay.lost, 1, 'the consume answer was lost');
  t.equal(cut.status, 503, 'the call is refused as the control plane could not be heard');
  t.equal(cut.body.error.code, 'unavailable');
  t.ok(cut.headers.get('retry-after'), 'with Retry-After');
  const spent = await control.call(`/api/approvals/${id}`, { token: control.pat });
  t.equal(spent.body.status, 'consumed', 'the control plane did spend the approval');
  const pendingAfterCut = await control.call('/api/approvals?status=pending', { token: control.pat });
  t.equal(pendingAfterCut.status, 200);
  t.equal(pendingAfterCut.body.data.length, 0, 'and no new approval was asked for');

  const retried = await pay(5);
  t.equal(retried.body.outcome, 'allow', 'the retry gets the approval the lost call spent');
  t.match(retried.body.reason, new RegExp(`approved \\(${id}`));
  const once = await pay(5);
  t.equal(once.body.outcome, 'needs_approval', 'and only the retry: the next identical call asks again');
  t.not(once.body.approval.request_id, id);
  const consumed = await control.call('/api/audit?event_type=approval.consumed', { token: control.pat });
  t.equal(consumed.body.data.length, 1, 'one approval.consumed event');
});

// A model call that needs an approval, at a sidecar that cannot hear the control plane about it
// (the consume's answer lost, the new approval's answer lost): the call is refused 503, and it is
// still an event of the org chain, shipped from the sidecar's log like any other.
t.test('a model call refused because the control plane could not be heard is audited', async (t) => {
  const { control, relay, sc } = await sidecarBehindRelay(t);
  await publishOrgPolicy(control, 'ask-model', {
    rules: [{ id: 'ask-model', when: { type: 'LLM_CALL' }, then: 'require_approval', reason: 'ask' }],
  });
  const chat = (content: string) =>
    sc.call('/v1/chat/completions', {
      token: control.agentKey,
      body: { model: 'mock-echo', messages: [{ role: 'user', content }] },
    });
  let first = await chat('may I');
  const end = Date.now() + 5_000;
  while (first.body.service?.outcome !== 'needs_approval' && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    first = await chat('may I');
  }
  t.equal(first.body.service?.outcome, 'needs_approval', 'the sidecar has the policy');

  relay.lose('/api/sync/approvals/consume');
  const consumeLost = await chat('may I, again');
  t.equal(consumeLost.status, 503, 'consume answer lost: 503');
  // The consume is answered (none), the new approval's answer is lost.
  relay.lose('/api/sync/approvals');
  const createLost = await chat('and once more');
  t.equal(createLost.status, 503, 'approval answer lost: 503');
  t.equal(relay.lost, 2);

  await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'shipped');
  const events = await control.call('/api/audit?event_type=llm_call&limit=20', { token: control.pat });
  t.equal(events.status, 200);
  const refused = (events.body.data as any[]).filter((e) => e.details?.status === 503);
  t.equal(refused.length, 2, 'both refused calls are events');
  for (const e of refused) {
    t.equal(e.outcome, 'error');
    t.equal(e.details.error_code, 'unavailable');
    t.equal(e.details.client_disconnected, false);
  }
});
