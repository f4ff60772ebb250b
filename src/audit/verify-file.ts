import { isUtf8 } from 'node:buffer';
import { createPublicKey, verify as cryptoVerify } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createGunzip } from 'node:zlib';
import {
  type BrokenEvent,
  ChainVerifier,
  checkpointOrigin,
  checkSeal,
  duplicateMember,
  ERASURE_EVENT_TYPE,
  erasureTargets,
  fromBase64,
  hashEvent,
  type IntegrityReason,
  type IntegrityResult,
  keyIdFor,
  type NoteVerifier,
  type Receipt,
  receiptOrigin,
  type SealCoverage,
  type SealRecord,
  toHex,
  verifyReceipt,
} from '../core/chain/index.js';
import type { SigningKeyDocument } from './types.js';

/**
 * The file side of the offline verifier (`govgate verify`): streams exported JSONL chains through
 * the same `ChainVerifier` the integrity endpoint uses, with nothing but the published public keys.
 */

export type VerifyInputErrorCode = 'unreadable_file' | 'invalid_keys' | 'invalid_checkpoint';

/** The inputs cannot be used (a file that cannot be read, a keys document that is not one). */
export class VerifyInputError extends Error {
  readonly code: VerifyInputErrorCode;
  constructor(code: VerifyInputErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'VerifyInputError';
    this.code = code;
  }
}

export interface VerifyFileOptions {
  /** Called after each chunk read (the caller throttles any drawing). */
  onProgress?: (bytesRead: number, totalBytes: number, lines: number) => void;
  /** Longest line accepted (default 64 MiB); a longer one is a finding and is never buffered. */
  maxLineBytes?: number;
  /**
   * A seal saved earlier (a `{"_seal": …}` line of an export, or an event's `seal` from the API):
   * the files must hold the chain it signed, so a file cut at its end, which alone is a sealed
   * chain of its own, is found out. Its signatures must verify, else `VerifyInputError`.
   */
  checkpoint?: unknown;
  /**
   * The org whose chain the files must be: every seal must name its log (`govgate/<org>`), so
   * another org's export, every bit as well signed, is not taken for it. Without it the origin
   * is read from the first event.
   */
  org?: string;
}

/** What the files show of `VerifyFileOptions.checkpoint`. */
export interface CheckpointResult {
  size: number;
  /** The files' first `size` events are exactly the ones the checkpoint signed. */
  matched: boolean;
}

/** A line of a file that was not JSON (reported as `content_modified` in the result too). */
export interface UnparseableLine {
  file: string;
  /** 1-based line number within that file. */
  line: number;
}

/**
 * The verdict on a file. `intact`: no finding, and a valid seal covers every event (what an export
 * of a quiescent chain is). `unsealed`: no finding, but some events (the tail after the last
 * valid seal, or all of them when no seal is valid or the chain is legacy v1) are covered by no
 * seal: their hashes and links check out, which anyone can recompute, so nothing proves the
 * service wrote them. `compromised`: a finding. `empty`: no events.
 */
export type VerifyStatus = IntegrityResult['status'] | 'unsealed';

export interface VerifyFileResult extends Omit<IntegrityResult, 'status'> {
  status: VerifyStatus;
  /** The largest seq a valid seal covers (a bridge's seal included); 0 when none. */
  sealed_through: number;
  /** Events no valid seal covers (see `VerifyStatus`). */
  unsealed_events: number;
  /** Non-empty lines read, across all files. */
  lines: number;
  /** `_seal` lines pushed to the verifier. */
  seals_checked: number;
  /** `_erasure_authority` lines (a bounded export's later erasures) whose receipts proved them. */
  erasure_authorities: number;
  /**
   * The seq a `_chain_bridge` the file starts with stands for (the file's events start after
   * it: a retention cut or a window export); 0 when the file starts at the chain's start.
   */
  bridged_through: number;
  /** The checkpoint origin enforced (`govgate/<org_id>` of the first v2 event), if any. */
  origin: string | null;
  /** The first lines that were not JSON (at most 100). */
  unparseable: UnparseableLine[];
  /** Set when a checkpoint was given. */
  checkpoint: CheckpointResult | null;
}

