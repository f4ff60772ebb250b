import { createPublicKey, verify as cryptoVerify } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import {
  assembleNote,
  ChainError,
  checkpointOrigin,
  formatCheckpoint,
  fromBase64,
  keyIdFor,
  type NoteVerifier,
  noteVerifier,
  parseCheckpoint,
  parseNote,
  SEAL_ALG_LINE,
  signNote,
  toHex,
  verifyNote,
} from '../../../src/core/chain/index.js';
import { makeKeys, orgKeys } from './helpers.js';

// golang.org/x/mod/sumdb/note's documented example key and signed note (Ed25519, type 0x01).
const GO_VKEY = 'ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW';
const GO_NOTE =
  'If you think cryptography is the answer to your problem,\n' +
  "then you don't know what your problem is.\n" +
  '\n' +
  '— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n';

t.test('interoperates with the Go sumdb/note example', async (t) => {
  const raw = fromBase64(GO_VKEY) as Uint8Array;
  t.equal(raw[0], 0x01);
  const pk = raw.subarray(1);
  t.equal(toHex(keyIdFor('PeterNeumann', 'ed25519', pk)), 'c74f20a3');
  const v = noteVerifier('PeterNeumann', 'ed25519', pk);
  const res = verifyNote(GO_NOTE, [v], { require: ['ed25519'] });
  t.ok(res.ok);
  if (res.ok) t.equal(res.body.split('\n')[0], 'If you think cryptography is the answer to your problem,');
  t.notOk(verifyNote(GO_NOTE.replace('cryptography', 'Cryptography'), [v], { require: ['ed25519'] }).ok);
  // A govgate seal needs both algorithms: Ed25519 alone is not enough.
  t.match(verifyNote(GO_NOTE, [v]), { ok: false, error: 'signature_missing' });
});

const BODY = formatCheckpoint({
  origin: checkpointOrigin('org_1'),
  size: 42,
  rootHash: new Uint8Array(32).fill(7),
  head: 'ab'.repeat(32),
});

t.test('checkpoint body format', async (t) => {
  t.equal(
    BODY,
    'govgate/org_1\n42\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n' +
      `head ${'ab'.repeat(32)}\nalg ed25519+ml-dsa-65\n`,
  );
  const cp = parseCheckpoint(BODY);
  t.equal(cp.origin, 'govgate/org_1');
  t.equal(cp.size, 42);
  t.same(cp.rootHash, new Uint8Array(32).fill(7));
  t.equal(cp.head, 'ab'.repeat(32));
  t.equal(cp.alg, SEAL_ALG_LINE);
  for (const bad of [
    'x\n042\nAA==\n',
    'x\n1\nAA==\n',
    'x\n1\n',
    'x\n-1\nBwcH\n',
    `${BODY}\n`,
    BODY.slice(0, -1),
  ]) {
    t.throws(() => parseCheckpoint(bad), { code: 'invalid_checkpoint' }, JSON.stringify(bad));
  }
  t.throws(() =>
    formatCheckpoint({ origin: 'a\nb', size: 1, rootHash: new Uint8Array(32), head: 'ab'.repeat(32) }),
  );
});

t.test('dual-signed seal: round trip and format', async (t) => {
  const keys = orgKeys();
  const note = signNote(BODY, keys.signers);
  const lines = note.split('\n');
  t.equal(note.slice(0, BODY.length + 1), `${BODY}\n`, 'body, then a blank line');
  const sigLines = lines.filter((l) => l.startsWith('\u2014 '));
  t.equal(sigLines.length, 2);
  for (const l of sigLines) t.match(l, /^— govgate\/org_test [A-Za-z0-9+/]+=*$/);

  const parsed = parseNote(note);
  t.equal(parsed.body, BODY);
  t.same(parsed.signatures[0]?.keyId, keys.signers[0]?.keyId);
  t.equal(parsed.signatures[0]?.signature.length, 64);
  t.equal(parsed.signatures[1]?.signature.length, 3309);

  const res = verifyNote(note, keys.verifiers);
  t.ok(res.ok);
  if (res.ok) t.same(res.verified.map((v) => v.alg).sort(), ['ed25519', 'ml-dsa-65']);

  // assembleNote with precomputed signatures gives the same note (both signers deterministic).
  const msg = new TextEncoder().encode(BODY);
  const pre = keys.signers.map((s) => ({ name: s.name, keyId: s.keyId, signature: s.sign(msg) }));
  t.equal(assembleNote(BODY, pre), note);
});

