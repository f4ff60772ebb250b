import { spawn } from 'node:child_process';
import { sign as cryptoSign, generateKeyPairSync } from 'node:crypto';
import { rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { ml_dsa65 } from '@noble/post-quantum/ml-dsa.js';
import t from 'tap';
import type { SigningKeyDocument, StoredSeal } from '../../src/audit/types.js';
import { verifyFile } from '../../src/audit/verify-file.js';
import { runVerify, type VerifyIO } from '../../src/cli-verify.js';
import {
  bridgeRecord,
  type ChainEvent,
  checkpointOrigin,
  ERASED,
  type EventDraft,
  formatCheckpoint,
  GENESIS,
  hashEvent,
  type IntegrityResult,
  keyIdFor,
  leafHash,
  linkEvent,
  MerkleBuilder,
  type NoteSigner,
  personalField,
  signNote,
  toHex,
} from '../../src/core/chain/index.js';
import { tempDir } from '../helpers/tmp.js';

// ---------------------------------------------------------------------------------------------
// Keys: Ed25519 from node:crypto, ML-DSA-65 from @noble/post-quantum, published as the
// SigningKeyDocument of GET /api/audit/signing-key.

const ORG = 'org_cli';
const ORIGIN = checkpointOrigin(ORG);

interface KeyPair {
  signers: NoteSigner[];
  doc: SigningKeyDocument['keys'][number][];
}

function makeKeyPair(name: string, seed: number, status: 'active' | 'retired'): KeyPair {
  const ed = generateKeyPairSync('ed25519');
  const edPublic = new Uint8Array(
    Buffer.from(ed.publicKey.export({ format: 'jwk' }).x as string, 'base64url'),
  );
  const pq = ml_dsa65.keygen(new Uint8Array(32).fill(seed));
  const edId = keyIdFor(name, 'ed25519', edPublic);
  const pqId = keyIdFor(name, 'ml-dsa-65', pq.publicKey);
  const meta = {
    name,
    status,
    created_at: '2025-01-01T00:00:00.000Z',
    retired_at: status === 'retired' ? '2025-06-01T00:00:00.000Z' : null,
  };
  return {
    signers: [
      { name, keyId: edId, sign: (m) => new Uint8Array(cryptoSign(null, m, ed.privateKey)) },
      { name, keyId: pqId, sign: (m) => ml_dsa65.sign(m, pq.secretKey) },
    ],
    doc: [
      {
        ...meta,
        alg: 'ed25519',
        key_id: toHex(edId),
        public_key: Buffer.from(edPublic).toString('base64'),
      },
      {
        ...meta,
        alg: 'ml-dsa-65',
        key_id: toHex(pqId),
        public_key: Buffer.from(pq.publicKey).toString('base64'),
      },
    ],
  };
}

function keysDocument(...pairs: KeyPair[]): SigningKeyDocument {
  return {
    algorithms: ['ed25519', 'ml-dsa-65'],
    keys: pairs.flatMap((p) => p.doc),
    instructions: ['govgate verify FILE.jsonl --keys signing-key.json'],
  };
}

const KEYS = makeKeyPair(ORIGIN, 3, 'active');

// ---------------------------------------------------------------------------------------------
// Chains, written as the export writes them: one event per line, `{"_seal": …}` right after the
// event it ends at.

const idOf = (seq: number): string => `ae_${seq.toString().padStart(6, '0')}`;

function draft(seq: number, personal: boolean): EventDraft {
  return {
    id: idOf(seq),
    org_id: ORG,
    seq,
    ts: new Date(Date.UTC(2025, 0, 1, 0, 0, seq)).toISOString(),
    event_type: 'llm.call',
    agent_id: 'agent-1',
    session_id: 'sess-1',
    task_id: null,
    pipeline_id: `pl_${seq}`,
    behavior_type: 'LLM_CALL',
    outcome: 'allow',
    reason: null,
    rule_id: null,
    provider: 'mock',
    model: 'mock-echo',
    usage: { prompt_tokens: 10, completion_tokens: 20, total_tokens: 30 },
    cost: 0.0003,
    detections: seq % 5 === 0 ? [{ type: 'EMAIL', action: 'redacted', count: 1 }] : [],
    details: { latency_ms: seq % 97, route: '/v1/chat/completions' },
    personal: personal
      ? {
          end_user: personalField('end_user', `user${seq}@example.com`, `salt-a-${seq}`),
          prompt: personalField('prompt', { text: `hello ${seq}` }, `salt-b-${seq}`),
        }
      : null,
    origin: null,
  };
}

interface Chain {
  lines: string[];
  events: ChainEvent[];
  /** Index in `lines` of each event, by seq. */
  lineOf: Map<number, number>;
  /** The Merkle compact range after each sealed seq (for bridges). */
  subtreesAt: Map<number, Uint8Array[]>;
  seals: Map<number, StoredSeal>;
}

interface ChainOpts {
  sealEvery: number;
  /** Signing keys per seal number (default KEYS). */
  keysFor?: (sealSeq: number) => KeyPair;
  origin?: string;
}

function buildChain(n: number, opts: ChainOpts): Chain {
  const tree = new MerkleBuilder();
  const lines: string[] = [];
  const events: ChainEvent[] = [];
  const lineOf = new Map<number, number>();
  const subtreesAt = new Map<number, Uint8Array[]>();
  const seals = new Map<number, StoredSeal>();
  let prev = GENESIS;
  let sealSeq = 0;
  for (let seq = 1; seq <= n; seq++) {
    const e = linkEvent(prev, draft(seq, seq % 3 === 0));
    prev = e.hash;
    tree.push(leafHash(e.hash));
    events.push(e);
    lineOf.set(seq, lines.length);
    lines.push(JSON.stringify(e));
    if (seq % opts.sealEvery === 0) {
      sealSeq++;
      const body = formatCheckpoint({
        origin: opts.origin ?? ORIGIN,
        size: seq,
        rootHash: tree.root(),
        head: e.hash,
      });
      const keys = opts.keysFor?.(sealSeq) ?? KEYS;
      const seal: StoredSeal = { seq: sealSeq, size: seq, note: signNote(body, keys.signers), ts: e.ts };
      seals.set(seq, seal);
      subtreesAt.set(seq, tree.subtrees());
      lines.push(JSON.stringify({ _seal: seal }));
    }
  }
  return { lines, events, lineOf, subtreesAt, seals };
}

const dir = tempDir('govgate-verify-');
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
let fileN = 0;
function writeLines(lines: readonly string[], name = `chain-${++fileN}.jsonl`): string {
  const path = join(dir, name);
  writeFileSync(path, lines.length === 0 ? '' : `${lines.join('\n')}\n`);
  return path;
}
function writeJson(value: unknown): string {
  const path = join(dir, `keys-${++fileN}.json`);
  writeFileSync(path, JSON.stringify(value));
  return path;
}

const keysPath = writeJson(keysDocument(KEYS));

interface Captured extends VerifyIO {
  out: string[];
  err: string[];
}
function captureIO(isTTY = false): Captured {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    isTTY,
    stdout: { write: (s: string) => out.push(s) },
    stderr: { write: (s: string) => err.push(s) },
  };
}