const KEY_ALGS = new Set(['ed25519', 'ml-dsa-65']);
const KEY_ID = /^[0-9a-f]{8}$/;
const NL = 0x0a;
const CR = 0x0d;
const READ_CHUNK = 1 << 20;
const MAX_LINE_BYTES = 64 << 20;
/** Lines held back before the first event while the origin is unknown. */
const MAX_HELD = 1024;
const MAX_UNPARSEABLE = 100;

type Rec = Record<string, unknown>;

function isRecord(x: unknown): x is Rec {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/**
 * Turns a signing-key document (the body of GET /api/audit/signing-key) into note verifiers.
 * Every key is trusted, retired ones included (old seals stay verifiable). Each key's `key_id`
 * must be the C2SP key ID of its name, algorithm and public key. Throws `VerifyInputError`.
 */
export function verifiersFromKeys(doc: SigningKeyDocument | unknown): NoteVerifier[] {
  const bad = (msg: string): VerifyInputError => new VerifyInputError('invalid_keys', msg);
  if (!isRecord(doc) || !Array.isArray(doc.keys)) {
    throw bad('not a signing-key document: expected {"keys": [...]} (GET /api/audit/signing-key)');
  }
  const out: NoteVerifier[] = [];
  doc.keys.forEach((k: unknown, i: number) => {
    const where = `keys[${i}]`;
    if (!isRecord(k)) throw bad(`${where} is not an object`);
    const { name, alg, public_key: pub, key_id: keyId } = k;
    if (typeof name !== 'string' || name.length === 0) throw bad(`${where}.name is missing`);
    if (typeof alg !== 'string' || !KEY_ALGS.has(alg)) {
      throw bad(`${where}.alg must be "ed25519" or "ml-dsa-65"`);
    }
    const a = alg as NoteVerifier['alg'];
    const publicKey = typeof pub === 'string' ? fromBase64(pub) : undefined;
    if (publicKey === undefined) throw bad(`${where}.public_key is not base64`);
    let id: Uint8Array;
    try {
      id = keyIdFor(name, a, publicKey);
    } catch (err) {
      throw new VerifyInputError('invalid_keys', `${where}: ${(err as Error).message}`, { cause: err });
    }
    if (typeof keyId !== 'string' || !KEY_ID.test(keyId) || keyId !== toHex(id)) {
      throw bad(`${where}.key_id does not match its name, alg and public key (expected ${toHex(id)})`);
    }
    out.push(a === 'ed25519' ? nativeEd25519(name, id, publicKey) : { name, keyId: id, alg: a, publicKey });
  });
  for (const alg of KEY_ALGS) {
    if (!out.some((v) => v.alg === alg)) throw bad(`no ${alg} key: a seal needs both signatures`);
  }
  return out;
}

/** Ed25519 through node:crypto (much faster than pure JS); the public key is checked as RFC 8032. */
function nativeEd25519(name: string, keyId: Uint8Array, publicKey: Uint8Array): NoteVerifier {
  const v: NoteVerifier = { name, keyId, alg: 'ed25519', publicKey };
  try {
    const key = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(publicKey).toString('base64url') },
      format: 'jwk',
    });
    v.verify = (sig, msg) => cryptoVerify(null, msg, key, sig);
  } catch {
    // Not a key node:crypto accepts: fall back to the pure-JS verifier, which reports it.
  }
  return v;
}

type Held = { kind: 'event'; value: unknown; text?: string } | { kind: 'seal'; value: unknown };

/** Feeds parsed lines to one `ChainVerifier`, created once the origin is known. */
class LineSink {
  readonly #verifiers: readonly NoteVerifier[];
  #verifier: ChainVerifier | undefined;
  #held: Held[] = [];
  #heldAuthorities: unknown[] = [];
  origin: string | null = null;
  lines = 0;
  seals = 0;
  /** `_erasure_authority` lines whose receipts proved their erasure events. */
  authorities = 0;
  readonly unparseable: UnparseableLine[] = [];
  readonly #checkpoint: SealRecord | undefined;

