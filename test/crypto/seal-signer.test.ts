import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import type { Test } from 'tap';
import t from 'tap';
import type { SigningKeyDocument } from '../../src/audit/types.js';
import {
  checkpointOrigin,
  formatCheckpoint,
  type NoteVerifier,
  noteVerifier,
  parseNote,
  toHex,
  verifyNote,
} from '../../src/core/chain/index.js';
import { AuditKeys } from '../../src/crypto/audit-keys.js';
import { WorkerSealSigner } from '../../src/crypto/seal-signer.js';
import { threadNices } from '../helpers/threads.js';

const REAL_WORKER = new URL('../../src/crypto/mldsa-worker.js', import.meta.url);

function tempKeysDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'govgate-seal-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

async function startSigner(t: Test, keys: AuditKeys): Promise<WorkerSealSigner> {
  const signer = await WorkerSealSigner.start(keys);
  t.teardown(() => signer.close());
  return signer;
}

function body(size: number, org = 'org_demo'): string {
  return formatCheckpoint({
    origin: checkpointOrigin(org),
    size,
    rootHash: new Uint8Array(randomBytes(32)),
    head: randomBytes(32).toString('hex'),
  });
}

/** Verifiers as an external auditor builds them: from the published document only. */
function verifiersFrom(doc: SigningKeyDocument): NoteVerifier[] {
  return doc.keys.map((k) => {
    const v = noteVerifier(k.name, k.alg, new Uint8Array(Buffer.from(k.public_key, 'base64')));
    if (toHex(v.keyId) !== k.key_id) throw new Error(`key_id of ${k.name} is not its C2SP key ID`);
    return v;
  });
}

function lines(note: string): string[] {
  return note.slice(note.lastIndexOf('\n\n') + 2, -1).split('\n');
}

t.test('a signed seal carries both signatures and verifies with the published keys', async (t) => {
  const keys = AuditKeys.load({ keysDir: tempKeysDir(t) });
  const signer = await startSigner(t, keys);
  const text = body(3);
  const note = await signer.sign(text);
  t.ok(note.startsWith(`${text}\n`), 'the body, then a blank line');
  const sigs = lines(note);
  t.equal(sigs.length, 2);
  t.match(sigs[0], new RegExp(`^\u2014 ${keys.active().ed25519.name} `));
  t.match(sigs[1], new RegExp(`^\u2014 ${keys.active().mldsa.name} `));
  const parsed = parseNote(note);
  t.equal(parsed.signatures[0]?.signature.length, 64);
  t.equal(parsed.signatures[1]?.signature.length, 3309);
  t.ok(
    ml_dsa65.verify(
      parsed.signatures[1]?.signature as Uint8Array,
      Buffer.from(text),
      keys.active().mldsa.publicKey,
    ),
  );

  t.same(signer.publicDocument(), keys.publicDocument());
  const verifiers = verifiersFrom(signer.publicDocument());
  const res = verifyNote(note, verifiers);
  t.ok(res.ok);
  if (res.ok) t.same(res.verified.map((v) => v.alg).sort(), ['ed25519', 'ml-dsa-65']);

  t.match(
    verifyNote(
      note,
      verifiers.filter((v) => v.alg === 'ed25519'),
    ),
    {
      ok: false,
      error: 'signature_missing',
    },
  );
  const edOnly = `${text}\n${sigs[0]}\n`;
  t.match(
    verifyNote(edOnly, verifiers),
    { ok: false, error: 'signature_missing' },
    'one signature is not enough',
  );
  t.match(verifyNote(note.replace('org_demo', 'org_other'), verifiers), {
    ok: false,
    error: 'signature_invalid',
  });
});

t.test("a seal whose ML-DSA line is another note's fails", async (t) => {
  const keys = AuditKeys.load({ keysDir: tempKeysDir(t) });
  const signer = await startSigner(t, keys);
  const [a, b] = await Promise.all([signer.sign(body(10)), signer.sign(body(11))]);
  const verifiers = verifiersFrom(keys.publicDocument());
  t.ok(verifyNote(a, verifiers).ok);
  t.ok(verifyNote(b, verifiers).ok);
  const la = lines(a);
  const lb = lines(b);
  const swapped = `${a.slice(0, a.lastIndexOf('\n\n') + 2)}${la[0]}\n${lb[1]}\n`;
  t.not(swapped, a);
  t.match(verifyNote(swapped, verifiers), { ok: false, error: 'signature_invalid' });
  const swappedEd = `${a.slice(0, a.lastIndexOf('\n\n') + 2)}${lb[0]}\n${la[1]}\n`;
  t.match(verifyNote(swappedEd, verifiers), { ok: false, error: 'signature_invalid' });
});