async function run(args: string[], isTTY = false): Promise<{ code: number; out: string; err: string }> {
  const io = captureIO(isTTY);
  const code = await runVerify(args, io);
  return { code, out: io.out.join(''), err: io.err.join('') };
}

async function runJson(files: string[], keys = keysPath): Promise<{ code: number; result: IntegrityResult }> {
  const r = await run([...files, '--keys', keys, '--json']);
  return { code: r.code, result: JSON.parse(r.out) as IntegrityResult };
}

const N = 12;
const base = buildChain(N, { sealEvery: 4 });
const head = (base.events[N - 1] as ChainEvent).hash;
const intactPath = writeLines(base.lines);
const INTACT: IntegrityResult = {
  status: 'intact',
  events: N,
  valid: N,
  broken: 0,
  broken_events: [],
  chain_length: N,
  current_head: head,
};
/** What --json prints for it: the integrity result and what the seals cover. */
const INTACT_JSON = {
  ...INTACT,
  origin: ORIGIN,
  sealed_through: N,
  unsealed_events: 0,
  erasure_authorities: 0,
  bridged_through: 0,
};

/** A copy of the base chain's lines with `edit` applied. */
function edited(edit: (lines: string[]) => void): string[] {
  const lines = [...base.lines];
  edit(lines);
  return lines;
}
const at = (seq: number): number => base.lineOf.get(seq) as number;
const sealLine = (seq: number): number => at(seq) + 1;

// ---------------------------------------------------------------------------------------------

t.test('an intact chain: exit 0, --json is exactly the integrity result', async (t) => {
  const { code, result } = await runJson([intactPath]);
  t.equal(code, 0);
  t.strictSame(result, INTACT_JSON);
  t.strictSame(Object.keys(result).sort(), Object.keys(INTACT_JSON).sort(), 'no extra fields');

  const human = await run([intactPath, '--keys', keysPath]);
  t.equal(human.code, 0);
  t.match(human.out, /status\s+INTACT/);
  t.match(human.out, /events\s+12\n/);
  t.match(human.out, /seals\s+3 checked/);
  t.match(human.out, /sealed\s+through seq 12\n/);
  t.match(human.out, /unsealed\s+0\n/);
  t.notMatch(human.out, /NOT PROVEN/);
  t.match(human.out, new RegExp(`head\\s+${head}`));
  t.match(human.out, new RegExp(`origin\\s+${ORIGIN}`));
  t.notMatch(human.out, /findings/);
  t.equal(human.err, '', 'no progress bar when stderr is not a terminal');
});