  readonly #org: string | undefined;
  readonly #expectedOrigin: string | undefined;
  readonly #checkpointEvent: CheckpointEvent | undefined;
  /** Events of another org than `org`, and an event checkpoint the files do not hold as it is. */
  readonly findings: BrokenEvent[] = [];

  /**
   * `org`: the org the file must be the chain of (else the origin is read from the first event);
   * `checkpointEvent`: an event the files must hold, as it is, at its seq.
   */
  constructor(
    verifiers: readonly NoteVerifier[],
    checkpoint?: SealRecord,
    org?: string,
    checkpointEvent?: CheckpointEvent,
  ) {
    this.#verifiers = verifiers;
    this.#checkpoint = checkpoint;
    this.#org = org;
    this.#expectedOrigin = org === undefined ? undefined : checkpointOrigin(org);
    this.#checkpointEvent = checkpointEvent;
  }

  /** What the chain's checks do not see: an event's org, and the event checkpoint's line. */
  #checkEvent(e: Record<string, unknown>): void {
    if (e._chain_version === undefined || typeof e.seq !== 'number') return;
    const id = typeof e.id === 'string' ? e.id : null;
    if (this.#org !== undefined && e.org_id !== this.#org && this.findings.length < MAX_UNPARSEABLE)
      this.findings.push({ line: e.seq, event_id: id, reason: 'org_mismatch' });
    const cp = this.#checkpointEvent;
    if (cp !== undefined && e.seq === cp.seq && (e.id !== cp.id || e.hash !== cp.hash))
      this.findings.push({ line: e.seq, event_id: id, reason: 'checkpoint_mismatch' });
  }

  line(text: string, file: string, lineNo: number): void {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      if (text.trim().length === 0) return;
      this.lines++;
      if (this.unparseable.length < MAX_UNPARSEABLE) this.unparseable.push({ file, line: lineNo });
      this.#push({ kind: 'event', value: null }); // not an object: content_modified at this position
      return;
    }
    this.lines++;
    if (isRecord(value) && Object.hasOwn(value, '_erasure_authority')) {
      // Its event is hashed from the parsed line: a member it repeats could read otherwise to
      // another reader, so such a line proves nothing.
      this.#authority(duplicateMember(text) === undefined ? value._erasure_authority : {});
      return;
    }
    if (isRecord(value) && Object.hasOwn(value, '_seal')) {
      this.seals++;
      this.#push({ kind: 'seal', value: value._seal });
    } else {
      if (isRecord(value) && (this.#org !== undefined || this.#checkpointEvent !== undefined))
        this.#checkEvent(value);
      this.#push({ kind: 'event', value, text });
    }
  }

  /**
   * An erasure made after a bounded export's end (`{event, receipt}`): its grants count once the
   * receipt proves the event is in this chain, signed by a trusted key under this chain's
   * origin. One that does not prove it grants nothing, and is a finding of its own.
   */
  #authority(raw: unknown): void {
    // Before the first event the origin is not known: held, so an authority line put first
    // cannot set it (or leave it unset) for the events after it.
    const v = this.#verifier;
    if (v === undefined) {
      this.#heldAuthorities.push(raw);
      return;
    }
    const a = isRecord(raw) ? raw : {};
    const event = isRecord(a.event) ? a.event : undefined;
    const receipt = a.receipt as Receipt | undefined;
    const line = typeof event?.seq === 'number' ? event.seq : 0;
    const id = typeof event?.id === 'string' ? event.id : null;
    let reason: IntegrityReason | undefined;
    if (event === undefined || !isRecord(receipt) || event.event_type !== ERASURE_EVENT_TYPE)
      reason = 'content_modified';
    else {
      const proof = verifyReceipt(receipt, this.#verifiers, event);
      if (!proof.ok) reason = proof.reason === 'not_included' ? 'chain_broken' : proof.reason;
      else if (this.origin !== null && receiptOrigin(receipt) !== this.origin) reason = 'org_mismatch';
    }
    if (reason !== undefined) {
      if (this.findings.length < MAX_UNPARSEABLE) this.findings.push({ line, event_id: id, reason });
      return;
    }
    this.authorities++;
    v.authorize(erasureTargets(event));
  }

  /**
   * A line too long to hold, or not UTF-8: counted and reported like any line that is not an
   * event.
   */
  oversized(file: string, lineNo: number): void {
    this.lines++;
    if (this.unparseable.length < MAX_UNPARSEABLE) this.unparseable.push({ file, line: lineNo });
    this.#push({ kind: 'event', value: null });
  }

  #push(item: Held): void {
    let v = this.#verifier;
    if (v === undefined) {
      const first =
        item.kind === 'event' && isRecord(item.value) && !Object.hasOwn(item.value, '_chain_bridge');
      if (!first && this.#held.length < MAX_HELD) {
        this.#held.push(item);
        return;
      }
      v = this.#start(first ? (item.value as Rec) : undefined);
    }
    if (item.kind === 'seal') v.pushSeal(item.value as SealRecord);
    else v.pushEvent(item.value, item.text);
  }

