import {
  closeSync,
  createWriteStream,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  truncateSync,
  type WriteStream,
} from 'node:fs';
import { join } from 'node:path';
import type { StoredSeal } from './types.js';

/** One line to (re)write: an event line with its seq, or a seal line. */
export type LogLine =
  | { readonly seq: number; readonly line: string }
  | { readonly seal: StoredSeal; readonly line: string };

/** Lines of an org chain after a point, in order, as the store holds them (see `JsonlLog`). */
export type BackfillSource = (org: string, afterSeq: number, afterSealSize: number) => Iterable<LogLine>;

interface OrgFile {
  readonly org: string;
  /** `<dir>/<encoded org>`; the live file is `<base>.jsonl`, rotated ones `<base>.<n>.jsonl`. */
  readonly base: string;
  stream: WriteStream | undefined;
  bytes: number;
  rotations: number;
  /** Highest event seq written or held. */
  queuedSeq: number;
  /** Highest event seq handed to the file (not held). */
  appendedSeq: number;
  /** Size of the last seal written. */
  writtenSeal: number;
  /** While a seal of this size is being signed, event lines after it wait in `held`. */
  hold: number | null;
  /** The id `hold` returned for the current hold (0: none). */
  holdId: number;
  held: LogLine[];
  /**
   * Lines not handed to the stream yet, UTF-8 encoded as they come (`pendingBytes` of `pending`);
   * a new buffer per chunk, since the stream keeps the last one until it is written.
   */
  pending: Buffer | undefined;
  pendingBytes: number;
  /** Bytes of the last chunk handed to the stream (at least MIN_CHUNK). */
  lastChunk: number;
  /** Settles when the stream has written everything handed to it so far. */
  written: Promise<void>;
}

/** The JSONL line of a seal (also what the export writes). */
export function sealLine(seal: StoredSeal): string {
  return JSON.stringify({ _seal: { seq: seal.seq, size: seal.size, note: seal.note, ts: seal.ts } });
}

const SAFE_NAME = /^[A-Za-z0-9_-]+$/;
const ROTATED = /^(.+)\.([0-9]+)\.jsonl$/;
const TAIL_CHUNK = 65_536;
/** Pending lines are handed to the file at this size, or this long after the first of them. */
const FLUSH_BYTES = 65_536;
const FLUSH_MS = 20;
const NEWLINE = 0x0a;
const MIN_CHUNK = 4_096;