t.test('a rotation is picked up by the next sign; old seals keep verifying', async (t) => {
  const keys = AuditKeys.load({ keysDir: tempKeysDir(t) });
  const signer = await startSigner(t, keys);
  const before = await signer.sign(body(1));
  const oldDoc = keys.publicDocument();
  const oldNames = [keys.active().ed25519.name, keys.active().mldsa.name];
  keys.rotate();
  const after = await signer.sign(body(2));
  t.same(
    lines(after).map((l) => l.split(' ')[1]),
    [keys.active().ed25519.name, keys.active().mldsa.name],
  );
  t.notSame(
    lines(after).map((l) => l.split(' ')[1]),
    oldNames,
  );
  const verifiers = verifiersFrom(signer.publicDocument());
  t.ok(verifyNote(before, verifiers).ok, 'the old seal verifies with the retired keys');
  t.ok(verifyNote(after, verifiers).ok);
  t.match(verifyNote(after, verifiersFrom(oldDoc)), { ok: false, error: 'signature_missing' });
});

t.test('requests are pipelined; throughput and event-loop lag', async (t) => {
  const keys = AuditKeys.load({ keysDir: tempKeysDir(t) });
  const signer = await startSigner(t, keys);
  const verifiers = verifiersFrom(keys.publicDocument());
  await signer.sign(body(1)); // warm up the worker's JIT

  // Throughput with 4 in flight.
  const total = 40;
  const notes: string[] = [];
  let next = 0;
  let maxInFlight = 0;
  const t0 = performance.now();
  const lane = async (): Promise<void> => {
    while (next < total) {
      const size = ++next;
      const p = signer.sign(body(size));
      maxInFlight = Math.max(maxInFlight, signer.inFlight);
      notes.push(await p);
    }
  };
  await Promise.all([lane(), lane(), lane(), lane()]);
  const ms = performance.now() - t0;
  t.equal(notes.length, total);
  t.equal(maxInFlight, 4, 'four requests were in flight at once');
  t.ok(
    notes.every((n) => verifyNote(n, verifiers).ok),
    'every pipelined note verifies (answers matched by id)',
  );
  t.equal(new Set(notes.map((n) => n.split('\n')[1])).size, total, 'each answer went to its own request');
  t.equal(signer.inFlight, 0);
  t.comment(
    `sign() with 4 in flight: ${((total * 1000) / ms).toFixed(0)} notes/s ` +
      `(${(ms / total).toFixed(2)} ms each)`,
  );

  // Event-loop lag while 20 notes are signed.
  const msg = new TextEncoder().encode(body(1));
  const s0 = performance.now();
  for (let i = 0; i < 5; i++) ml_dsa65.sign(msg, keys.active().mldsa.secretKey);
  const inline = (performance.now() - s0) / 5;
  let ticks = 0;
  let maxGap = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
    ticks++;
  }, 1);
  const l0 = performance.now();
  const batch = await Promise.all(Array.from({ length: 20 }, (_, i) => signer.sign(body(i + 1))));
  const elapsed = performance.now() - l0;
  clearInterval(timer);
  t.equal(batch.length, 20);
  t.ok(ticks > 0, 'timers ran while the notes were being signed');
  t.comment(
    `20 notes in ${elapsed.toFixed(1)} ms; 1 ms timer fired ${ticks} times, ` +
      `max gap ${maxGap.toFixed(2)} ms ` +
      `(one ML-DSA-65 signature on the main thread would block it ${inline.toFixed(2)} ms)`,
  );
});

