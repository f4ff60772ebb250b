import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { runVerifyReceipt } from '../../src/cli-receipt.js';
import { callEvent, createOrg, startService } from '../helpers/service.js';

// An auditor proves one call was recorded, offline, from what the API handed out: the event (its
// receipt inlined) and the public keys. Everything here comes from a running service.

async function run(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runVerifyReceipt(args, {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
    isTTY: false,
  });
  return { code, out: out.join(''), err: err.join('') };
}

t.test('an event and its receipt from the API verify offline; any change does not', async (t) => {
  const svc = await startService();
  const dir = mkdtempSync(join(tmpdir(), 'govgate-receipt-'));
  t.teardown(async () => {
    await svc.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const file = (name: string, value: unknown): string => {
    const path = join(dir, name);
    writeFileSync(path, typeof value === 'string' ? value : JSON.stringify(value));
    return path;
  };
  const chat = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-session-id': 'sess-receipt' },
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
  });
  t.equal(chat.status, 200);
  const listed = await callEvent(svc, 'sess-receipt');
  // The receipt is there once a seal covers the event (within 250 ms).
  let event: Record<string, unknown> = {};
  for (let i = 0; i < 200; i++) {
    event = (await svc.call(`/api/audit/events/${listed.id}`, { token: svc.pat })).body;
    if (event.receipt) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  t.ok(event.receipt, 'the API inlines the receipt');
  const keys = file('keys.json', (await svc.call('/api/audit/signing-key', { token: svc.pat })).body);
  const org = event.org_id as string;

  const ok = await run([file('event.json', event), '--keys', keys, '--org', org, '--json']);
  t.equal(ok.code, 0, ok.err);
  t.match(JSON.parse(ok.out), {
    ok: true,
    event_id: listed.id,
    origin: `govgate/${org}`,
    event_checked: true,
  });
  const human = await run([file('event2.json', event), '--keys', keys]);
  t.match(human.out, /INCLUDED/);

  // A bare receipt proves the hash; with --event, the content too.
  const receipt = (await svc.call(`/api/audit/events/${listed.id}/receipt`, { token: svc.pat })).body;
  const bare = await run([file('receipt.json', receipt), '--keys', keys, '--json']);
  t.equal(bare.code, 0);
  t.equal(JSON.parse(bare.out).event_checked, false);
  const withEvent = await run([
    file('receipt2.json', receipt),
    '--keys',
    keys,
    '--event',
    file('e.json', event),
  ]);
  t.equal(withEvent.code, 0);

  const reason = async (name: string, value: unknown, extra: string[] = []): Promise<string> => {
    const r = await run([file(name, value), '--keys', keys, '--json', ...extra]);
    t.equal(r.code, 1, `${name}: not proven`);
    return JSON.parse(r.out).reason;
  };
  t.equal(await reason('edited.json', { ...event, outcome: 'block' }), 'content_modified');
  t.equal(await reason('other-id.json', { ...event, id: 'ae_someone_else_00000' }), 'content_modified');
  const r = event.receipt as { inclusion_proof: string[]; tree_size: number; checkpoint: string };
  if (r.inclusion_proof.length > 0) {
    const proof = [...r.inclusion_proof];
    proof[0] = (proof[0] as string).replace(/^./, (c) => (c === '0' ? '1' : '0'));
    t.equal(
      await reason('proof.json', { ...event, receipt: { ...r, inclusion_proof: proof } }),
      'not_included',
    );
  }
  t.equal(
    await reason('size.json', { ...event, receipt: { ...r, tree_size: r.tree_size + 1 } }),
    'checkpoint_mismatch',
  );
  t.equal(
    await reason('note.json', { ...event, receipt: { ...r, checkpoint: r.checkpoint.replace('\n', 'x\n') } }),
    'signature_invalid',
  );
  // Another org's event, every bit as well signed, is not this org's.
  const other = await createOrg(svc, 'acme');
  t.equal(await reason('org.json', event, ['--org', other.orgId]), 'org_mismatch');

  const usage = await run([file('x.json', event)]);
  t.equal(usage.code, 2);
  t.match(usage.err, /--keys <file> is required/);
  const junk = await run([file('junk.json', '{"a":1}'), '--keys', keys]);
  t.equal(junk.code, 2);
  t.match(junk.err, /no receipt/);
});
