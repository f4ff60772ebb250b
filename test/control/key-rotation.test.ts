import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify } from 'jose';
import t from 'tap';
import { runVerify } from '../../src/cli-verify.js';
import { createOrg, startService, type TestService } from '../helpers/service.js';

// Key rotation as an operator does it: one call, no restart; what the old keys signed keeps
// verifying, what is signed after uses the new keys, and the rotation is on the system chain.

function tempDir(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-rotate-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const rotate = (svc: TestService, token: string, body: unknown) =>
  svc.call('/api/keys/rotate', { token, body });

async function mandate(svc: TestService): Promise<string> {
  const r = await svc.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'search.web', args: { q: 'weather' } } },
  });
  if (r.body.outcome !== 'allow') throw new Error(JSON.stringify(r.body));
  return r.body.mandate as string;
}

/**
 * The `_system` chain's `admin.keys_rotated` events, from its JSONL log (the API does not serve
 * that chain); the log follows the store within moments, so it is read until one is there (or
 * `tries` reads 20 ms apart found none).
 */
async function rotationEvents(svc: TestService, tries = 100): Promise<Array<Record<string, any>>> {
  const path = join(svc.dataDir, 'data', 'audit', '_system.jsonl');
  for (let i = 0; i < tries; i++) {
    const events = existsSync(path)
      ? readFileSync(path, 'utf8')
          .split('\n')
          .filter((l) => l.startsWith('{"') && !l.startsWith('{"_seal"'))
          .map((l) => JSON.parse(l))
          .filter((e) => e.event_type === 'admin.keys_rotated')
      : [];
    if (events.length > 0) return events;
    await new Promise((r) => setTimeout(r, 20));
  }
  return [];
}

/** Sends a chat call and waits until a seal covers its event; returns the event as the API shows it. */
async function sealedCall(svc: TestService, session: string): Promise<Record<string, any>> {
  const chat = await svc.call('/v1/chat/completions', {
    token: svc.agentKey,
    headers: { 'x-session-id': session },
    body: { model: 'mock-echo', messages: [{ role: 'user', content: 'hello' }] },
  });
  if (chat.status !== 200) throw new Error(JSON.stringify(chat.body));
  const id = (await svc.call(`/api/audit/session/${session}`, { token: svc.pat })).body.data[0].id;
  for (let i = 0; i < 250; i++) {
    const event = (await svc.call(`/api/audit/events/${id}`, { token: svc.pat })).body;
    if (event.seal !== null && event.receipt) return event;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`event ${id} was not sealed in 5 s`);
}

async function verifyExport(
  svc: TestService,
  dir: string,
  keys: unknown,
): Promise<{ code: number; out: any }> {
  const chain = await svc.call('/api/audit/export?format=jsonl', { token: svc.pat });
  const chainPath = join(dir, `chain-${Date.now()}.jsonl`);
  const keysPath = join(dir, `keys-${Date.now()}.json`);
  writeFileSync(chainPath, chain.body);
  writeFileSync(keysPath, JSON.stringify(keys));
  const out: string[] = [];
  const code = await runVerify([chainPath, '--keys', keysPath, '--json'], {
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: () => {} },
    isTTY: false,
  });
  return { code, out: JSON.parse(out.join('')) };
}

t.test('only a super_admin rotates, with a strict body', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const other = await createOrg(svc, 'acme');
  t.equal((await svc.call('/api/keys/rotate', { body: { key: 'mandate' } })).status, 401);
  const asAgent = await rotate(svc, svc.agentKey, { key: 'mandate' });
  t.equal(asAgent.status, 403);
  const asOrgAdmin = await rotate(svc, other.adminPat, { key: 'mandate' });
  t.equal(asOrgAdmin.status, 403, 'an org admin cannot: the keys sign for every org');
  t.equal(asOrgAdmin.body.error.code, 'forbidden');
  for (const body of [{}, { key: 'vault' }, { key: 'mandate', extra: 1 }, { key: 7 }]) {
    const r = await rotate(svc, svc.pat, body);
    t.equal(r.status, 400, JSON.stringify(body));
    t.equal(r.body.error.code, 'invalid_request');
  }
  const jwks = (await svc.call('/.well-known/jwks.json')).body;
  t.equal(jwks.keys.length, 2, 'nothing refused rotated anything (the active key and the next)');
  const doc = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  t.equal(doc.keys.length, 2);
});

