import { generateKeyPairSync, sign, verify } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import type { Test } from 'tap';
import t from 'tap';
import { keyIdFor, toBase64, toHex } from '../../src/core/chain/index.js';
import { AUDIT_KEYS_FOLDER, AuditKeys } from '../../src/crypto/audit-keys.js';
import { MANDATE_KEYS_FOLDER, MandateKeys } from '../../src/crypto/mandate-keys.js';
import { tempDir } from '../helpers/tmp.js';

const T0 = Date.parse('2025-03-01T10:00:00.000Z');
const T1 = Date.parse('2025-03-02T10:00:00.000Z');

function tempKeysDir(t: Test): string {
  const dir = tempDir('govgate-akeys-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function auditDir(keysDir: string): string {
  return join(keysDir, AUDIT_KEYS_FOLDER);
}

function filesOf(keysDir: string, suffix: string): string[] {
  return readdirSync(auditDir(keysDir))
    .filter((f) => f.endsWith(suffix))
    .map((f) => join(auditDir(keysDir), f));
}

/** The Ed25519 key really is the key the document publishes. */
function edSignsForDoc(keys: AuditKeys): boolean {
  const a = keys.active();
  const doc = keys.publicDocument().keys.find((k) => k.name === a.ed25519.name);
  if (doc === undefined) return false;
  const msg = Buffer.from('probe\n');
  const sig = sign(null, msg, a.ed25519.privateKey);
  const spki = Buffer.concat([
    Buffer.from('302a300506032b6570032100', 'hex'),
    Buffer.from(doc.public_key, 'base64'),
  ]);
  return verify(null, msg, { key: spki, format: 'der', type: 'spki' }, sig);
}

function edPem(): { pem: string; raw: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const jwk = publicKey.export({ format: 'jwk' });
  return {
    pem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    raw: Buffer.from(jwk.x as string, 'base64url').toString('base64'),
  };
}

t.test('first load generates a pair of both algorithms, 0600 files and a public document', async (t) => {
  const dir = tempKeysDir(t);
  const keys = AuditKeys.load({ keysDir: dir, now: () => T0 });
  const a = keys.active();
  t.match(a.ed25519.name, /^govgate-audit-ed25519-[0-9a-f]{8}$/);
  t.match(a.mldsa.name, /^govgate-audit-mldsa65-[0-9a-f]{8}$/);
  t.equal(a.ed25519.publicKey.length, 32);
  t.equal(a.mldsa.publicKey.length, 1952);
  t.equal(a.mldsa.seed.length, 32);
  t.same(a.ed25519.keyId, keyIdFor(a.ed25519.name, 'ed25519', a.ed25519.publicKey));
  t.same(a.mldsa.keyId, keyIdFor(a.mldsa.name, 'ml-dsa-65', a.mldsa.publicKey));
  t.same(ml_dsa65.keygen(a.mldsa.seed).publicKey, a.mldsa.publicKey, 'the seed regenerates the key');

  const doc = keys.publicDocument();
  t.same(doc.algorithms, ['ed25519', 'ml-dsa-65']);
  t.same(
    doc.keys.map((k) => [k.name, k.alg, k.status, k.created_at, k.retired_at]),
    [
      [a.ed25519.name, 'ed25519', 'active', '2025-03-01T10:00:00.000Z', null],
      [a.mldsa.name, 'ml-dsa-65', 'active', '2025-03-01T10:00:00.000Z', null],
    ],
  );
  t.equal(doc.keys[0]?.key_id, toHex(a.ed25519.keyId));
  t.equal(doc.keys[1]?.key_id, toHex(a.mldsa.keyId));
  t.match(doc.keys[0]?.key_id, /^[0-9a-f]{8}$/);
  t.equal(doc.keys[1]?.public_key, toBase64(a.mldsa.publicKey));
  t.ok(edSignsForDoc(keys));

  const text = doc.instructions.join('\n');
  t.match(text, 'GET /api/audit/export?format=jsonl');
  t.match(text, 'keys.json');
  t.match(text, 'node dist/src/cli.js verify chain.jsonl --keys keys.json');
  // npx outside a checkout fetches whatever package holds the name from the public registry.
  t.notMatch(text, /npx/);
  t.match(text, /empty.*check the download/s);
  t.match(text, /intact/);
  t.match(text, /compromised/);
  t.match(text, /BOTH/);
  t.match(text, /ML-DSA-65/);

  const pem = filesOf(dir, '.pem');
  const seed = filesOf(dir, '.seed');
  t.equal(pem.length, 1);
  t.equal(seed.length, 1);
  for (const f of [...pem, ...seed]) t.equal(statSync(f).mode & 0o777, 0o600, `${f} is 0600`);
  t.equal(statSync(auditDir(dir)).mode & 0o077, 0, 'the folder is private');
  t.match(readFileSync(pem[0] as string, 'utf8'), /^-----BEGIN PRIVATE KEY-----\n/);
  const seedText = readFileSync(seed[0] as string, 'utf8');
  t.match(seedText, /^-----BEGIN GOVGATE ML-DSA-65 SEED-----\n/);
  t.match(seedText, toBase64(a.mldsa.seed), 'without a password the seed is stored plain');
  const index = JSON.parse(readFileSync(join(auditDir(dir), 'keys.json'), 'utf8'));
  t.same(index.active, { ed25519: a.ed25519.name, 'ml-dsa-65': a.mldsa.name });
  t.equal(index.keys.length, 2);
  t.notOk(existsSync(join(auditDir(dir), 'keys.json.tmp')));
});

t.test('a second load reads the same keys from disk', async (t) => {
  const dir = tempKeysDir(t);
  const first = AuditKeys.load({ keysDir: dir, now: () => T0 });
  const second = AuditKeys.load({ keysDir: dir, now: () => T1 });
  const a = first.active();
  const b = second.active();
  t.equal(b.ed25519.name, a.ed25519.name);
  t.same(b.ed25519.publicKey, a.ed25519.publicKey);
  t.same(b.mldsa.seed, a.mldsa.seed);
  t.same(b.mldsa.secretKey, a.mldsa.secretKey);
  t.same(second.publicDocument(), first.publicDocument());
  t.ok(edSignsForDoc(second));
  const msg = new TextEncoder().encode('x\n');
  t.ok(ml_dsa65.verify(ml_dsa65.sign(msg, b.mldsa.secretKey), msg, a.mldsa.publicKey));
});

t.test('rotate retires the old pair (still published) and activates a new one', async (t) => {
  const dir = tempKeysDir(t);
  let now = T0;
  const keys = AuditKeys.load({ keysDir: dir, now: () => now });
  const old = keys.active();
  const gen = keys.generation;
  now = T1;
  keys.rotate();
  const fresh = keys.active();
  t.equal(keys.generation, gen + 1);
  t.not(fresh.ed25519.name, old.ed25519.name);
  t.not(fresh.mldsa.name, old.mldsa.name);
  const byName = new Map(keys.publicDocument().keys.map((k) => [k.name, k]));
  t.equal(byName.size, 4);
  for (const n of [old.ed25519.name, old.mldsa.name]) {
    t.equal(byName.get(n)?.status, 'retired');
    t.equal(byName.get(n)?.retired_at, '2025-03-02T10:00:00.000Z');
    t.equal(byName.get(n)?.created_at, '2025-03-01T10:00:00.000Z');
  }
  for (const n of [fresh.ed25519.name, fresh.mldsa.name]) {
    t.equal(byName.get(n)?.status, 'active');
    t.equal(byName.get(n)?.retired_at, null);
  }
  t.equal(byName.get(old.mldsa.name)?.public_key, toBase64(old.mldsa.publicKey), 'old public key kept');
  t.same(
    filesOf(dir, '.pem').concat(filesOf(dir, '.seed')).sort(),
    [
      join(auditDir(dir), `${fresh.ed25519.name}.pem`),
      join(auditDir(dir), `${fresh.mldsa.name}.seed`),
    ].sort(),
    'retired private files are deleted',
  );

  now = T1 + 1000;
  keys.rotate();
  const reloaded = AuditKeys.load({ keysDir: dir, now: () => now });
  t.equal(reloaded.publicDocument().keys.length, 6, 'every retired key stays published');
  t.equal(reloaded.publicDocument().keys.filter((k) => k.status === 'active').length, 2);
  t.equal(reloaded.active().ed25519.name, keys.active().ed25519.name);
  t.same(reloaded.active().mldsa.seed, keys.active().mldsa.seed);
});

t.test('with a password the files are encrypted and a wrong password is a clear error', async (t) => {
  const dir = tempKeysDir(t);
  const keys = AuditKeys.load({ keysDir: dir, password: 'correct horse', now: () => T0 });
  const a = keys.active();
  const pem = readFileSync(filesOf(dir, '.pem')[0] as string, 'utf8');
  t.notMatch(pem, '-----BEGIN PRIVATE KEY-----');
  t.match(pem, /^-----BEGIN ENCRYPTED PRIVATE KEY-----\n/);
  const seedFile = filesOf(dir, '.seed')[0] as string;
  const seedText = readFileSync(seedFile, 'utf8');
  const seedBytes = Buffer.from(a.mldsa.seed);
  t.notOk(readFileSync(seedFile).includes(seedBytes), 'no raw seed bytes');
  t.notMatch(seedText, seedBytes.toString('base64'));
  t.notMatch(seedText, seedBytes.toString('hex'));
  t.match(seedText, /Encryption: scrypt-aes-256-gcm/);
  t.equal(statSync(seedFile).mode & 0o777, 0o600);

  const again = AuditKeys.load({ keysDir: dir, password: 'correct horse' });
  t.same(again.active().mldsa.seed, a.mldsa.seed);
  t.same(again.active().ed25519.publicKey, a.ed25519.publicKey);

  t.throws(() => AuditKeys.load({ keysDir: dir, password: 'wrong' }), /SERVICE_AUDIT_KEY_PASSWORD/);
  t.throws(() => AuditKeys.load({ keysDir: dir }), /SERVICE_AUDIT_KEY_PASSWORD/);

  // The seed file on its own: the Ed25519 key comes from the environment, so only it is read.
  const env = edPem().pem;
  t.throws(
    () => AuditKeys.load({ keysDir: dir, password: 'wrong', signingKeyPem: env }),
    /cannot decrypt the audit ML-DSA-65 seed .*SERVICE_AUDIT_KEY_PASSWORD/,
  );
  t.throws(
    () => AuditKeys.load({ keysDir: dir, signingKeyPem: env }),
    /encrypted: set SERVICE_AUDIT_KEY_PASSWORD/,
  );
});

t.test('SERVICE_AUDIT_SIGNING_KEY supplies the Ed25519 key', async (t) => {
  const dir = tempKeysDir(t);
  const env = edPem();
  let now = T0;
  const keys = AuditKeys.load({ keysDir: dir, signingKeyPem: env.pem, now: () => now });
  const a = keys.active();
  t.equal(toBase64(a.ed25519.publicKey), env.raw);
  t.equal(filesOf(dir, '.pem').length, 0, 'the PEM from the environment is not copied to disk');
  t.equal(filesOf(dir, '.seed').length, 1);
  t.ok(edSignsForDoc(keys));
  // A rotation replaces the ML-DSA-65 key alone: the Ed25519 key is the variable's.
  const mlBefore = a.mldsa;
  const rotation = keys.rotate();
  t.same(
    rotation.active.map((e) => e.alg),
    ['ml-dsa-65'],
  );
  t.same(
    rotation.retired.map((e) => [e.name, e.retired_at]),
    [[mlBefore.name, '2025-03-01T10:00:00.000Z']],
  );
  t.same(
    rotation.kept.map((e) => [e.alg, e.source, e.public_key]),
    [['ed25519', 'env', env.raw]],
  );
  t.equal(keys.active().ed25519.name, a.ed25519.name, 'the Ed25519 key stays');
  t.not(keys.active().mldsa.name, mlBefore.name);
  t.equal(filesOf(dir, '.seed').length, 1, "the retired seed's file is deleted");
  t.equal(filesOf(dir, '.pem').length, 0);
  t.ok(edSignsForDoc(keys));
  const afterRotation = keys.active();

  // Newlines written as \n (env files) are accepted; same key, same name.
  const escaped = AuditKeys.load({ keysDir: dir, signingKeyPem: env.pem.replaceAll('\n', '\\n') });
  t.equal(escaped.active().ed25519.name, a.ed25519.name);
  t.same(escaped.active().mldsa.seed, afterRotation.mldsa.seed, 'the rotated key is loaded');
  t.equal(escaped.publicDocument().keys.length, 3);

  // A different key in the variable: the previous one is retired, still published.
  const other = edPem();
  now = T1;
  const changed = AuditKeys.load({ keysDir: dir, signingKeyPem: other.pem, now: () => now });
  t.equal(toBase64(changed.active().ed25519.publicKey), other.raw);
  const eds = changed.publicDocument().keys.filter((k) => k.alg === 'ed25519');
  t.same(
    eds.map((k) => [k.public_key, k.status, k.retired_at]),
    [
      [env.raw, 'retired', '2025-03-02T10:00:00.000Z'],
      [other.raw, 'active', null],
    ],
  );

  // The variable removed: a key is generated here, the environment one stays published.
  const generated = AuditKeys.load({ keysDir: dir, now: () => now });
  t.equal(filesOf(dir, '.pem').length, 1);
  t.equal(generated.publicDocument().keys.filter((k) => k.alg === 'ed25519').length, 3);
  t.notOk([env.raw, other.raw].includes(toBase64(generated.active().ed25519.publicKey)));
  t.ok(edSignsForDoc(generated));
  const both = generated.rotate();
  t.same(
    both.active.map((e) => e.alg),
    ['ed25519', 'ml-dsa-65'],
    'a generated Ed25519 key is rotated with the ML-DSA-65 one',
  );
  t.same(both.kept, []);
  t.equal(generated.publicDocument().keys.length, 7);
});

t.test('an encrypted SERVICE_AUDIT_SIGNING_KEY is decrypted with the password', async (t) => {
  const dir = tempKeysDir(t);
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const pem = privateKey
    .export({ type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase: 'pw' })
    .toString();
  const keys = AuditKeys.load({ keysDir: dir, signingKeyPem: pem, password: 'pw' });
  t.equal(
    toBase64(keys.active().ed25519.publicKey),
    Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url').toString('base64'),
  );
  t.throws(
    () => AuditKeys.load({ keysDir: tempKeysDir(t), signingKeyPem: pem }),
    /SERVICE_AUDIT_SIGNING_KEY .*encrypted: set SERVICE_AUDIT_KEY_PASSWORD/,
  );
  t.throws(
    () => AuditKeys.load({ keysDir: tempKeysDir(t), signingKeyPem: pem, password: 'nope' }),
    /SERVICE_AUDIT_SIGNING_KEY .*is SERVICE_AUDIT_KEY_PASSWORD right/,
  );
});

t.test('a SERVICE_AUDIT_SIGNING_KEY that is not an Ed25519 private key is refused', async (t) => {
  const dir = tempKeysDir(t);
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  t.throws(
    () =>
      AuditKeys.load({
        keysDir: dir,
        signingKeyPem: rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
      }),
    /SERVICE_AUDIT_SIGNING_KEY must be an Ed25519 private key; this one is rsa/,
  );
  const ed = generateKeyPairSync('ed25519');
  t.throws(
    () =>
      AuditKeys.load({
        keysDir: dir,
        signingKeyPem: ed.publicKey.export({ type: 'spki', format: 'pem' }) as string,
      }),
    /SERVICE_AUDIT_SIGNING_KEY is not a readable private key PEM/,
  );
  t.throws(() => AuditKeys.load({ keysDir: dir, signingKeyPem: 'not a pem' }), /SERVICE_AUDIT_SIGNING_KEY/);
  t.notOk(existsSync(join(auditDir(dir), 'keys.json')), 'nothing was written');
});

t.test('tampered or swapped key files are detected on load', async (t) => {
  const dir = tempKeysDir(t);
  const keys = AuditKeys.load({ keysDir: dir });
  const other = tempKeysDir(t);
  AuditKeys.load({ keysDir: other });
  // Put another installation's seed under this installation's name.
  const mine = join(auditDir(dir), `${keys.active().mldsa.name}.seed`);
  const theirs = filesOf(other, '.seed')[0] as string;
  writeFileSync(mine, readFileSync(theirs));
  t.throws(() => AuditKeys.load({ keysDir: dir }), /does not match the public key recorded/);
  writeFileSync(mine, 'garbage\n');
  t.throws(() => AuditKeys.load({ keysDir: dir }), /is not a GOVGATE ML-DSA-65 SEED file/);
  writeFileSync(join(auditDir(dir), 'keys.json'), '{"v":1}');
  t.throws(() => AuditKeys.load({ keysDir: dir }), /is not an audit key index/);
});

t.test('a password set after the first start encrypts the keys made before it', async (t) => {
  const dir = tempKeysDir(t);
  const plain = AuditKeys.load({ keysDir: dir, now: () => T0 });
  MandateKeys.load(dir);
  const pems = [
    ...filesOf(dir, '.pem'),
    ...readdirSync(join(dir, MANDATE_KEYS_FOLDER))
      .filter((f) => f.endsWith('.pem'))
      .map((f) => join(dir, MANDATE_KEYS_FOLDER, f)),
  ];
  const seedFile = filesOf(dir, '.seed')[0] as string;
  t.equal(pems.length, 3, 'the audit key and the mandate keys (active and next)');
  for (const p of pems)
    t.match(readFileSync(p, 'utf8'), /^-----BEGIN PRIVATE KEY-----/, 'in the clear at first');

  const sealed = AuditKeys.load({ keysDir: dir, password: 'set later' });
  MandateKeys.load(dir, 'set later');
  for (const p of pems) {
    t.match(readFileSync(p, 'utf8'), /^-----BEGIN ENCRYPTED PRIVATE KEY-----\n/, `${p} is encrypted now`);
    t.equal(statSync(p).mode & 0o777, 0o600);
  }
  t.match(readFileSync(seedFile, 'utf8'), /Encryption: scrypt-aes-256-gcm/, 'the seed too');
  t.notMatch(readFileSync(seedFile, 'utf8'), Buffer.from(plain.active().mldsa.seed).toString('base64'));
  t.same(sealed.active().mldsa.seed, plain.active().mldsa.seed, 'the same keys');
  t.same(sealed.active().ed25519.publicKey, plain.active().ed25519.publicKey);

  t.same(
    AuditKeys.load({ keysDir: dir, password: 'set later' }).active().mldsa.seed,
    plain.active().mldsa.seed,
  );
  t.throws(
    () => AuditKeys.load({ keysDir: dir }),
    /SERVICE_AUDIT_KEY_PASSWORD/,
    'now the password is needed',
  );
  t.throws(() => MandateKeys.load(dir), /SERVICE_AUDIT_KEY_PASSWORD/);
});

t.test('a key file that cannot be rewritten is left as it is, and the start goes on', async (t) => {
  const dir = tempKeysDir(t);
  const plain = AuditKeys.load({ keysDir: dir, now: () => T0 });
  const files = [...filesOf(dir, '.pem'), ...filesOf(dir, '.seed')];
  const before = files.map((f) => readFileSync(f, 'utf8'));
  // A directory where each rewrite's temporary file goes: the write fails, as on a read-only
  // mount (root, which runs the tests here, would write through a file mode).
  for (const f of files) mkdirSync(`${f}.tmp`);
  const again = AuditKeys.load({ keysDir: dir, password: 'set later' });
  t.same(again.active().mldsa.seed, plain.active().mldsa.seed, 'loaded');
  t.same(
    files.map((f) => readFileSync(f, 'utf8')),
    before,
    'the files are as they were',
  );
});