t.test('verifyFile reports lines, seals and the derived origin', async (t) => {
  const calls: Array<[number, number, number]> = [];
  const r = await verifyFile(intactPath, keysDocument(KEYS), {
    onProgress: (b, total, lines) => calls.push([b, total, lines]),
  });
  t.equal(r.status, 'intact');
  t.equal(r.lines, base.lines.length);
  t.equal(r.seals_checked, 3);
  t.equal(r.origin, ORIGIN);
  t.strictSame(r.unparseable, []);
  const size = statSync(intactPath).size;
  t.strictSame(calls.at(-1), [size, size, base.lines.length], 'progress ends at the file size');
});

t.test('an empty file is empty, exit 0', async (t) => {
  const { code, result } = await runJson([writeLines([])]);
  t.equal(code, 0);
  t.equal(result.status, 'empty');
  t.equal(result.events, 0);
  t.equal(result.current_head, GENESIS);
});

t.test('a tampered field: content_modified at its line, exit 1', async (t) => {
  const path = writeLines(
    edited((l) => {
      const e = JSON.parse(l[at(5)] as string) as ChainEvent;
      e.outcome = 'block';
      l[at(5)] = JSON.stringify(e);
    }),
  );
  const { code, result } = await runJson([path]);
  t.equal(code, 1);
  t.equal(result.status, 'compromised');
  t.strictSame(result.broken_events, [{ line: 5, event_id: idOf(5), reason: 'content_modified' }]);
  t.equal(result.broken, 1);
  t.equal(result.valid, N - 1);

  const human = await run([path, '--keys', keysPath]);
  t.equal(human.code, 1);
  t.match(human.out, /status\s+COMPROMISED/);
  t.match(human.out, new RegExp(`line 5  ${idOf(5)}  content_modified`));
});

t.test('a line not as written is content_modified, though it parses to the event', async (t) => {
  // Duplicate members: JSON.parse keeps the last (the hashed one), SQLite's json_extract and a
  // reader of the raw line the first. An aliased number: `5.0000000000000001` parses as 5.
  const rewrites: Array<[string, (line: string) => string]> = [
    ['duplicate members', (line) => `{"outcome":"block","reason":"injected",${line.slice(1)}`],
    ['an aliased number', (line) => line.replace('"seq":5,', '"seq":5.0000000000000001,')],
    ['spacing', (line) => line.replace('{"', '{ "')],
  ];
  for (const [name, rewrite] of rewrites) {
    const lines = edited((l) => {
      const line = rewrite(l[at(5)] as string);
      t.not(line, l[at(5)], `${name}: the rewrite changed the line`);
      t.equal(JSON.parse(line).hash, JSON.parse(l[at(5)] as string).hash);
      l[at(5)] = line;
    });
    const { code, result } = await runJson([writeLines(lines)]);
    t.equal(code, 1, name);
    t.strictSame(result.broken_events, [{ line: 5, event_id: idOf(5), reason: 'content_modified' }], name);
  }
});

t.test("--org: the file must be that org's chain", async (t) => {
  const own = await run([intactPath, '--keys', keysPath, '--org', ORIGIN.slice('govgate/'.length), '--json']);
  t.equal(own.code, 0);
  t.equal(JSON.parse(own.out).origin, ORIGIN);
  // Another org's chain, every bit as well signed, is not this org's: each seal names another log.
  const other = await run([intactPath, '--keys', keysPath, '--org', 'org_someone_else', '--json']);
  t.equal(other.code, 1);
  const r = JSON.parse(other.out);
  t.equal(r.status, 'compromised');
  t.equal(r.origin, 'govgate/org_someone_else');
  const found = r.broken_events.map((b: { line: number; reason: string }) => `${b.line} ${b.reason}`).sort();
  const want = [
    ...[4, 8, 12].map((seq) => `${seq} checkpoint_mismatch`),
    ...Array.from({ length: N }, (_, i) => `${i + 1} org_mismatch`),
  ].sort();
  t.strictSame(found, want, 'each seal names another log, each event another org');
  t.equal(r.broken, N);
  t.equal(r.valid, 0);
  // Without a seal, the events' own org still tells: not merely unsealed.
  const unsealedPath = writeLines(base.lines.filter((l) => !l.startsWith('{"_seal"')).slice(0, 3));
  const unsealed = await run([unsealedPath, '--keys', keysPath, '--org', 'org_someone_else', '--json']);
  t.equal(unsealed.code, 1, 'compromised, not exit 3');
  t.strictSame(
    JSON.parse(unsealed.out).broken_events.map((b: { reason: string }) => b.reason),
    ['org_mismatch', 'org_mismatch', 'org_mismatch'],
  );
  const human = await run([intactPath, '--keys', keysPath, '--org', 'org_someone_else']);
  t.match(human.out, /origin\s+govgate\/org_someone_else/);
  const bad = await run([intactPath, '--keys', keysPath, '--org', 'govgate/x y']);
  t.equal(bad.code, 2);
  t.match(bad.err, /--org takes an org id/);
});