t.test('the mandate key: old mandates verify, new ones carry the new kid, a restart keeps it', async (t) => {
  // One issuer across the restart (the port changes): mandates name it.
  const env = { SERVICE_PUBLIC_URL: 'https://govgate.test' };
  const svc = await startService({ env });
  let open: TestService | undefined = svc;
  t.teardown(async () => {
    await open?.close();
  });
  const keysDir = join(svc.dataDir, 'keys');
  const before = await mandate(svc);
  const oldKid = decodeProtectedHeader(before).kid as string;
  t.ok(existsSync(join(keysDir, 'mandate', `${oldKid}.pem`)));
  // What a verifier cached before the rotation.
  const cached = (await svc.call('/.well-known/jwks.json')).body;

  const r = await rotate(svc, svc.pat, { key: 'mandate' });
  t.equal(r.status, 200);
  t.equal(r.body.key, 'mandate');
  t.equal(r.body.retired.length, 1);
  t.equal(r.body.retired[0].key_id, oldKid);
  t.ok(Date.parse(r.body.retired[0].retired_at), 'retired now');
  t.equal(r.body.active.length, 1);
  const newKid = r.body.active[0].key_id as string;
  t.not(newKid, oldKid);
  t.equal(r.body.active[0].retired_at, null);
  t.same(r.body.kept, []);
  t.equal(r.body.next.length, 1);
  const nextKid = r.body.next[0].key_id as string;
  t.notOk([oldKid, newKid].includes(nextKid));
  t.notOk(JSON.stringify(r.body).includes('PRIVATE'), 'no private material in the answer');
  t.notOk(existsSync(join(keysDir, 'mandate', `${oldKid}.pem`)), "the retired key's private half is gone");

  const after = await mandate(svc);
  t.equal(decodeProtectedHeader(after).kid, newKid, 'new mandates are signed with the new key');
  const jwks = (await svc.call('/.well-known/jwks.json')).body;
  t.same(jwks.keys.map((k: { kid: string }) => k.kid).sort(), [oldKid, newKid, nextKid].sort());
  // Offline, with nothing but the published key set: both verify, with the set fetched now and
  // with the copy cached before the rotation (the new key was published ahead of it).
  for (const set of [jwks, cached])
    for (const token of [before, after]) {
      const { payload } = await jwtVerify(token, createLocalJWKSet(set));
      t.equal(payload.sub, 'default-agent');
    }
  for (const token of [before, after]) {
    const v = await svc.call('/v1/tokens/verify', { body: { token } });
    t.equal(v.body.valid, true, 'and online');
  }

  const [event] = await rotationEvents(svc);
  t.ok(event, 'the rotation is an event of the system chain');
  t.match(event?.details, { key: 'mandate', active: [newKid], retired: [oldKid], kept: [], next: [nextKid] });
  t.match(event?.details.credential_id, /^tok_/, 'naming the credential that asked');

  const dataDir = svc.dataDir;
  await svc.close(true);
  open = undefined;
  const again = await startService({ dataDir, env });
  open = again;
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const restarted = (await again.call('/.well-known/jwks.json')).body;
  t.same(restarted.keys.map((k: { kid: string }) => k.kid).sort(), [oldKid, newKid, nextKid].sort());
  const verified = await again.call('/v1/tokens/verify', { body: { token: after } });
  t.equal(verified.body.valid, true, JSON.stringify(verified.body));
  const next = await again.call('/v1/govern', {
    token: svc.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'search.web', args: { q: 'rain' } } },
  });
  t.equal(decodeProtectedHeader(next.body.mandate).kid, newKid, 'the rotated key is the one loaded');
});