/** A file-name-safe form of an org id ('.' is escaped so `<org>.<n>.jsonl` stays unambiguous). */
export function fileNameOf(org: string): string {
  if (SAFE_NAME.test(org)) return org;
  return encodeURIComponent(org).replace(
    /[.*!'()~]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/**
 * The JSONL log: one file per org under `<dataDir>/audit/<org>.jsonl`, one line per event and a
 * `{"_seal": …}` line right after the event each seal ends at: the same bytes as
 * `GET /api/audit/export`, verifiable offline with `govgate verify`.
 *
 * Lines are written after their transaction commits, through an append stream (no blocking
 * writes on the request path), in chunks of up to 64 KiB at most 20 ms apart: one write per
 * chunk rather than per org per commit (at 10 orgs that was a tenth of the append path's CPU).
 * The file may trail the store by that window; a crash loses nothing, since the store is the
 * truth and the missing tail is written from it at the next start. A seal is signed
 * asynchronously, so while one is being signed the lines of later events are held back and
 * written after the seal line. At rotation size the live file is renamed to `<org>.<n>.jsonl`
 * (n = 1, 2, …) and a fresh one started; an open file descriptor keeps writing to the renamed
 * file, so nothing in flight is lost. On first use after a start the tail of the file is read, a
 * torn last line (crash mid-write) cut off, and lines the store committed but the file missed are
 * written from the store.
 */
export class JsonlLog {
  readonly #dir: string;
  readonly #maxBytes: number;
  readonly #backfill: BackfillSource;
  readonly #files = new Map<string, OrgFile>();
  #error: unknown;
  #timer: NodeJS.Timeout | undefined;
  #holds = 0;

  constructor(dataDir: string, rotationMaxMb: number, backfill: BackfillSource) {
    this.#dir = join(dataDir, 'audit');
    this.#maxBytes = Math.max(1, Math.floor(rotationMaxMb * 1024 * 1024));
    this.#backfill = backfill;
  }

  /** The last write error, if any (the log keeps going; the store is the source of truth). */
  get lastError(): unknown {
    return this.#error;
  }

  /** The live file of an org. */
  pathOf(org: string): string {
    return `${join(this.#dir, fileNameOf(org))}.jsonl`;
  }

  /** Committed event lines, in seq order. */
  events(org: string, seqs: readonly number[], lines: readonly string[]): void {
    this.#guard(org, (f) => {
      for (let i = 0; i < lines.length; i++) this.#event(f, seqs[i] as number, lines[i] as string);
    });
  }

  /**
   * A seal of `size` is being signed: hold event lines after it until `seal` or `release` with the
   * id returned. A hold still in place is replaced (its seal will never come: the chain head that
   * cut it was reset after a failed commit); the lines it held up to `size` are written first,
   * since they come before the new seal.
   */
  hold(org: string, size: number): number {
    const id = ++this.#holds;
    this.#guard(org, (f) => {
      if (f.held.length > 0) {
        const later: LogLine[] = [];
        for (const h of f.held) {
          if ('seq' in h && h.seq <= size) this.#appendEvent(f, h.seq, h.line);
          else later.push(h);
        }
        f.held = later;
      }
      f.hold = size;
      f.holdId = id;
    });
    return id;
  }

  /** The committed seal of hold `id`: its line, then whatever was held behind it. */
  seal(org: string, seal: StoredSeal, id: number): void {
    this.#guard(org, (f) => {
      this.#seal(f, seal, sealLine(seal));
      if (f.holdId === id) this.#release(f);
    });
  }

  /** The seal of hold `id` failed: write what was held (unless a newer hold replaced it). */
  release(org: string, id: number): void {
    this.#guard(org, (f) => {
      if (f.holdId === id) this.#release(f);
    });
  }

  /** Hands every pending line to its file and resolves once all of them are written. */
  async drain(): Promise<void> {
    this.#flushAll();
    await Promise.all([...this.#files.values()].map((f) => f.written));
  }

  /** Never throws: the log is a copy of the store, and a disk error must not fail the chain. */
  #guard(org: string, write: (f: OrgFile) => void): void {
    try {
      const f = this.#file(org);
      write(f);
      if (f.pendingBytes >= FLUSH_BYTES) this.#flush(f);
      else if (f.pendingBytes > 0 && this.#timer === undefined) {
        this.#timer = setTimeout(this.#flushAll, FLUSH_MS);
        this.#timer.unref();
      }
    } catch (err) {
      this.#error = err;
    }
  }

  readonly #flushAll = (): void => {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const f of this.#files.values()) this.#flush(f);
  };

  async close(): Promise<void> {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    const ends: Promise<void>[] = [];
    for (const f of this.#files.values()) {
      this.#release(f);
      this.#flush(f);
      const s = f.stream;
      f.stream = undefined;
      if (s !== undefined) ends.push(new Promise<void>((resolve) => s.end(resolve)));
    }
    this.#files.clear();
    await Promise.all(ends);
  }

  #event(f: OrgFile, seq: number, line: string): void {
    if (seq <= f.queuedSeq) return;
    f.queuedSeq = seq;
    if (f.hold !== null && seq > f.hold) f.held.push({ seq, line });
    else this.#appendEvent(f, seq, line);
  }

  #appendEvent(f: OrgFile, seq: number, line: string): void {
    this.#append(f, line);
    f.appendedSeq = seq;
  }

  #seal(f: OrgFile, seal: StoredSeal, line: string): void {
    // A seal whose place is already behind later events (a replaced hold's seal that still
    // committed) is left out: the next seal covers those events too.
    if (seal.size <= f.writtenSeal || seal.size < f.appendedSeq) return;
    f.writtenSeal = seal.size;
    this.#append(f, line);
  }

  #release(f: OrgFile): void {
    f.hold = null;
    f.holdId = 0;
    const held = f.held;
    f.held = [];
    for (const h of held) {
      if ('seq' in h) this.#appendEvent(f, h.seq, h.line);
      else this.#append(f, h.line);
    }
  }

  #append(f: OrgFile, line: string): void {
    const n = Buffer.byteLength(line, 'utf8') + 1;
    if (f.bytes + f.pendingBytes > 0 && f.bytes + f.pendingBytes + n > this.#maxBytes) {
      this.#flush(f);
      this.#rotate(f);
    }
    let buf = f.pending;
    if (buf !== undefined && f.pendingBytes + n > buf.length) {
      if (buf.length >= FLUSH_BYTES) {
        this.#flush(f); // a full chunk goes to the file
        buf = undefined;
      } else {
        const grown = Buffer.allocUnsafe(Math.max(f.pendingBytes + n, Math.min(FLUSH_BYTES, buf.length * 2)));
        buf.copy(grown, 0, 0, f.pendingBytes);
        buf = f.pending = grown;
      }
    }
    // Sized like the org's last chunk: a quiet org holds a small buffer, a busy one a full chunk.
    buf ??= f.pending = Buffer.allocUnsafe(Math.max(n, Math.min(FLUSH_BYTES, f.lastChunk)));
    buf.write(line, f.pendingBytes, 'utf8');
    buf[f.pendingBytes + n - 1] = NEWLINE;
    f.pendingBytes += n;
  }

  #flush(f: OrgFile): void {
    if (f.pending === undefined || f.pendingBytes === 0) return;
    const chunk = f.pending.subarray(0, f.pendingBytes);
    f.lastChunk = Math.max(MIN_CHUNK, f.pendingBytes);
    f.bytes += f.pendingBytes;
    f.pending = undefined;
    f.pendingBytes = 0;
    const stream = f.stream;
    if (stream === undefined) return;
    // A failed write is reported through the stream's 'error' handler (lastError).
    f.written = new Promise<void>((resolve) => stream.write(chunk, () => resolve()));
  }

  #rotate(f: OrgFile): void {
    const live = `${f.base}.jsonl`;
    const old = f.stream;
    try {
      renameSync(live, `${f.base}.${++f.rotations}.jsonl`);
      f.stream = this.#open(live).stream;
    } catch (err) {
      this.#error = err;
      f.stream = undefined;
    }
    f.bytes = 0;
    old?.end();
  }

  #open(path: string): { stream: WriteStream; size: number } {
    // Opened synchronously so the stream writes to this inode even if the path is renamed.
    const fd = openSync(path, 'a', 0o600);
    const size = fstatSync(fd).size;
    const stream = createWriteStream(path, { fd, flags: 'a' });
    stream.on('error', (err) => {
      this.#error = err;
    });
    return { stream, size };
  }

  #file(org: string): OrgFile {
    let f = this.#files.get(org);
    if (f !== undefined) return f;
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    const name = fileNameOf(org);
    const base = join(this.#dir, name);
    let rotations = 0;
    for (const entry of readdirSync(this.#dir)) {
      const m = ROTATED.exec(entry);
      if (m !== null && m[1] === name) rotations = Math.max(rotations, Number(m[2]));
    }
    f = {
      org,
      base,
      stream: undefined,
      bytes: 0,
      rotations,
      queuedSeq: 0,
      appendedSeq: 0,
      writtenSeal: 0,
      hold: null,
      holdId: 0,
      held: [],
      pending: undefined,
      pendingBytes: 0,
      lastChunk: MIN_CHUNK,
      written: Promise.resolve(),
    };
    this.#files.set(org, f);
    const live = `${base}.jsonl`;
    let last = lastLine(live);
    if (last === undefined && rotations > 0) last = lastLine(`${base}.${rotations}.jsonl`);
    try {
      const opened = this.#open(live);
      f.stream = opened.stream;
      f.bytes = opened.size;
    } catch (err) {
      this.#error = err;
    }
    resumeFrom(f, last);
    for (const l of this.#backfill(org, f.queuedSeq, f.writtenSeal)) {
      if ('seal' in l) this.#seal(f, l.seal, l.line);
      else this.#event(f, l.seq, l.line);
    }
    this.#flush(f);
    return f;
  }
}

