import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { runVerifyConsistency, runVerifyReceipt } from '../../src/cli-receipt.js';
import { callEvent, createOrg, startService } from '../helpers/service.js';
import { tempDir } from '../helpers/tmp.js';

// An auditor proves one call was recorded, offline, from what the API handed out: the event (its
// receipt inlined) and the public keys. Everything here comes from a running service.

async function run(
  args: string[],
  command = runVerifyReceipt,
): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await command(args, {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
    isTTY: false,
  });
  return { code, out: out.join(''), err: err.join('') };
}

t.test('an event and its receipt from the API verify offline; any change does not', async (t) => {
  const svc = await startService();
  const dir = tempDir('govgate-receipt-');
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
    body: { model: 'mock-echo', user: 'alice@example.com', messages: [{ role: 'user', content: 'hello' }] },
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
  // Only a personal field's commitment is hashed: a value changed beside its salt is caught too.
  const personal = event.personal as Record<string, { value: unknown; salt: string; c: string }>;
  const [field, stored] = Object.entries(personal).find(([, f]) => f.salt !== undefined) ?? [];
  t.ok(field, 'the event has a personal field with its salt');
  if (field && stored) {
    const forged = {
      ...event,
      personal: { ...personal, [field]: { ...stored, value: 'mallory@example.com' } },
    };
    t.equal(await reason('personal.json', forged), 'content_modified');
  }
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
  // A member repeated ahead of the real one: JSON.parse keeps the last (the genuine event) while
  // another reader takes the first.
  const text = JSON.stringify(event);
  t.equal(
    await reason('repeated.json', text.replace('"outcome":', '"outcome":"block","outcome":')),
    'content_modified',
  );
  // A tombstone in place of a value the receipt covered: included (the commitment is what was
  // hashed), and said to be an erasure the receipt does not prove.
  if (field && stored) {
    const tombstoned = {
      ...event,
      personal: { ...personal, [field]: { c: stored.c, value: '[ERASED:GDPR-Art17]' } },
    };
    const r2 = await run([file('tombstoned.json', tombstoned), '--keys', keys, '--json']);
    t.same(JSON.parse(r2.out).erased_fields, [field], 'named as erased');
    const h2 = await run([file('tombstoned2.json', tombstoned), '--keys', keys]);
    t.match(h2.out, /erased\s+.*the receipt does not prove the erasure/);
  }
  const bareHuman = await run([file('receipt3.json', receipt), '--keys', keys]);
  t.match(bareHuman.out, /\(as the receipt names it\)/, "a bare receipt's id is its own word");
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

t.test('a consistency proof between two seals verifies offline; any change does not', async (t) => {
  const svc = await startService();
  const dir = tempDir('govgate-consistency-');
  t.teardown(async () => {
    await svc.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const file = (name: string, value: unknown): string => {
    const path = join(dir, name);
    writeFileSync(path, JSON.stringify(value));
    return path;
  };
  /** The tree size of the first seal that covers a new call's event. */
  const sealedCall = async (session: string): Promise<number> => {
    await svc.call('/v1/chat/completions', {
      token: svc.agentKey,
      headers: { 'x-session-id': session },
      body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
    });
    const listed = await callEvent(svc, session);
    for (let i = 0; i < 200; i++) {
      const r = await svc.call(`/api/audit/events/${listed.id}/receipt`, { token: svc.pat });
      if (r.status === 200) return r.body.tree_size as number;
      await new Promise((res) => setTimeout(res, 20));
    }
    throw new Error('no seal covered the event');
  };
  const m = await sealedCall('sess-c1');
  const n = await sealedCall('sess-c2');
  t.ok(n > m, `two seals: ${m} and ${n}`);
  const keys = file('keys.json', (await svc.call('/api/audit/signing-key', { token: svc.pat })).body);
  const proof = (await svc.call(`/api/audit/consistency?from=${m}&to=${n}`, { token: svc.pat })).body;
  t.equal(proof.from_size, m);
  const org = (await svc.call('/api/me', { token: svc.pat })).body.org_id as string;

  const ok = await run(
    [file('ok.json', proof), '--keys', keys, '--org', org, '--json'],
    runVerifyConsistency,
  );
  t.equal(ok.code, 0, ok.err);
  t.same(JSON.parse(ok.out), { ok: true, from_size: m, to_size: n, origin: `govgate/${org}` });
  const human = await run([file('ok2.json', proof), '--keys', keys], runVerifyConsistency);
  t.match(human.out, /CONSISTENT/);

  const reason = async (name: string, value: unknown, extra: string[] = []): Promise<string> => {
    const r = await run([file(name, value), '--keys', keys, '--json', ...extra], runVerifyConsistency);
    t.equal(r.code, 1, `${name}: not proven`);
    return JSON.parse(r.out).reason;
  };
  const flipped = [...proof.consistency_proof];
  flipped[0] = (flipped[0] as string).replace(/^./, (c: string) => (c === '0' ? '1' : '0'));
  t.equal(await reason('flip.json', { ...proof, consistency_proof: flipped }), 'inconsistent');
  t.equal(
    await reason('short.json', { ...proof, consistency_proof: proof.consistency_proof.slice(1) }),
    'inconsistent',
  );
  t.equal(await reason('sizes.json', { ...proof, from_size: m + 1 }), 'checkpoint_mismatch');
  t.equal(
    await reason('swap.json', {
      ...proof,
      from_checkpoint: proof.to_checkpoint,
      to_checkpoint: proof.from_checkpoint,
    }),
    'checkpoint_mismatch',
  );
  t.equal(
    await reason('note.json', { ...proof, to_checkpoint: proof.to_checkpoint.replace('\n', 'x\n') }),
    'signature_invalid',
  );
  t.equal(await reason('org.json', proof, ['--org', 'org_someone_else']), 'org_mismatch');
  const junk = await run([file('junk.json', { a: 1 }), '--keys', keys], runVerifyConsistency);
  t.equal(junk.code, 2);
  t.match(junk.err, /no consistency proof/);
});
