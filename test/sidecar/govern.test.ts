import { createLocalJWKSet, decodeProtectedHeader, jwtVerify } from 'jose';
import t from 'tap';
import { startReceiver } from '../helpers/receiver.js';
import { publishOrgPolicy, startService } from '../helpers/service.js';
import { createSidecarToken, startTestSidecar } from '../helpers/sidecar.js';
import { waitFor } from '../helpers/wait.js';

t.test('the govern API at the sidecar: decided there, mandates the control plane verifies', async (t) => {
  const tool = await startReceiver();
  const control = await startService({ env: { SERVICE_EGRESS_ALLOW: `127.0.0.1:${tool.port}` } });
  const { sidecarId, token } = await createSidecarToken(control, control.pat);
  const sc = await startTestSidecar({ controlUrl: control.url, token });
  t.teardown(async () => {
    await sc.close();
    await control.close();
    await tool.close();
  });
  const set = await control.call('/api/settings/tools', {
    method: 'PUT',
    token: control.pat,
    body: { tools: [{ name: 'crm.lookup', url: `http://127.0.0.1:${tool.port}/lookup` }] },
  });
  t.equal(set.status, 200);
  const ready = await sc.call('/api/health/ready');
  t.equal(ready.status, 200, 'ready once its mandate keys are registered');

  const govern = await sc.call('/v1/tools/govern', {
    token: control.agentKey,
    body: { name: 'crm.lookup', arguments: { id: 'c-1' } },
  });
  t.equal(govern.status, 200);
  t.equal(govern.body.outcome, 'allow');
  const mandate = govern.body.mandate as string;
  t.type(mandate, 'string');

  t.test('the mandate verifies offline with the control plane’s JWKS alone', async (t) => {
    const jwks = (await control.call('/.well-known/jwks.json')).body;
    const { payload } = await jwtVerify(mandate, createLocalJWKSet(jwks), {
      issuer: control.url,
      algorithms: ['EdDSA'],
    });
    t.equal(payload.sub, 'default-agent');
    t.same((payload as any).cap.tool, 'crm.lookup');
    const kid = decodeProtectedHeader(mandate).kid as string;
    const registered = await control.call('/api/audit?event_type=sidecar.mandate_keys_registered', {
      token: control.pat,
    });
    t.equal(registered.body.data.length, 1);
    t.equal(registered.body.data[0].details.sidecar_id, sidecarId);
    t.ok(
      registered.body.data[0].details.keys.some((k: any) => k.kid === kid),
      'signed with a key the sidecar registered, recorded in the org chain',
    );
    const verified = await control.call('/v1/tokens/verify', { body: { token: mandate } });
    t.equal(verified.body.valid, true);
  });

  t.test('the control plane runs the tool under the sidecar’s mandate', async (t) => {
    const run = await sc.call('/v1/tools/execute', {
      token: control.agentKey,
      body: { mandate, name: 'crm.lookup', arguments: { id: 'c-1' } },
    });
    t.equal(run.status, 200, JSON.stringify(run.body));
    t.equal(run.body.status, 200);
    t.same(tool.posts.at(-1)?.body, { id: 'c-1' });
    const other = await sc.call('/v1/tools/execute', {
      token: control.agentKey,
      body: { mandate, name: 'crm.lookup', arguments: { id: 'c-2' } },
    });
    t.equal(other.status, 403, 'other arguments than the mandate names');
  });

  t.test('execution reports, blocks and approvals', async (t) => {
    const exec = await sc.call('/v1/govern/execution', {
      token: control.agentKey,
      body: { pipeline_id: govern.body.pipeline_id, ok: true, duration_ms: 3 },
    });
    t.equal(exec.status, 200);
    t.equal(exec.body.recorded, true);
    await publishOrgPolicy(control, 'tools', {
      rules: [
        {
          id: 'no-shell',
          when: { type: 'TOOL_CALL', tool: 'shell.exec' },
          then: 'block',
          reason: 'no shell',
        },
        {
          id: 'ask-pay',
          when: { type: 'TOOL_CALL', tool: 'payments.pay' },
          then: 'require_approval',
          reason: 'ask',
        },
      ],
    });
    let blocked: any;
    const end = Date.now() + 3_000;
    while (blocked?.outcome !== 'block' && Date.now() < end) {
      blocked = (
        await sc.call('/v1/govern', {
          token: control.agentKey,
          body: { type: 'TOOL_CALL', payload: { tool: 'shell.exec', args: { cmd: 'ls' } } },
        })
      ).body;
      if (blocked.outcome !== 'block') await new Promise((r) => setTimeout(r, 50));
    }
    t.equal(blocked.outcome, 'block');
    t.equal(blocked.rule_id, 'no-shell');
    t.notOk('mandate' in blocked, 'no mandate for a block');
    const asked = await sc.call('/v1/govern', {
      token: control.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool: 'payments.pay', args: { amount: 5 } } },
    });
    t.equal(asked.body.outcome, 'needs_approval');
    const approval = await control.call(`/api/approvals/${asked.body.approval.request_id}`, {
      token: control.pat,
    });
    t.equal(approval.body.status, 'pending', 'the approval waits at the control plane');
    const decided = await control.call(`/v1/me/approvals/${asked.body.approval.request_id}/decide`, {
      token: control.pat,
      body: { decision: 'approve', reason: 'fine' },
    });
    t.equal(decided.status, 200);
    const again = () =>
      sc.call('/v1/govern', {
        token: control.agentKey,
        body: { type: 'TOOL_CALL', payload: { tool: 'payments.pay', args: { amount: 5 } } },
      });
    const allowed = await again();
    t.equal(allowed.body.outcome, 'allow', 'the approved call is allowed at the sidecar');
    t.match(allowed.body.reason, new RegExp(`approved \\(${asked.body.approval.request_id}`));
    t.type(allowed.body.mandate, 'string');
    const once = await again();
    t.equal(once.body.outcome, 'needs_approval', 'once only');
    const spent = await control.call(`/api/approvals/${asked.body.approval.request_id}`, {
      token: control.pat,
    });
    t.equal(spent.body.status, 'consumed');
    const otherArgs = await sc.call('/v1/govern', {
      token: control.agentKey,
      body: { type: 'TOOL_CALL', payload: { tool: 'payments.pay', args: { amount: 6 } } },
    });
    t.equal(otherArgs.body.outcome, 'needs_approval', 'an approval is for the identical action only');
    await waitFor(() => sc.sidecar.shipper.unshipped === 0, 'shipped');
    const trail = await control.call(`/api/audit/pipeline/${govern.body.pipeline_id}`, {
      token: control.pat,
    });
    // The decision and its report come from the sidecar's log; the tool ran at the control
    // plane, which recorded it itself. The org chain orders them as it took them in.
    t.same(trail.body.data.map((e: any) => [e.event_type, e.origin?.sidecar_id ?? null]).sort(), [
      ['govern.decision', sidecarId],
      ['govern.execution', sidecarId],
      ['tool.execution', null],
      ['tool.execution_started', null],
    ]);
  });

  t.test('a revoked sidecar’s mandates stop verifying', async (t) => {
    await control.call(`/api/sidecars/${sidecarId}`, { method: 'DELETE', token: control.pat });
    const verified = await control.call('/v1/tokens/verify', { body: { token: mandate } });
    t.equal(verified.body.valid, false);
    t.equal(verified.body.error, 'unknown_key');
    const kid = decodeProtectedHeader(mandate).kid as string;
    const jwks = (await control.call('/.well-known/jwks.json')).body;
    t.notOk(
      jwks.keys.some((k: any) => k.kid === kid),
      'its key is no longer published',
    );
  });
});