t.test('tampering and key mismatches', async (t) => {
  const keys = orgKeys();
  const note = signNote(BODY, keys.signers);
  const [sigEd, sigPq] = note.slice(BODY.length + 1).split('\n');

  t.match(verifyNote(note.replace('\n42\n', '\n43\n'), keys.verifiers), {
    ok: false,
    error: 'signature_invalid',
  });
  t.match(verifyNote(`${BODY}\n${sigEd}\n`, keys.verifiers), { ok: false, error: 'signature_missing' });
  t.match(verifyNote(`${BODY}\n${sigPq}\n`, keys.verifiers), { ok: false, error: 'signature_missing' });

  // A signature moved from another note (swap): same key, wrong message.
  const other = signNote(BODY.replace('\n42\n', '\n41\n'), keys.signers);
  const otherEd = other.split('\n').find((l) => l.startsWith('\u2014 '));
  t.match(verifyNote(`${BODY}\n${otherEd}\n${sigPq}\n`, keys.verifiers), {
    ok: false,
    error: 'signature_invalid',
  });

  // Signatures by keys nobody trusts are ignored; an otherwise valid note still verifies.
  const stranger = makeKeys('govgate/org_test', 40);
  const withStranger = `${note}${signNote(BODY, stranger.signers).slice(BODY.length + 1)}`;
  t.ok(verifyNote(withStranger, keys.verifiers).ok);
  // But the stranger's keys alone do not verify against ours.
  t.match(verifyNote(signNote(BODY, stranger.signers), keys.verifiers), {
    ok: false,
    error: 'signature_missing',
  });

  // Flipping one bit of the ML-DSA signature fails it.
  const parsed = parseNote(note);
  const pq = parsed.signatures[1];
  if (pq === undefined) throw new Error('missing signature');
  const flipped = new Uint8Array(pq.signature);
  flipped[100] = (flipped[100] as number) ^ 1;
  const bad = assembleNote(BODY, [
    parsed.signatures[0] as (typeof parsed.signatures)[0],
    { ...pq, signature: flipped },
  ]);
  t.match(verifyNote(bad, keys.verifiers), { ok: false, error: 'signature_invalid' });
});

t.test('a verifier may bring its own (native) implementation', async (t) => {
  const keys = orgKeys();
  const note = signNote(BODY, keys.signers);
  const [edKey, pqKey] = keys.verifiers as [NoteVerifier, NoteVerifier];
  const native = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(edKey.publicKey).toString('base64url') },
    format: 'jwk',
  });
  const nativeEd: NoteVerifier = { ...edKey, verify: (sig, msg) => cryptoVerify(null, msg, native, sig) };
  t.ok(verifyNote(note, [nativeEd, pqKey]).ok);
  t.match(verifyNote(note.replace('\n42\n', '\n43\n'), [nativeEd, pqKey]), {
    ok: false,
    error: 'signature_invalid',
  });
  const throwing: NoteVerifier = {
    ...edKey,
    verify: () => {
      throw new Error('boom');
    },
  };
  t.match(verifyNote(note, [throwing, pqKey]), { ok: false, error: 'signature_invalid' });
});

t.test('malformed notes', async (t) => {
  const keys = orgKeys();
  const note = signNote(BODY, keys.signers);
  const cases = [
    BODY,
    `${BODY}\n`,
    note.slice(0, -1),
    note.replace('\u2014', '-'),
    note.replace('govgate/org_test ', 'govgate/org test '),
    `${BODY}\n${note.slice(BODY.length + 1).split('\n')[0]}\n\u2014 govgate/org_test ***\n`,
    `${BODY}\n\u2014 k AAAA\n`,
    note.replace('\n42\n', '\n4\t2\n'),
  ];
  for (const c of cases)
    t.match(verifyNote(c, keys.verifiers), { ok: false, error: 'malformed' }, JSON.stringify(c.slice(-30)));
  t.throws(() => parseNote(BODY), ChainError);
  t.throws(() => assembleNote('no newline', []), { code: 'invalid_note' });
  t.throws(
    () => assembleNote(BODY, [{ name: 'a+b', keyId: new Uint8Array(4), signature: new Uint8Array(1) }]),
    {
      code: 'invalid_key_name',
    },
  );
  t.throws(() => keyIdFor('n', 'ml-dsa-65', new Uint8Array(32)), { code: 'invalid_key_id' });
});

t.test('key ids: name, type and key all matter', async (t) => {
  const a = new Uint8Array(32).fill(1);
  t.equal(keyIdFor('n', 'ed25519', a).length, 4);
  t.not(toHex(keyIdFor('n', 'ed25519', a)), toHex(keyIdFor('m', 'ed25519', a)));
  t.not(toHex(keyIdFor('n', 'ed25519', a)), toHex(keyIdFor('n', 'ed25519', new Uint8Array(32).fill(2))));
  const pq = orgKeys().verifiers[1];
  if (pq === undefined) throw new Error('missing key');
  t.same(keyIdFor(pq.name, 'ml-dsa-65', pq.publicKey), pq.keyId);
});

t.test('parseNote round-trips arbitrary bodies and names', async (t) => {
  const line = fc.string({ unit: 'grapheme', maxLength: 20 }).filter((s) => !/[\u0000-\u001f]/.test(s));
  const name = fc.string({ minLength: 1, maxLength: 12 }).filter((s) => !/[\s+\u0000-\u001f]/u.test(s));
  fc.assert(
    fc.property(
      fc.array(line, { minLength: 1, maxLength: 5 }),
      name,
      fc.uint8Array({ minLength: 1, maxLength: 80 }),
      (ls, n, sig) => {
        const body = `${ls.join('\n')}\n`;
        const note = assembleNote(body, [{ name: n, keyId: Uint8Array.of(1, 2, 3, 4), signature: sig }]);
        const p = parseNote(note);
        return (
          p.body === body && p.signatures[0]?.name === n && toHex(p.signatures[0].signature) === toHex(sig)
        );
      },
    ),
    { seed: 2014, numRuns: 300 },
  );
  t.pass('round trip');
});