t.test('a personal value edited, or tombstoned without an erasure event', async (t) => {
  const changed = writeLines(
    edited((l) => {
      const e = JSON.parse(l[at(6)] as string) as ChainEvent;
      (e.personal?.end_user as { value: unknown }).value = 'mallory@example.com';
      l[at(6)] = JSON.stringify(e);
    }),
  );
  const a = await runJson([changed]);
  t.equal(a.code, 1);
  t.strictSame(a.result.broken_events, [{ line: 6, event_id: idOf(6), reason: 'content_modified' }]);

  const erased = writeLines(
    edited((l) => {
      const e = JSON.parse(l[at(9)] as string) as ChainEvent;
      const f = e.personal?.prompt as { value: unknown; salt?: string };
      f.value = ERASED;
      delete f.salt;
      l[at(9)] = JSON.stringify(e);
    }),
  );
  const b = await runJson([erased]);
  t.equal(b.code, 1);
  t.strictSame(b.result.broken_events, [{ line: 9, event_id: idOf(9), reason: 'unauthorized_erasure' }]);
});

t.test('a deleted line: chain_broken at the next event, its seal no longer matches', async (t) => {
  const path = writeLines(edited((l) => l.splice(at(6), 1)));
  const { code, result } = await runJson([path]);
  t.equal(code, 1);
  t.equal(result.events, N - 1);
  t.match(result.broken_events, [
    { line: 7, event_id: idOf(7), reason: 'chain_broken' },
    { line: 8, event_id: idOf(8), reason: 'checkpoint_mismatch' },
  ]);
  t.ok(result.broken_events.every((b) => b.line >= 7));
});