t.test('a dead worker fails its pending requests and the next sign restarts it', async (t) => {
  const dir = tempKeysDir(t);
  const marker = join(dir, 'crashed-once');
  // A worker that answers ready, then exits on its third request; once the marker exists it is
  // the real worker.
  const code = `
import { parentPort } from 'node:worker_threads';
import { existsSync, writeFileSync } from 'node:fs';
if (existsSync(${JSON.stringify(marker)})) {
  await import(${JSON.stringify(REAL_WORKER.href)});
} else {
  writeFileSync(${JSON.stringify(marker)}, '');
  let n = 0;
  parentPort.on('message', (m) => { if (m && typeof m.id === 'number' && ++n === 3) process.exit(3); });
  parentPort.postMessage({ ready: true });
}`;
  const keys = AuditKeys.load({ keysDir: dir });
  const signer = await WorkerSealSigner.start(keys, {
    workerUrl: new URL(`data:text/javascript,${encodeURIComponent(code)}`),
  });
  t.teardown(() => signer.close());
  const pending = [signer.sign(body(1)), signer.sign(body(2)), signer.sign(body(3))];
  const results = await Promise.allSettled(pending);
  t.same(
    results.map((r) => r.status),
    ['rejected', 'rejected', 'rejected'],
  );
  t.match((results[0] as PromiseRejectedResult).reason, { message: /worker exited \(code 3\)/ });
  t.equal(signer.inFlight, 0);
  t.ok(existsSync(marker));

  const note = await signer.sign(body(4));
  t.ok(verifyNote(note, verifiersFrom(keys.publicDocument())).ok, 'the restarted worker signs');
  t.ok(verifyNote(await signer.sign(body(5)), verifiersFrom(keys.publicDocument())).ok);
});

t.test('start fails clearly when the worker cannot start', async (t) => {
  const keys = AuditKeys.load({ keysDir: tempKeysDir(t) });
  await t.rejects(
    WorkerSealSigner.start(keys, {
      workerUrl: new URL(`data:text/javascript,${encodeURIComponent("throw new Error('boom');")}`),
    }),
    /the ML-DSA signing worker did not start: boom/,
  );
  await t.rejects(WorkerSealSigner.start(keys, { threads: 0 }), RangeError);
});

t.test('several worker threads share the load', async (t) => {
  const keys = AuditKeys.load({ keysDir: tempKeysDir(t) });
  const signer = await WorkerSealSigner.start(keys, { threads: 2 });
  t.teardown(() => signer.close());
  const verifiers = verifiersFrom(keys.publicDocument());
  const notes = await Promise.all(Array.from({ length: 8 }, (_, i) => signer.sign(body(i + 1))));
  t.ok(notes.every((n) => verifyNote(n, verifiers).ok));
  keys.rotate();
  const after = await Promise.all(Array.from({ length: 4 }, (_, i) => signer.sign(body(i + 1))));
  const v2 = verifiersFrom(keys.publicDocument());
  t.ok(
    after.every((n) => verifyNote(n, v2).ok && n.includes(keys.active().mldsa.name)),
    'both threads rekeyed',
  );
});

t.test('close rejects pending and later requests; bad bodies are refused', async (t) => {
  const keys = AuditKeys.load({ keysDir: tempKeysDir(t) });
  const signer = await WorkerSealSigner.start(keys);
  await t.rejects(signer.sign('no final newline'), /newline/);
  const pending = t.rejects(signer.sign(body(1)), /closed/);
  await signer.close();
  await pending;
  await t.rejects(signer.sign(body(2)), /closed/);
  await signer.close();
});

t.test(
  'the signing thread runs five steps nicer than the event loop, which keeps its priority (Linux)',
  { skip: process.platform !== 'linux' },
  async (t) => {
    const before = threadNices();
    const base = before.get(process.pid) as number;
    const signer = await startSigner(t, AuditKeys.load({ keysDir: tempKeysDir(t) }));
    t.ok(verifyNote(await signer.sign(body(1)), verifiersFrom(signer.publicDocument())).ok);
    const after = threadNices();
    const fresh = [...after].filter(([tid]) => !before.has(tid)).map(([, nice]) => nice);
    // Starting a worker may also start a runtime thread of its own (at the process's niceness).
    t.equal(fresh.filter((n) => n === Math.min(19, base + 5)).length, 1, 'the new signer thread');
    t.equal(after.get(process.pid), base, 'the main thread keeps its priority');
  },
);
