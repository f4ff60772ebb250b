import { createPublicKey, verify as cryptoVerify } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import t from 'tap';
import {
  type ChainEvent,
  ChainVerifier,
  formatCheckpoint,
  GENESIS,
  hashEvent,
  inclusionProof,
  leafHash,
  linkEvent,
  MerkleBuilder,
  type NodeReader,
  type NoteVerifier,
  personalField,
  type SealRecord,
  verifyInclusion,
  verifyNote,
} from '../../../src/core/chain/index.js';
import { draft, ORIGIN, orgKeys, sealNote } from './helpers.js';

// Measurements only (printed, never asserted): timing depends on the machine. Both wall time and
// this process's CPU time are printed; on a shared machine the CPU figure is the steadier one.
const N = 50_000;
const SEAL_EVERY = 1_000;

const events: ChainEvent[] = [];
const seals = new Map<number, SealRecord>();
const nodes = new Map<number, Uint8Array>();
const nodeKey = (level: number, index: number): number => index * 64 + level;
const tree = new MerkleBuilder();
let prev = GENESIS;
for (let seq = 1; seq <= N; seq++) {
  const e = linkEvent(
    prev,
    draft(seq, {
      details: { latency_ms: seq % 97, route: '/v1/chat/completions', request_id: `req_${seq.toString(36)}` },
      detections: seq % 5 === 0 ? [{ type: 'EMAIL', action: 'redacted', count: 1 }] : [],
      personal:
        seq % 4 === 0 ? { end_user: personalField('end_user', `user${seq}@example.com`, `s${seq}`) } : null,
    }),
  );
  prev = e.hash;
  events.push(JSON.parse(JSON.stringify(e)) as ChainEvent); // as read back from storage
  for (const n of tree.append(leafHash(e.hash))) nodes.set(nodeKey(n.level, n.index), n.hash);
  if (seq % SEAL_EVERY === 0) {
    const body = formatCheckpoint({ origin: ORIGIN, size: seq, rootHash: tree.root(), head: e.hash });
    seals.set(seq, { seq: seq / SEAL_EVERY, size: seq, note: sealNote(body) });
  }
}
function measure(run: () => void): { wallMs: number; cpuMs: number } {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  run();
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  return { wallMs, cpuMs: (cpu.user + cpu.system) / 1000 };
}

function rate(n: number, m: { wallMs: number; cpuMs: number }): string {
  const perSec = (ms: number): number => Math.round((n / ms) * 1000);
  const wall = `${perSec(m.wallMs)}/s wall (${m.wallMs.toFixed(0)} ms)`;
  return `${wall}, ${perSec(m.cpuMs)}/s CPU (${m.cpuMs.toFixed(0)} ms)`;
}

const avgBytes = Math.round(events.slice(0, 1000).reduce((a, e) => a + JSON.stringify(e).length, 0) / 1000);

t.test('hashEvent throughput', async (t) => {
  let ok = 0;
  const m = measure(() => {
    for (const e of events) if (hashEvent(e.prev_hash, e) === e.hash) ok++;
  });
  t.equal(ok, N);
  t.comment(`hashEvent over ${N} events of ~${avgBytes} B: ${rate(N, m)}`);
});

t.test('ChainVerifier throughput (hash, links, commitments, Merkle, 50 dual-signed seals)', async (t) => {
  const v = new ChainVerifier({ verifiers: orgKeys().verifiers, origin: ORIGIN });
  const m = measure(() => {
    for (const e of events) {
      v.pushEvent(e);
      const s = seals.get(e.seq);
      if (s !== undefined) v.pushSeal(s);
    }
  });
  const r = v.result();
  t.equal(r.status, 'intact');
  t.equal(r.valid, N);
  t.comment(`ChainVerifier over ${N} events: ${rate(N, m)}`);
});

t.test('seal verification cost (Ed25519 + ML-DSA-65, noble; and with a native Ed25519 hook)', async (t) => {
  const note = (seals.get(SEAL_EVERY) as SealRecord).note;
  const [edKey, pqKey] = orgKeys().verifiers as [NoteVerifier, NoteVerifier];
  const native = createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(edKey.publicKey).toString('base64url') },
    format: 'jwk',
  });
  const nativeEd: NoteVerifier = { ...edKey, verify: (sig, msg) => cryptoVerify(null, msg, native, sig) };
  const runs = 10;
  let ok = 0;
  const pure = measure(() => {
    for (let i = 0; i < runs; i++) if (verifyNote(note, [edKey, pqKey]).ok) ok++;
  });
  const hooked = measure(() => {
    for (let i = 0; i < runs; i++) if (verifyNote(note, [nativeEd, pqKey]).ok) ok++;
  });
  t.equal(ok, 2 * runs);
  t.comment(
    `verifyNote per seal: ${(pure.cpuMs / runs).toFixed(2)} ms CPU pure JS, ` +
      `${(hooked.cpuMs / runs).toFixed(2)} ms CPU with native Ed25519 (one seal per ${SEAL_EVERY} events)`,
  );
});

t.test('inclusion proof verification', async (t) => {
  const reader: NodeReader = (level, index) => nodes.get(nodeKey(level, index));
  const root = tree.root();
  const samples = 2_000;
  const proofs = Array.from({ length: samples }, (_, i) => {
    const index = (i * 7919) % N;
    return {
      index,
      leaf: leafHash((events[index] as ChainEvent).hash),
      proof: inclusionProof(index, N, reader),
    };
  });
  let ok = 0;
  const m = measure(() => {
    for (const p of proofs) if (verifyInclusion(p.leaf, p.index, N, p.proof, root)) ok++;
  });
  t.equal(ok, samples);
  const us = (ms: number): string => ((ms * 1000) / samples).toFixed(1);
  t.comment(
    `verifyInclusion (${proofs[0]?.proof.length} hashes, tree of ${N}): ` +
      `${us(m.wallMs)} µs wall, ${us(m.cpuMs)} µs CPU per proof`,
  );
});