/** Where an existing file ends: after event `seq`, or after the seal of `size`. */
function resumeFrom(f: OrgFile, last: string | undefined): void {
  if (last === undefined) return;
  let rec: { seq?: unknown; _seal?: { size?: unknown } };
  try {
    rec = JSON.parse(last) as typeof rec;
  } catch {
    return;
  }
  const sealSize = rec._seal?.size;
  if (typeof sealSize === 'number') {
    f.queuedSeq = sealSize;
    f.appendedSeq = sealSize;
    f.writtenSeal = sealSize;
  } else if (typeof rec.seq === 'number') {
    // Seals before this event were written before it (later lines wait for a seal being signed);
    // a seal ending exactly here may still be missing.
    f.queuedSeq = rec.seq;
    f.appendedSeq = rec.seq;
    f.writtenSeal = rec.seq - 1;
  }
}

/** The last complete line of a file (a torn final line is truncated away first). */
function lastLine(path: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return undefined;
  }
  try {
    const size = fstatSync(fd).size;
    if (size === 0) return undefined;
    const end = lastNewline(fd, size, size);
    if (end < 0) {
      truncateSync(path, 0);
      return undefined;
    }
    if (end !== size - 1) truncateSync(path, end + 1);
    const start = lastNewline(fd, end, size) + 1;
    const buf = Buffer.allocUnsafe(end - start);
    readSync(fd, buf, 0, buf.length, start);
    return buf.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** Offset of the last '\n' strictly before `before`, or -1. */
function lastNewline(fd: number, before: number, size: number): number {
  const buf = Buffer.allocUnsafe(Math.min(TAIL_CHUNK, size));
  let end = before;
  while (end > 0) {
    const start = Math.max(0, end - buf.length);
    const n = readSync(fd, buf, 0, end - start, start);
    const i = buf.subarray(0, n).lastIndexOf(10);
    if (i >= 0) return start + i;
    end = start;
  }
  return -1;
}