t.test('a file cut at its end is a prefix: --checkpoint with a seal saved earlier catches it', async (t) => {
  // The last four events and their seal cut off: what remains is a sealed chain of its own.
  const cut = writeLines(base.lines.slice(0, sealLine(8) + 1));
  const plain = await runJson([cut]);
  t.equal(plain.code, 0, 'alone, a prefix verifies (a file can only vouch for what it holds)');
  t.equal(plain.result.events, 8);
  // The auditor saved the newest seal line of an earlier export (or an event's seal from the API).
  const saved = JSON.parse(base.lines[sealLine(12)] as string) as { _seal: StoredSeal };
  const asLine = writeLines([JSON.stringify(saved)], `checkpoint-${++fileN}.json`);
  const asSeal = writeLines([JSON.stringify(saved._seal)], `checkpoint-${++fileN}.json`);
  // An event as GET /api/audit/events/{id} serves it, its seal inlined with the signatures.
  const event = JSON.parse(base.lines[at(12)] as string) as Record<string, unknown>;
  const asEvent = writeLines(
    [
      JSON.stringify({
        ...event,
        seal: {
          ...saved._seal,
          signatures: [{ name: 'govgate-audit-ed25519', key_id: '00', alg: 'ed25519' }],
        },
      }),
    ],
    `checkpoint-${++fileN}.json`,
  );
  // An event that is not the file's line at its seq: one edited and given a fresh hash (its own
  // content checks out) is a checkpoint_mismatch there; one edited and left is refused outright.
  const other = { ...event, outcome: 'block', reason: 'forged' };
  const rehashed = { ...other, hash: hashEvent(event.prev_hash as string, other) };
  const madeUp = writeLines(
    [JSON.stringify({ ...rehashed, seal: saved._seal })],
    `checkpoint-${++fileN}.json`,
  );
  const fake = await run([intactPath, '--keys', keysPath, '--checkpoint', madeUp, '--json']);
  t.equal(fake.code, 1, 'an event the file does not hold: compromised');
  t.strictSame(JSON.parse(fake.out).broken_events, [
    { line: 12, event_id: idOf(12), reason: 'checkpoint_mismatch' },
  ]);
  const edited12 = writeLines(
    [JSON.stringify({ ...other, seal: saved._seal })],
    `checkpoint-${++fileN}.json`,
  );
  const refused = await run([intactPath, '--keys', keysPath, '--checkpoint', edited12]);
  t.equal(refused.code, 2);
  t.match(refused.err, /does not hash to its hash/);
  for (const checkpoint of [asLine, asSeal, asEvent]) {
    const r = await run([cut, '--keys', keysPath, '--checkpoint', checkpoint]);
    t.equal(r.code, 1, 'compromised: the file ends before the saved checkpoint');
    t.match(r.out, /status\s+COMPROMISED/);
    t.match(r.out, /ends at seq 8, before the checkpoint's 12 events/);
    const whole = await run([intactPath, '--keys', keysPath, '--checkpoint', checkpoint]);
    t.equal(whole.code, 0, 'the whole file extends the checkpoint');
    t.match(whole.out, /checkpoint\s+12 events, matched/);
  }
  // An event changed before the checkpoint's size: the saved root no longer matches.
  const tampered = writeLines(
    edited((l) => {
      const e = JSON.parse(l[at(3)] as string) as ChainEvent;
      e.outcome = 'block';
      l[at(3)] = JSON.stringify(e);
    }),
  );
  t.equal((await run([tampered, '--keys', keysPath, '--checkpoint', asLine])).code, 1);
  // A checkpoint that is not a valid seal under the keys is an input error, not a verdict.
  const forged = writeLines(
    [JSON.stringify({ _seal: { ...saved._seal, note: saved._seal.note.replace(/\n— .*$/s, '\n') } })],
    `checkpoint-${++fileN}.json`,
  );
  const bad = await run([intactPath, '--keys', keysPath, '--checkpoint', forged]);
  t.equal(bad.code, 2, bad.err);
  t.match(bad.err, /checkpoint/);
  const junk = await run([intactPath, '--keys', keysPath, '--checkpoint', keysPath]);
  t.equal(junk.code, 2);
  t.match(junk.err, /checkpoint/);
});

t.test('a swapped seal signature: signature_invalid at the seal line', async (t) => {
  const path = writeLines(
    edited((l) => {
      const first = JSON.parse(l[sealLine(4)] as string) as { _seal: StoredSeal };
      const second = JSON.parse(l[sealLine(8)] as string) as { _seal: StoredSeal };
      // The Ed25519 signature line (the first one) of seal 1 pasted into seal 2.
      const sigLine = (note: string): string => note.split('\n').find((x) => x.startsWith('\u2014')) ?? '';
      second._seal = {
        ...second._seal,
        note: second._seal.note.replace(sigLine(second._seal.note), sigLine(first._seal.note)),
      };
      l[sealLine(8)] = JSON.stringify(second);
    }),
  );
  const { code, result } = await runJson([path]);
  t.equal(code, 1);
  t.strictSame(result.broken_events, [{ line: 8, event_id: idOf(8), reason: 'signature_invalid' }]);
});

t.test('split into rotated files: still one intact chain', async (t) => {
  for (const cut of [sealLine(4) + 1, at(6) + 1, at(12)]) {
    const older = writeLines(base.lines.slice(0, cut), `org.1-${cut}.jsonl`);
    const newer = writeLines(base.lines.slice(cut), `org-${cut}.jsonl`);
    const { code, result } = await runJson([older, newer]);
    t.equal(code, 0, `cut at line ${cut}`);
    t.strictSame(result, INTACT_JSON);
    const reversed = await runJson([newer, older]);
    t.equal(reversed.code, 1, 'the wrong order is not one chain');
  }
  const a = writeLines(base.lines.slice(0, 5), 'org.1.jsonl');
  const b = writeLines(base.lines.slice(5, 9), 'org.2.jsonl');
  const c = writeLines(base.lines.slice(9), 'org.jsonl');
  const three = await run([a, b, c, '--keys', keysPath]);
  t.equal(three.code, 0);
  t.match(three.out, /3 files, one chain/);
});

t.test('a garbage line is reported, not thrown', async (t) => {
  const lines = edited((l) => l.splice(at(3), 0, 'this is {not json'));
  const path = writeLines(lines);
  const { code, result } = await runJson([path]);
  t.equal(code, 1);
  t.strictSame(result.broken_events, [{ line: 3, event_id: null, reason: 'content_modified' }]);
  t.equal(result.events, N + 1);
  t.equal(result.broken, 1);

  const r = await verifyFile(path, keysDocument(KEYS));
  t.strictSame(r.unparseable, [{ file: path, line: at(3) + 1 }]);
  const human = await run([path, '--keys', keysPath]);
  t.match(human.out, /line 3 {2}- {2}content_modified/);
  t.match(human.out, new RegExp(`${path.replace(/[.\\]/g, '\\$&')}:${at(3) + 1}`));

  // A truncated last line (a crash mid-write), a JSON value that is not an object.
  const truncated = writeLines([...base.lines, '{"id":"ae_000013","seq":1', '42']);
  const tr = await runJson([truncated]);
  t.equal(tr.code, 1);
  t.strictSame(
    tr.result.broken_events.map((b) => [b.line, b.event_id, b.reason]),
    [
      [13, null, 'content_modified'],
      [13, null, 'content_modified'],
    ],
  );
});

t.test('lines over the length cap are findings, within a chunk and across chunks', async (t) => {
  const within = 'x'.repeat(20_000);
  const across = `["${'y'.repeat(3 << 20)}"]`; // JSON, but spans several 1 MiB read chunks
  const lines = edited((l) => l.splice(at(3), 0, within, across));
  const path = writeLines(lines);
  const r = await verifyFile(path, keysDocument(KEYS), { maxLineBytes: 16 << 10 });
  t.equal(r.status, 'compromised');
  t.strictSame(
    r.broken_events.map((b) => [b.line, b.event_id, b.reason]),
    [
      [3, null, 'content_modified'],
      [3, null, 'content_modified'],
    ],
  );
  t.equal(r.events, N + 2);
  t.equal(r.lines, lines.length);
  t.strictSame(r.unparseable, [
    { file: path, line: at(3) + 1 },
    { file: path, line: at(3) + 2 },
  ]);
  const unlimited = await verifyFile(path, keysDocument(KEYS));
  t.strictSame(unlimited.unparseable, [{ file: path, line: at(3) + 1 }], 'the long line is read whole');
  t.equal(unlimited.broken, 2, 'and, being JSON but not an event, is still a finding');
});

t.test('blank lines, CRLF line ends and a BOM are tolerated', async (t) => {
  const path = join(dir, 'crlf.jsonl');
  writeFileSync(path, `\uFEFF${base.lines.join('\r\n\r\n')}\r\n \t \n\n`);
  const { code, result } = await runJson([path]);
  t.equal(code, 0);
  t.strictSame(result, INTACT_JSON);
});

/** The base chain with `edit` applied to its events, relinked (hashes recomputed, no key needed), seals dropped. */
function forged(edit: (e: ChainEvent) => void): string[] {
  let prev = GENESIS;
  return base.events.map((orig) => {
    const e = JSON.parse(JSON.stringify(orig)) as ChainEvent;
    edit(e);
    e.prev_hash = prev;
    e.hash = hashEvent(prev, e);
    prev = e.hash;
    return JSON.stringify(e);
  });
}

t.test('a chain no seal covers is not intact: unsealed, exit 3, and says so', async (t) => {
  // An edit relinked from the edited event on, the seals stripped: every hash and link checks out.
  const path = writeLines(forged((e) => e.seq === 2 && (e.outcome = 'block')));
  const { code, result } = await runJson([path]);
  t.equal(code, 3, 'not exit 0');
  t.equal(result.status, 'unsealed');
  t.match(result, { events: N, valid: N, broken: 0, sealed_through: 0, unsealed_events: N });
  const human = await run([path, '--keys', keysPath]);
  t.equal(human.code, 3);
  t.match(human.out, /status\s+UNSEALED/);
  t.match(human.out, /sealed\s+nothing/);
  t.match(human.out, /NOT PROVEN: no event is covered by a valid seal \(12 unsealed\)/);
  // The genuine chain with only its seal lines removed says the same.
  const stripped = await runJson([writeLines(base.lines.filter((l) => !l.startsWith('{"_seal"')))]);
  t.equal(stripped.code, 3);
  t.match(stripped.result, { status: 'unsealed', sealed_through: 0, unsealed_events: N }); // A made-up legacy v1 chain (no seals exist in v1): its links check out, and prove nothing.
  const legacy = await runJson([writeLines(forged((e) => delete (e as Partial<ChainEvent>)._chain_version))]);
  t.equal(legacy.code, 3);
  t.match(legacy.result, { status: 'unsealed', broken: 0, sealed_through: 0, unsealed_events: N });
});

t.test('events after the last valid seal are reported unsealed, exit 3', async (t) => {
  // The last seal line deleted (a live log's tail, or a tail rewritten after it): proven up to 8.
  const lines = edited((l) => l.splice(sealLine(12), 1));
  const { code, result } = await runJson([writeLines(lines)]);
  t.equal(code, 3);
  t.match(result, { status: 'unsealed', broken: 0, sealed_through: 8, unsealed_events: 4 });
  const human = await run([writeLines(lines), '--keys', keysPath]);
  t.match(human.out, /NOT PROVEN PAST SEQ 8: 4 event\(s\) are covered by no seal/);
  // A seal that does not verify covers nothing, and is a finding: compromised wins.
  const bad = buildChain(4, { sealEvery: 4, origin: checkpointOrigin('org_other') });
  const other = await runJson([writeLines(bad.lines)]);
  t.equal(other.code, 1);
  t.match(other.result, { status: 'compromised', sealed_through: 0, unsealed_events: 4 });
});

t.test('a pruned chain starting with a bridge record verifies', async (t) => {
  const cut = 8;
  const bridge = bridgeRecord({
    fromSeq: 1,
    toSeq: cut,
    bridgedHash: (base.events[cut - 1] as ChainEvent).hash,
    subtrees: base.subtreesAt.get(cut) as Uint8Array[],
    lastSeal: base.seals.get(cut) as StoredSeal,
    archive: { uri: 's3://archive/org_cli-1-8.jsonl' },
  });
  const path = writeLines([JSON.stringify(bridge), ...base.lines.slice(sealLine(cut) + 1)]);
  const r = await verifyFile(path, keysDocument(KEYS));
  t.equal(r.status, 'intact');
  t.equal(r.sealed_through, N);
  t.equal(r.events, N - cut);
  t.equal(r.chain_length, N);
  t.equal(r.current_head, head);
  t.equal(r.origin, ORIGIN, 'origin taken from the first event after the bridge');
  t.equal(r.bridged_through, cut, 'the file says where it starts');
  const human = await run([path, '--keys', keysPath]);
  t.match(human.out, /starts\s+after a bridge over seq 1-8/);

  // A bridge and nothing after it holds no event: empty, not intact (a pipeline takes empty as
  // a failure), however well its seal verifies.
  const alone = await verifyFile(writeLines([JSON.stringify(bridge)]), keysDocument(KEYS));
  t.equal(alone.status, 'empty');
  t.equal(alone.events, 0);

  // A checkpoint saved at the bridge's size is the bridge's own seal: it matches.
  const cp = writeLines([JSON.stringify({ _seal: base.seals.get(cut) })], `checkpoint-${++fileN}.json`);
  const checked = await run([path, '--keys', keysPath, '--checkpoint', cp, '--json']);
  t.equal(checked.code, 0, checked.out);
});

t.test('bytes that are not UTF-8 are not the line govgate wrote', async (t) => {
  // An event holding U+FFFD, written as its three UTF-8 bytes; one invalid byte in their place
  // decodes to the same character, so a lossy decoder would read the line as written.
  const e = linkEvent(GENESIS, { ...draft(1, false), reason: 'caf\ufffd' });
  const good = Buffer.from(`${JSON.stringify(e)}\n`);
  const at = good.indexOf(Buffer.from([0xef, 0xbf, 0xbd]));
  t.ok(at > 0, 'the line holds the replacement character');
  const bad = Buffer.concat([good.subarray(0, at), Buffer.from([0xff]), good.subarray(at + 3)]);
  const goodPath = join(dir, `utf8-${++fileN}.jsonl`);
  const badPath = join(dir, `invalid-utf8-${++fileN}.jsonl`);
  writeFileSync(goodPath, good);
  writeFileSync(badPath, bad);
  t.equal((await verifyFile(goodPath, keysDocument(KEYS))).broken, 0, 'as written: no finding');
  const r = await verifyFile(badPath, keysDocument(KEYS));
  t.equal(r.status, 'compromised', 'the line is not valid UTF-8');
  t.match(r.broken_events[0], { line: 1, reason: 'content_modified' });
});

t.test('seals under rotated keys verify when the retired keys are published', async (t) => {
  const old = makeKeyPair(ORIGIN, 11, 'retired');
  const chain = buildChain(8, { sealEvery: 4, keysFor: (s) => (s === 1 ? old : KEYS) });
  const path = writeLines(chain.lines);
  const both = await runJson([path], writeJson(keysDocument(old, KEYS)));
  t.equal(both.code, 0);
  t.equal(both.result.status, 'intact');
  const onlyNew = await runJson([path]);
  t.equal(onlyNew.code, 1);
  t.strictSame(onlyNew.result.broken_events, [{ line: 4, event_id: idOf(4), reason: 'signature_invalid' }]);
});

t.test('seals naming another origin do not match the chain', async (t) => {
  const chain = buildChain(4, { sealEvery: 4, origin: checkpointOrigin('org_other') });
  const { code, result } = await runJson([writeLines(chain.lines)]);
  t.equal(code, 1);
  t.strictSame(result.broken_events, [{ line: 4, event_id: idOf(4), reason: 'checkpoint_mismatch' }]);
});

t.test('usage and input errors exit 2 with a clear message', async (t) => {
  const noKeys = await run([intactPath]);
  t.equal(noKeys.code, 2);
  t.match(noKeys.err, /--keys <file> is required/);
  t.match(noKeys.err, /Usage: govgate verify/);
  t.equal(noKeys.out, '');

  const noFile = await run(['--keys', keysPath]);
  t.equal(noFile.code, 2);
  t.match(noFile.err, /no chain file given/);

  const unknown = await run([intactPath, '--keys', keysPath, '--yaml']);
  t.equal(unknown.code, 2);
  t.match(unknown.err, /--yaml/);

  const missing = await run([join(dir, 'nope.jsonl'), '--keys', keysPath]);
  t.equal(missing.code, 2);
  t.match(missing.err, /cannot read .*nope\.jsonl/);

  const aDir = await run([dir, '--keys', keysPath]);
  t.equal(aDir.code, 2);
  t.match(aDir.err, /not a regular file/);

  const missingKeys = await run([intactPath, '--keys', join(dir, 'nope.json')]);
  t.equal(missingKeys.code, 2);
  t.match(missingKeys.err, /cannot read keys file/);

  const notJson = join(dir, 'keys-not-json.json');
  writeFileSync(notJson, 'not json');
  const badJson = await run([intactPath, '--keys', notJson]);
  t.equal(badJson.code, 2);
  t.match(badJson.err, /not JSON/);

  const doc = keysDocument(KEYS);
  const wrongId = writeJson({
    ...doc,
    keys: doc.keys.map((k, i) => (i === 0 ? { ...k, key_id: '00000000' } : k)),
  });
  const idErr = await run([intactPath, '--keys', wrongId]);
  t.equal(idErr.code, 2);
  t.match(idErr.err, /invalid keys file .*keys\[0\]\.key_id does not match/);

  const onlyEd = writeJson({ ...doc, keys: doc.keys.filter((k) => k.alg === 'ed25519') });
  const edErr = await run([intactPath, '--keys', onlyEd]);
  t.equal(edErr.code, 2);
  t.match(edErr.err, /no ml-dsa-65 key/);

  const notDoc = await run([intactPath, '--keys', writeJson([1, 2])]);
  t.equal(notDoc.code, 2);
  t.match(notDoc.err, /not a signing-key document/);

  const help = await run(['--help']);
  t.equal(help.code, 0);
  t.match(help.out, /Usage: govgate verify/);
});

t.test('the command as a child process: exit code and JSON on stdout', async (t) => {
  const module = fileURLToPath(new URL('../../src/cli-verify.js', import.meta.url));
  const script =
    `import(${JSON.stringify(module)}).then((m) => m.runVerify(process.argv.slice(1), ` +
    '{ stdout: process.stdout, stderr: process.stderr, isTTY: false })).then((c) => process.exit(c))';
  const tampered = writeLines(
    edited((l) => {
      const e = JSON.parse(l[at(2)] as string) as ChainEvent;
      e.model = 'gpt-4o';
      l[at(2)] = JSON.stringify(e);
    }),
  );
  const child = spawn(process.execPath, ['-e', script, '--', tampered, '--keys', keysPath, '--json'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  t.equal(code, 1, err);
  const result = JSON.parse(out) as IntegrityResult;
  t.equal(result.status, 'compromised');
  t.strictSame(result.broken_events, [{ line: 2, event_id: idOf(2), reason: 'content_modified' }]);
});

t.test('throughput over a 50k-event file, and the progress bar on a terminal', async (t) => {
  const big = buildChain(50_000, { sealEvery: 1_000 });
  const path = writeLines(big.lines, 'big.jsonl');
  const bytes = statSync(path).size;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const r = await verifyFile(path, keysDocument(KEYS));
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  t.equal(r.status, 'intact');
  t.equal(r.events, 50_000);
  t.equal(r.seals_checked, 50);
  t.equal(r.current_head, (big.events.at(-1) as ChainEvent).hash);
  // Sanity of the fixture itself: the last event re-hashes.
  const last = big.events.at(-1) as ChainEvent;
  t.equal(hashEvent(last.prev_hash, last), last.hash);
  const perSec = (ms: number): string => Math.round((r.lines / ms) * 1000).toLocaleString('en-US');
  t.comment(
    `verifyFile: ${r.lines} lines (${(bytes / 1024 / 1024).toFixed(1)} MB, 50 dual-signed seals): ` +
      `${perSec(wallMs)} lines/s wall (${wallMs.toFixed(0)} ms), ${perSec(cpuMs)} lines/s CPU ` +
      `(${(bytes / 1024 / 1024 / (wallMs / 1000)).toFixed(1)} MB/s)`,
  );

  const tty = await run([path, '--keys', keysPath], true);
  t.equal(tty.code, 0);
  t.match(tty.err, /100% \[#{24}\] 50,050 lines {2}[0-9.]+ MB\/s/, 'the final frame is drawn');
  t.ok(tty.err.endsWith('\r\x1b[2K'), 'the bar is cleared at the end');
  t.match(tty.out, /status\s+INTACT/);

  const small = await run([intactPath, '--keys', keysPath], true);
  t.equal(small.err, '', 'no bar for a file under 1 MB');
});