  /** The origin comes from the first event (v2 events only; legacy chains carry no origin). */
  #start(firstEvent: Rec | undefined): ChainVerifier {
    const org = firstEvent?._chain_version !== undefined ? firstEvent?.org_id : undefined;
    this.origin =
      this.#expectedOrigin ?? (typeof org === 'string' && org.length > 0 ? checkpointOrigin(org) : null);
    const v = new ChainVerifier(
      this.origin === null
        ? { verifiers: this.#verifiers }
        : { verifiers: this.#verifiers, origin: this.origin },
    );
    this.#verifier = v;
    // Checked like a seal line of the file, when the chain reaches its size; one it never
    // reaches stays pending and is a checkpoint_mismatch finding.
    if (this.#checkpoint !== undefined) v.pushSeal(this.#checkpoint);
    const held = this.#held;
    this.#held = [];
    for (const h of held) {
      if (h.kind === 'seal') v.pushSeal(h.value as SealRecord);
      else v.pushEvent(h.value, h.text);
    }
    const authorities = this.#heldAuthorities;
    this.#heldAuthorities = [];
    for (const a of authorities) this.#authority(a);
    return v;
  }

  result(): { integrity: IntegrityResult; coverage: SealCoverage; bridgedThrough: number } {
    const v = this.#verifier ?? this.#start(undefined);
    return { integrity: v.result(), coverage: v.coverage(), bridgedThrough: v.bridgedThrough };
  }
}

/**
 * Streams one file's lines into `sink`: one pass over 1 MiB chunks, only a partial line carried
 * between chunks, CRLF and a leading BOM tolerated. Never holds more than one line.
 */
async function readFileLines(
  path: string,
  sink: LineSink,
  maxLine: number,
  onChunk: (bytes: number) => void,
): Promise<void> {
  const raw = createReadStream(path, { highWaterMark: READ_CHUNK });
  // A `.gz` file (a retention archive) is read through gunzip; progress counts the bytes read.
  const gz = path.endsWith('.gz');
  const stream = gz ? raw.pipe(createGunzip({ chunkSize: READ_CHUNK })) : raw;
  if (gz) {
    raw.on('data', (d) => onChunk((d as Buffer).length));
    raw.on('error', (err) => stream.destroy(err));
  }
  let lineNo = 0;
  let parts: Buffer[] = [];
  let partBytes = 0;
  let skipping = false; // inside an oversized line: drop bytes until its newline
  let first = true;

  const emit = (buf: Buffer, start: number, end: number): void => {
    lineNo++;
    if (end > start && buf[end - 1] === CR) end--;
    if (first) {
      first = false;
      if (end - start >= 3 && buf[start] === 0xef && buf[start + 1] === 0xbb && buf[start + 2] === 0xbf) {
        start += 3;
      }
    }
    if (end - start > maxLine) sink.oversized(path, lineNo);
    // Bytes that are not UTF-8 are not what govgate wrote, even where a lossy decoder would turn
    // them into the character the line held (an invalid byte for U+FFFD).
    else if (end > start && !isUtf8(buf.subarray(start, end))) sink.oversized(path, lineNo);
    else if (end > start) sink.line(buf.toString('utf8', start, end), path, lineNo);
  };

  const endLine = (chunk: Buffer, nl: number): void => {
    if (skipping) {
      skipping = false;
      lineNo++;
      first = false;
      sink.oversized(path, lineNo);
    } else if (partBytes === 0) {
      emit(chunk, 0, nl);
    } else {
      parts.push(chunk.subarray(0, nl));
      const whole = Buffer.concat(parts, partBytes + nl);
      parts = [];
      partBytes = 0;
      emit(whole, 0, whole.length);
    }
  };

  const carry = (piece: Buffer): void => {
    if (skipping || piece.length === 0) return;
    if (partBytes + piece.length > maxLine) {
      parts = [];
      partBytes = 0;
      skipping = true;
      return;
    }
    // Copy: a carried slice would otherwise pin its whole 1 MiB chunk.
    parts.push(Buffer.from(piece));
    partBytes += piece.length;
  };

  try {
    for await (const data of stream) {
      const chunk = data as Buffer;
      let nl = chunk.indexOf(NL);
      if (nl < 0) {
        carry(chunk);
      } else {
        endLine(chunk, nl);
        let start = nl + 1;
        nl = chunk.indexOf(NL, start);
        while (nl >= 0) {
          emit(chunk, start, nl);
          start = nl + 1;
          nl = chunk.indexOf(NL, start);
        }
        carry(chunk.subarray(start));
      }
      if (!gz) onChunk(chunk.length);
    }
  } catch (err) {
    // Only the file system's and gunzip's errors are input errors; anything else is a bug.
    const e = err as NodeJS.ErrnoException;
    if (e.syscall === undefined && !(typeof e.code === 'string' && e.code.startsWith('Z_'))) throw err;
    throw new VerifyInputError('unreadable_file', `cannot read ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  if (skipping) {
    lineNo++;
    sink.oversized(path, lineNo);
  } else if (partBytes > 0) {
    const whole = Buffer.concat(parts, partBytes);
    emit(whole, 0, whole.length);
  }
}

/**
 * Verifies exported chain files (JSONL; rotated files given oldest first, read as one chain)
 * against the public keys of `keysDoc`. Every line is an event, `{"_seal": …}` or
 * `{"_chain_bridge": …}`; a line that is not JSON is a `content_modified` finding at the position
 * it holds (its file and line are listed in `unparseable`). Memory stays O(log n) plus findings.
 * Throws `VerifyInputError` for a file that cannot be read or an unusable keys document.
 */
export async function verifyFile(
  paths: string | readonly string[],
  keysDoc: SigningKeyDocument | unknown,
  opts: VerifyFileOptions = {},
): Promise<VerifyFileResult> {
  const files = typeof paths === 'string' ? [paths] : [...paths];
  const verifiers = verifiersFromKeys(keysDoc);
  const given = opts.checkpoint === undefined ? undefined : checkpointOf(opts.checkpoint, verifiers);
  const checkpoint = given?.seal;
  const sink = new LineSink(verifiers, checkpoint, opts.org, given?.event);
  let totalBytes = 0;
  for (const f of files) {
    try {
      const s = await stat(f);
      if (!s.isFile()) throw new Error('not a regular file');
      totalBytes += s.size;
    } catch (err) {
      throw new VerifyInputError('unreadable_file', `cannot read ${f}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
  let bytesRead = 0;
  const onProgress = opts.onProgress;
  const onChunk = (n: number): void => {
    bytesRead += n;
    onProgress?.(bytesRead, Math.max(totalBytes, bytesRead), sink.lines);
  };
  const maxLine = opts.maxLineBytes ?? MAX_LINE_BYTES;
  for (const f of files) await readFileLines(f, sink, maxLine, onChunk);
  const { integrity: chain, coverage, bridgedThrough } = sink.result();
  const integrity = withFindings(chain, sink.findings);
  return {
    ...integrity,
    status: integrity.status === 'intact' && coverage.unsealed > 0 ? 'unsealed' : integrity.status,
    sealed_through: coverage.sealed_through,
    unsealed_events: coverage.unsealed,
    lines: sink.lines,
    seals_checked: sink.seals,
    erasure_authorities: sink.authorities,
    bridged_through: bridgedThrough,
    origin: sink.origin,
    unparseable: sink.unparseable,
    checkpoint:
      checkpoint === undefined
        ? null
        : {
            size: checkpoint.size,
            matched:
              integrity.chain_length >= checkpoint.size &&
              !integrity.broken_events.some((b) => b.line <= checkpoint.size),
          },
  };
}

/** The chain's result with findings made outside the chain's own checks (--org, an event checkpoint). */
function withFindings(r: IntegrityResult, extra: readonly BrokenEvent[]): IntegrityResult {
  if (extra.length === 0) return r;
  const lines = new Set(r.broken_events.map((b) => b.line));
  let newly = 0;
  for (const b of extra) {
    if (lines.has(b.line)) continue;
    lines.add(b.line);
    newly++;
  }
  const broken_events = [...r.broken_events, ...extra].sort((a, b) => a.line - b.line);
  return Object.assign({}, r, {
    status: 'compromised' as const,
    broken_events,
    broken: r.broken + newly,
    valid: Math.max(0, r.valid - newly),
  });
}

/** An event given as the checkpoint: the files must hold it, as it is, at its `seq`. */
interface CheckpointEvent {
  readonly seq: number;
  readonly id: string;
  readonly hash: string;
}

/**
 * The seal of a checkpoint input, its signatures verified, and, when the input is an event from
 * the API, that event (its own hash checked); throws `VerifyInputError`.
 */
function checkpointOf(
  raw: unknown,
  verifiers: readonly NoteVerifier[],
): { seal: SealRecord; event: CheckpointEvent | undefined } {
  const seal = checkpointSeal(raw, verifiers);
  if (!isRecord(raw) || !isRecord(raw.seal)) return { seal, event: undefined };
  const { seal: _s, receipt: _r, ...event } = raw;
  const { seq, id, hash, prev_hash: prev } = event;
  if (
    typeof seq !== 'number' ||
    !Number.isSafeInteger(seq) ||
    typeof id !== 'string' ||
    typeof hash !== 'string' ||
    typeof prev !== 'string'
  )
    throw badCheckpoint('is an event without its seq, id, hash or prev_hash');
  if (seq > seal.size)
    throw badCheckpoint(`is an event (seq ${seq}) its seal (size ${seal.size}) does not cover`);
  let own: string;
  try {
    own = hashEvent(prev, event);
  } catch {
    own = '';
  }
  if (own !== hash) throw badCheckpoint('is an event whose content does not hash to its hash (edited)');
  return { seal, event: { seq, id, hash } };
}

function badCheckpoint(why: string): VerifyInputError {
  return new VerifyInputError(
    'invalid_checkpoint',
    `the checkpoint ${why} (give a {"_seal": …} line of an export, or an event from the API)`,
  );
}

/** The seal of a checkpoint input, its signatures verified; throws `VerifyInputError`. */
function checkpointSeal(raw: unknown, verifiers: readonly NoteVerifier[]): SealRecord {
  const bad = badCheckpoint;
  // A `{"_seal": …}` line, an event from the API (its `seal` inlined), or the seal itself.
  const seal =
    isRecord(raw) && isRecord(raw._seal) ? raw._seal : isRecord(raw) && isRecord(raw.seal) ? raw.seal : raw;
  if (!isRecord(seal) || typeof seal.note !== 'string') throw bad('holds no seal note');
  const size = seal.size;
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 1) throw bad('has no tree size');
  const record: SealRecord = { seq: typeof seal.seq === 'number' ? seal.seq : 0, size, note: seal.note };
  if (!checkSeal(record, verifiers).ok)
    throw bad('is not signed by these keys (both signatures must verify)');
  return record;
}