t.test('the audit keys: seals before and after verify with the published keys', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const dir = tempDir(t);
  const first = await sealedCall(svc, 'before-rotation');
  const oldNames = first.seal.signatures.map((s: { name: string }) => s.name).sort();
  const oldDoc = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;

  const r = await rotate(svc, svc.pat, { key: 'audit' });
  t.equal(r.status, 200);
  t.equal(r.body.key, 'audit');
  t.same(
    r.body.active.map((k: { alg: string }) => k.alg),
    ['ed25519', 'ml-dsa-65'],
  );
  t.same(r.body.retired.map((k: { name: string }) => k.name).sort(), oldNames);
  t.same(r.body.kept, []);
  t.same(r.body.next, [], 'audit keys are not published ahead: seals are checked after the fact');

  const second = await sealedCall(svc, 'after-rotation');
  const newNames = second.seal.signatures.map((s: { name: string }) => s.name).sort();
  t.same(newNames, r.body.active.map((k: { name: string }) => k.name).sort(), 'new seals use the new keys');

  const doc = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  t.equal(doc.keys.length, 4);
  t.same(
    doc.keys
      .filter((k: { status: string }) => k.status === 'retired')
      .map((k: { name: string }) => k.name)
      .sort(),
    oldNames,
    'the retired keys stay published',
  );
  const integrity = await svc.call('/api/audit/integrity?refresh=true', { token: svc.pat });
  t.equal(integrity.body.status, 'intact');

  // Offline: the whole chain verifies with the published document; with the document from
  // before the rotation the new seals do not (they really are signed by the new keys).
  const ok = await verifyExport(svc, dir, doc);
  t.equal(ok.code, 0);
  t.equal(ok.out.status, 'intact');
  const stale = await verifyExport(svc, dir, oldDoc);
  t.equal(stale.code, 1);
  t.equal(stale.out.status, 'compromised');
  t.ok(
    stale.out.broken_events.every((b: { reason: string }) => b.reason === 'signature_invalid'),
    'only the seals after the rotation fail',
  );
  t.ok(stale.out.broken_events.some((b: { line: number }) => b.line >= second.seq));

  const [event] = await rotationEvents(svc);
  t.match(event?.details, { key: 'audit', kept: [] });
  t.equal(event?.details.active.length, 2);
});

t.test('an Ed25519 key from SERVICE_AUDIT_SIGNING_KEY is kept; the ML-DSA-65 key rotates', async (t) => {
  const pem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const svc = await startService({ env: { SERVICE_AUDIT_SIGNING_KEY: pem } });
  t.teardown(() => svc.close());
  const dir = tempDir(t);
  await sealedCall(svc, 'env-before');
  const before = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  const ed = before.keys.find((k: { alg: string }) => k.alg === 'ed25519');
  const r = await rotate(svc, svc.pat, { key: 'audit' });
  t.equal(r.status, 200);
  t.same(
    r.body.active.map((k: { alg: string }) => k.alg),
    ['ml-dsa-65'],
  );
  t.same(
    r.body.retired.map((k: { alg: string }) => k.alg),
    ['ml-dsa-65'],
  );
  t.same(
    r.body.kept.map((k: { name: string }) => k.name),
    [ed.name],
  );
  const after = await sealedCall(svc, 'env-after');
  const names = after.seal.signatures.map((s: { name: string }) => s.name);
  t.ok(names.includes(ed.name), 'the Ed25519 key still signs');
  t.ok(names.includes(r.body.active[0].name), 'beside the new ML-DSA-65 key');
  const doc = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  const ok = await verifyExport(svc, dir, doc);
  t.equal(ok.out.status, 'intact');
});

t.test('a keys dir that cannot be written: 503, and the keys in force are unchanged', async (t) => {
  const svc = await startService();
  t.teardown(() => svc.close());
  const before = await mandate(svc);
  const kid = decodeProtectedHeader(before).kid;
  // The mandate folder made unwritable in a way root cannot bypass: a file where it was.
  const folder = join(svc.dataDir, 'keys', 'mandate');
  renameSync(folder, `${folder}.moved`);
  writeFileSync(folder, 'not a directory');
  const r = await rotate(svc, svc.pat, { key: 'mandate' });
  t.equal(r.status, 503);
  t.equal(r.body.error.code, 'unavailable');
  t.match(r.body.error.message, /keys dir could not be written .*unchanged/);
  rmSync(folder);
  renameSync(`${folder}.moved`, folder);
  const after = await mandate(svc);
  t.equal(decodeProtectedHeader(after).kid, kid, 'mandates are still signed with the same key');
  t.equal((await svc.call('/.well-known/jwks.json')).body.keys.length, 2);
  t.same(await rotationEvents(svc, 200), [], 'and no rotation was recorded');
});
