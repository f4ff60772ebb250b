import {
  closeSync,
  createWriteStream,
  existsSync,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  truncateSync,
  type WriteStream,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { open as openFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { StoredSeal } from './types.js';

/** One line to (re)write: an event line with its seq, or a seal line. */
export type LogLine =
  | { readonly seq: number; readonly line: string }
  | { readonly seal: StoredSeal; readonly line: string };

/** What the store holds: the truth the log is checked against and written from (see `JsonlLog`). */
export interface LogSource {
  /** Lines of an org chain after a point, in order, as the store holds them. */
  lines(org: string, afterSeq: number, afterSealSize: number): Iterable<LogLine>;
  /** The hash of the stored event `seq` (undefined when the store has no such event). */
  eventHash(org: string, seq: number): string | undefined;
  /** The stored seal of tree size `size`. */
  sealAt(org: string, size: number): StoredSeal | undefined;
  /** The size of the newest stored seal of size ≤ `seq` (0 when none). */
  sealedAt(org: string, seq: number): number;
  /** The line of the org's `_chain_bridge` (retention pruned its chain before it), if any. */
  bridgeLine(org: string): string | undefined;
}

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
  /** When the org last wrote (a count of `#guard` calls), for closing the least recently used. */
  used: number;
}

/** What the log knows of an org file it closed with everything written (see `JsonlLog.#evict`). */
interface Closed {
  readonly size: number;
  readonly rotations: number;
  readonly seq: number;
  readonly sealed: number;
  readonly lastChunk: number;
}

/** The JSONL line of a seal (also what the export writes). */
export function sealLine(seal: StoredSeal): string {
  return JSON.stringify({ _seal: { seq: seal.seq, size: seal.size, note: seal.note, ts: seal.ts } });
}

const SAFE_NAME = /^[A-Za-z0-9_-]+$/;
const ROTATED = /^(.+)\.([0-9]+)\.jsonl$/;
/** After `<org file name>.`: a set-aside file of the live log or of a rotated one. */
const DIVERGED = /^(?:[0-9]+\.)?jsonl\.diverged-/;
const TAIL_CHUNK = 65_536;
/** Pending lines are handed to the file at this size, or this long after the first of them. */
const FLUSH_BYTES = 65_536;
const FLUSH_MS = 20;
const NEWLINE = 0x0a;
const MIN_CHUNK = 4_096;
/** Org files kept open at most (a soft cap: see `JsonlLog`). */
const MAX_OPEN = 256;
/** Closed org files whose place the log remembers (past that, a reopen reads the file's tail). */
const MAX_REMEMBERED = 65_536;

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
 * file, so nothing in flight is lost.
 *
 * At a start (`checkAll`) and on an org's first use the log is made a prefix of the store again:
 * a torn last line (crash mid-write) is cut off; lines the store does not hold as they are are
 * cut off and kept aside (`<file>.diverged-<time>`, reported through `lastError` and `warn`); then
 * the lines the store committed but the file missed are written from the store. The file can be
 * ahead of the store after a machine crash: the store is fsynced every 100 ms, so it can lose
 * events and seals the file already holds, and give their seqs to other events. The tail is
 * checked back from the end until an event the store holds, and on to the store's last seal
 * before it (every line checked: an event by seq and hash, a seal by its whole line): a seal is
 * committed after later events (it is signed asynchronously) but written before them, so the
 * store can keep those events and lose the seal.
 *
 * At most `maxOpen` org files are open (one descriptor each; holding one per org for the life of
 * the process ran a server out of descriptors after ~1,000 orgs). Opening one more at the cap
 * closes the least recently used files that have nothing left to write (no pending lines, no
 * hold, nothing held, no write in flight) until 3/4 of the cap are open: such a file is complete,
 * so it can be opened again at once, while its close is still under way, and written on from
 * where it ends. A file still being written is never closed for another: the cap is soft, and
 * files opened past it in a burst are closed once written. The place a closed file ends is kept
 * (for up to 65,536 orgs), so opening it again neither lists the directory nor reads the file
 * back, unless its size changed meanwhile.
 */
export class JsonlLog {
  readonly #dir: string;
  readonly #maxBytes: number;
  readonly #source: LogSource;
  readonly #warn: Warn;
  readonly #files = new Map<string, OrgFile>();
  readonly #maxOpen: number;
  /** Files closed by `#evict` with everything written: where they end. */
  readonly #closed = new Map<string, Closed>();
  /** Counts `#guard` calls: the recency stamp of an org file (`used`). */
  #uses = 0;
  #trim: NodeJS.Immediate | undefined;
  #error: unknown;
  #timer: NodeJS.Timeout | undefined;
  #holds = 0;
  /** Streams of files rotated away that are still writing their last chunks (drain waits). */
  readonly #ending = new Set<Promise<void>>();
  /** Orgs whose files `rewrite` is editing: their lines are left to the catch-up after it. */
  readonly #rewriting = new Set<string>();
  /** The last exclusive edit queued per org (see `#exclusive`). */
  readonly #queues = new Map<string, Promise<void>>();

  constructor(
    dataDir: string,
    rotationMaxMb: number,
    source: LogSource,
    warn: Warn = () => {},
    maxOpen = MAX_OPEN,
  ) {
    this.#dir = join(dataDir, 'audit');
    this.#maxBytes = Math.max(1, Math.floor(rotationMaxMb * 1024 * 1024));
    this.#source = source;
    this.#warn = warn;
    this.#maxOpen = Math.max(1, Math.floor(maxOpen));
  }

  /** The last write error, if any (the log keeps going; the store is the source of truth). */
  get lastError(): unknown {
    return this.#error;
  }

  /** The live file of an org. */
  pathOf(org: string): string {
    return `${join(this.#dir, fileNameOf(org))}.jsonl`;
  }

  /**
   * The files a start set aside for an org (`<file>.diverged-<time>`, see the class comment), by
   * name, oldest first: lines the log held that the chain does not. Read from the directory, so
   * they are reported until an operator moves them away.
   */
  divergedFiles(org: string): string[] {
    const prefix = `${fileNameOf(org)}.`;
    let names: string[];
    try {
      names = readdirSync(this.#dir);
    } catch {
      return [];
    }
    return names.filter((n) => n.startsWith(prefix) && DIVERGED.test(n.slice(prefix.length))).sort();
  }

  /**
   * Checks the log of every org that has one against the store (see the class comment), at a
   * start: a log ahead of the store is repaired before anything reads it, not at the org's next
   * event. Never throws (a failure is kept in `lastError`; first use checks again).
   */
  checkAll(): void {
    const rotated = new Map<string, number[]>();
    let entries: string[];
    try {
      entries = readdirSync(this.#dir);
    } catch {
      return; // no log yet
    }
    for (const entry of entries) {
      const m = ROTATED.exec(entry);
      const name = m !== null ? (m[1] as string) : entry.endsWith('.jsonl') ? entry.slice(0, -6) : undefined;
      if (name === undefined) continue;
      let numbers = rotated.get(name);
      if (numbers === undefined) rotated.set(name, (numbers = []));
      if (m !== null) numbers.push(Number(m[2]));
    }
    for (const [name, numbers] of rotated) {
      try {
        const org = decodeURIComponent(name);
        if (fileNameOf(org) !== name || this.#files.has(org)) continue;
        // A log behind the store (it missed lines: a crash, a full disk) is written up to it now,
        // not at the org's next event, which may never come.
        const resumed = this.#resume(org, numbers);
        if (this.#behind(org, resumed.last)) this.#file(org, resumed);
      } catch (err) {
        this.#error = err;
      }
    }
  }

  /** Whether the store holds lines after `last` (the last line an org's files keep). */
  #behind(org: string, last: string | undefined): boolean {
    const at = { queuedSeq: 0, appendedSeq: 0, writtenSeal: 0 };
    resumeFrom(at, last);
    const lines = this.#source.lines(org, at.queuedSeq, at.writtenSeal)[Symbol.iterator]();
    try {
      return lines.next().done !== true;
    } finally {
      lines.return?.(); // ends the store's read
    }
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
    await Promise.all([...[...this.#files.values()].map((f) => f.written), ...this.#ending]);
    // Files opened past the cap are closed now that they are written (not at a later turn).
    if (this.#trim !== undefined) clearImmediate(this.#trim);
    this.#trim = undefined;
    if (this.#files.size > this.#maxOpen) this.#evict(this.#keep());
    // Also the closes a trim started while the writes above were completing.
    await Promise.all(this.#ending);
  }

  /**
   * Edits every line of an org's files (rotated ones too) in place: `edit` returns a line's new
   * text, or undefined to keep it. Erasure uses it to tombstone lines the store already holds
   * tombstoned. The org's file is closed first, with the lines it had not written yet dropped, and
   * nothing is written to it while the files are edited (each into a synced copy renamed over it);
   * then the lines the store holds past the files' end (the dropped ones, the ones committed
   * meanwhile) are written from the store, as after a restart. Returns the number of lines changed;
   * throws when a file cannot be rewritten (the files left as they were).
   */
  async rewrite(org: string, edit: (line: string) => string | undefined): Promise<number> {
    return this.#exclusive(org, async (paths) => {
      let changed = 0;
      for (const path of paths) changed += await rewriteFile(path, edit);
      return changed;
    });
  }

  /**
   * Cuts an org's files where retention pruned its chain: the lines through seq `toSeq` (events,
   * seals, an earlier bridge) go, files left empty are deleted, and the first file kept starts with
   * `bridgeLine`, so the files are the export again (see `rewrite` for how writes wait). Returns
   * the number of files deleted.
   */
  async prune(org: string, toSeq: number, bridgeLine: string): Promise<number> {
    return this.#exclusive(org, async (paths, livePath) => {
      // The bridge goes at the start of the first file kept: the live one, made if need be.
      if (!paths.includes(livePath)) {
        mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
        writeFileSync(livePath, '', { mode: 0o600 });
        paths.push(livePath);
      }
      let deleted = 0;
      for (let i = 0; i < paths.length; i++) {
        const path = paths[i] as string;
        const live = i === paths.length - 1;
        const kept = await pruneFile(path, toSeq, bridgeLine, live);
        if (kept === 'deleted') deleted++;
        if (kept === 'kept') break; // the files after it hold only later lines
      }
      return deleted;
    });
  }

  /**
   * Runs `work` on an org's files (rotated ones oldest first, then the live one if it exists)
   * with nothing else writing them: the org's file is closed first, with the lines it had not
   * written yet dropped, and its lines are not written meanwhile; afterwards, what the files lack
   * (the dropped lines, the ones committed meanwhile) is written from the store, as after a start.
   */
  async #exclusive<T>(org: string, work: (paths: string[], live: string) => Promise<T>): Promise<T> {
    // One at a time per org: an erasure's rewrite and a retention cut wait for each other.
    const before = this.#queues.get(org) ?? Promise.resolve();
    let done = (): void => {};
    const mine = new Promise<void>((resolve) => {
      done = resolve;
    });
    const tail = before.then(() => mine);
    this.#queues.set(org, tail);
    await before;
    this.#rewriting.add(org);
    try {
      const f = this.#files.get(org);
      if (f !== undefined) {
        this.#files.delete(org);
        f.pending = undefined;
        f.pendingBytes = 0;
        f.held = [];
        f.hold = null;
        const s = f.stream;
        f.stream = undefined;
        await f.written;
        if (s !== undefined) await ended(s);
      }
      this.#closed.delete(org);
      const name = fileNameOf(org);
      const base = join(this.#dir, name);
      const numbers: number[] = [];
      let entries: string[] = [];
      try {
        entries = readdirSync(this.#dir);
      } catch {
        // no log yet
      }
      for (const entry of entries) {
        const m = ROTATED.exec(entry);
        if (m !== null && m[1] === name) numbers.push(Number(m[2]));
      }
      numbers.sort((a, b) => a - b);
      const paths = [...numbers.map((n) => `${base}.${n}.jsonl`), `${base}.jsonl`].filter((p) =>
        existsSync(p),
      );
      return await work(paths, `${base}.jsonl`);
    } finally {
      this.#rewriting.delete(org);
      try {
        const resumed = this.#resume(org);
        if (this.#behind(org, resumed.last)) this.#file(org, resumed);
      } catch (err) {
        this.#error = err;
      }
      done();
      if (this.#queues.get(org) === tail) this.#queues.delete(org);
    }
  }

  /** Never throws: the log is a copy of the store, and a disk error must not fail the chain. */
  #guard(org: string, write: (f: OrgFile) => void): void {
    if (this.#rewriting.has(org)) return; // written from the store once rewritten
    try {
      const f = this.#file(org);
      f.used = ++this.#uses;
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
    if (this.#trim !== undefined) clearImmediate(this.#trim);
    this.#trim = undefined;
    const ends: Promise<void>[] = [];
    for (const f of this.#files.values()) {
      this.#release(f);
      this.#flush(f);
      const s = f.stream;
      f.stream = undefined;
      if (s !== undefined) ends.push(ended(s));
    }
    this.#files.clear();
    this.#closed.clear();
    await Promise.all([...ends, ...this.#ending]);
  }

  /** Files left open once the cap is reached: 3/4 of it. */
  #keep(): number {
    return Math.max(1, Math.floor((this.#maxOpen * 3) / 4));
  }

  /**
   * Closes the least recently used files that have nothing left to write until at most `keep` are
   * open (see the class comment). A file's place is remembered for its next open.
   */
  #evict(keep: number): void {
    const idle: OrgFile[] = [];
    for (const f of this.#files.values()) if (quiescent(f)) idle.push(f);
    idle.sort((a, b) => a.used - b.used);
    for (let i = 0; i < idle.length && this.#files.size > keep; i++) {
      const f = idle[i] as OrgFile;
      this.#files.delete(f.org);
      const s = f.stream;
      f.stream = undefined;
      if (s === undefined) continue; // its open failed: the next open starts from the files
      // A stream that failed may have lost a write: the next open checks the file back instead.
      if (s.errored === null && !s.destroyed) {
        if (this.#closed.size >= MAX_REMEMBERED)
          this.#closed.delete(this.#closed.keys().next().value as string);
        this.#closed.set(f.org, {
          size: f.bytes,
          rotations: f.rotations,
          seq: f.appendedSeq,
          sealed: f.writtenSeal,
          lastChunk: f.lastChunk,
        });
      }
      this.#end(s);
    }
  }

  /** Ends a stream no longer in `#files`: drain and close wait until its descriptor is closed. */
  #end(stream: WriteStream): void {
    const done = ended(stream);
    this.#ending.add(done);
    void done.then(() => this.#ending.delete(done));
  }

  /** After a write, when more files than the cap are open: close the idle ones at the next turn. */
  #trimSoon(): void {
    if (this.#trim !== undefined || this.#files.size <= this.#maxOpen) return;
    this.#trim = setImmediate(() => {
      this.#trim = undefined;
      if (this.#files.size > this.#maxOpen) this.#evict(this.#keep());
    });
    this.#trim.unref();
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
    f.written = new Promise<void>((resolve) =>
      stream.write(chunk, () => {
        resolve();
        if (this.#files.size > this.#maxOpen) this.#trimSoon();
      }),
    );
  }

  #rotate(f: OrgFile): void {
    const live = `${f.base}.jsonl`;
    const old = f.stream;
    try {
      renameSync(live, `${f.base}.${++f.rotations}.jsonl`);
      f.stream = this.#open(live, f).stream;
    } catch (err) {
      this.#error = err;
      f.stream = undefined;
    }
    f.bytes = 0;
    if (old === undefined) return;
    // The old file's last chunks may still be on their way to the disk: drain and close wait for
    // them (they waited only for the new file's writes, so a drained log could lack lines).
    this.#end(old);
  }

  #open(path: string, f: OrgFile): { stream: WriteStream; size: number } {
    // Opened synchronously so the stream writes to this inode even if the path is renamed.
    const fd = openSync(path, 'a', 0o600);
    const size = fstatSync(fd).size;
    const stream = createWriteStream(path, { fd, flags: 'a' });
    stream.on('error', (err) => {
      this.#error = err;
      // The stream is done for, and the file lacks what it had yet to write (a full disk): the
      // org's next line opens it again, made a prefix of the store and written up to it from there.
      if (f.stream === stream && this.#files.get(f.org) === f) {
        f.stream = undefined;
        this.#files.delete(f.org);
      }
    });
    return { stream, size };
  }

  #file(org: string, resumed?: { base: string; rotations: number; last: string | undefined }): OrgFile {
    let f = this.#files.get(org);
    if (f !== undefined) return f;
    if (this.#files.size >= this.#maxOpen) this.#evict(this.#keep() - 1);
    const closed = this.#closed.get(org);
    if (closed !== undefined) {
      this.#closed.delete(org);
      if (resumed === undefined) f = this.#reopen(org, closed);
      if (f !== undefined) return f;
    }
    const { base, rotations, last } = resumed ?? this.#resume(org);
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
      used: 0,
    };
    this.#files.set(org, f);
    try {
      const opened = this.#open(`${base}.jsonl`, f);
      f.stream = opened.stream;
      f.bytes = opened.size;
    } catch (err) {
      this.#error = err;
    }
    resumeFrom(f, last);
    this.#catchUp(f);
    return f;
  }

  /**
   * Opens again a file `#evict` closed, at the place it ended, when its size is still the one it
   * had (otherwise, or when it cannot be opened, undefined: the caller reads it back).
   */
  #reopen(org: string, closed: Closed): OrgFile | undefined {
    const base = join(this.#dir, fileNameOf(org));
    let opened: { stream: WriteStream; size: number };
    const f: OrgFile = {
      org,
      base,
      stream: undefined,
      bytes: closed.size,
      rotations: closed.rotations,
      queuedSeq: closed.seq,
      appendedSeq: closed.seq,
      writtenSeal: closed.sealed,
      hold: null,
      holdId: 0,
      held: [],
      pending: undefined,
      pendingBytes: 0,
      lastChunk: closed.lastChunk,
      written: Promise.resolve(),
      used: 0,
    };
    try {
      opened = this.#open(`${base}.jsonl`, f);
    } catch {
      return undefined;
    }
    if (opened.size !== closed.size) {
      opened.stream.destroy(); // changed meanwhile: read it back instead
      return undefined;
    }
    f.stream = opened.stream;
    this.#files.set(org, f);
    this.#catchUp(f);
    return f;
  }

  /** Writes the lines the store holds after the end of the file. */
  #catchUp(f: OrgFile): void {
    for (const l of this.#source.lines(f.org, f.queuedSeq, f.writtenSeal)) {
      if ('seal' in l) this.#seal(f, l.seal, l.line);
      else this.#event(f, l.seq, l.line);
    }
    this.#flush(f);
  }

  /**
   * Makes the files of an org a prefix of the store (see the class comment) and returns the last
   * line they keep and the number of the newest rotated file. `numbers`: the rotated files' numbers,
   * when the caller has listed the directory.
   */
  #resume(org: string, numbers?: number[]): { base: string; rotations: number; last: string | undefined } {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    const name = fileNameOf(org);
    const base = join(this.#dir, name);
    if (numbers === undefined) {
      numbers = [];
      for (const entry of readdirSync(this.#dir)) {
        const m = ROTATED.exec(entry);
        if (m !== null && m[1] === name) numbers.push(Number(m[2]));
      }
    }
    numbers.sort((a, b) => a - b);
    const paths = [...numbers.map((n) => `${base}.${n}.jsonl`), `${base}.jsonl`];
    const { last, cut } = checkTail(org, paths, this.#source);
    let rotations = numbers.at(-1) ?? 0;
    if (cut !== undefined) {
      const moved = setAside(paths, cut);
      // The live file is fresh when the cut is in a rotated one; rotations count the files kept.
      if (cut.file < numbers.length) rotations = numbers[cut.offset > 0 ? cut.file : cut.file - 1] ?? 0;
      const err = new Error(
        `the JSONL log of org ${org} diverged from the store (which lost its tail in a crash, or ` +
          `the files are not the store's): the lines from byte ${cut.offset} of ${paths[cut.file]} on ` +
          `were moved to ${moved.join(', ')} and the log continues from the store`,
      );
      this.#error = err;
      this.#warn(err.message, { org, moved });
    }
    return { base, rotations, last };
  }
}

/**
 * Rewrites one file line by line through `edit` into `<path>.rewrite` (synced), renamed over the
 * file when a line changed; returns how many did. A last line without its newline keeps none.
 */
async function rewriteFile(path: string, edit: (line: string) => string | undefined): Promise<number> {
  const tmp = `${path}.rewrite`;
  await rm(tmp, { force: true }); // a copy left by a crash
  const input = await openFile(path, 'r');
  const size = (await input.stat()).size;
  let endsWithNewline = false;
  if (size > 0) {
    const last = Buffer.alloc(1);
    await input.read(last, 0, 1, size - 1);
    endsWithNewline = last[0] === NEWLINE;
  }
  const out = await openFile(tmp, 'wx', 0o600);
  let changed = 0;
  try {
    let chunk: string[] = [];
    let chunkChars = 0;
    let first = true;
    const lines = createInterface({
      input: input.createReadStream({ autoClose: false }),
      crlfDelay: Infinity,
    });
    for await (const line of lines) {
      const next = edit(line);
      if (next !== undefined && next !== line) changed++;
      const text = next ?? line;
      chunk.push(first ? text : `\n${text}`);
      first = false;
      chunkChars += text.length + 1;
      if (chunkChars >= FLUSH_BYTES) {
        await out.write(chunk.join(''));
        chunk = [];
        chunkChars = 0;
      }
    }
    if (!first && endsWithNewline) chunk.push('\n');
    await out.write(chunk.join(''));
    await out.sync();
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  } finally {
    await out.close();
    await input.close();
  }
  if (changed === 0) await rm(tmp, { force: true });
  else renameSync(tmp, path);
  return changed;
}

/**
 * Drops the lines of a file through seq `toSeq` (see `JsonlLog.prune`): 'deleted' when none was
 * left (the live file is kept, holding the bridge alone), 'kept' when later lines were found (the
 * file then starts with `bridgeLine`), 'cut' when every line went but the file stays (live).
 */
async function pruneFile(
  path: string,
  toSeq: number,
  bridgeLine: string,
  live: boolean,
): Promise<'deleted' | 'kept' | 'cut'> {
  const tmp = `${path}.rewrite`;
  await rm(tmp, { force: true });
  const input = await openFile(path, 'r');
  let keptAny = false;
  let unchanged = false;
  const out = await openFile(tmp, 'wx', 0o600);
  try {
    let chunk: string[] = [`${bridgeLine}\n`];
    let chunkChars = 0;
    let cut = false;
    let seen = 0;
    let startsWithBridge = false;
    const lines = createInterface({
      input: input.createReadStream({ autoClose: false }),
      crlfDelay: Infinity,
    });
    for await (const line of lines) {
      if (!cut) {
        seen++;
        if (seen === 1 && line === bridgeLine) startsWithBridge = true;
        if (line === '' || throughSeq(line) <= toSeq) continue;
        cut = true;
        // Already cut here (a run finishing an earlier one): the file stays as it is.
        if (startsWithBridge && seen === 2) {
          unchanged = true;
          keptAny = true;
          break;
        }
      }
      keptAny = true;
      chunk.push(`${line}\n`);
      chunkChars += line.length + 1;
      if (chunkChars >= FLUSH_BYTES) {
        await out.write(chunk.join(''));
        chunk = [];
        chunkChars = 0;
      }
    }
    lines.close();
    if (!unchanged) {
      await out.write(chunk.join(''));
      await out.sync();
    }
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  } finally {
    await out.close();
    await input.close();
  }
  if (unchanged) {
    await rm(tmp, { force: true });
    return 'kept';
  }
  if (keptAny || live) {
    renameSync(tmp, path);
    return keptAny ? 'kept' : 'cut';
  }
  await rm(tmp, { force: true });
  await rm(path, { force: true });
  return 'deleted';
}

/**
 * The seq a log line ends at: an event's `seq`, a seal's tree size, a bridge's last bridged seq;
 * +Infinity for a line that is none of them (it is kept).
 */
function throughSeq(line: string): number {
  let rec: { seq?: unknown; _seal?: { size?: unknown }; _chain_bridge?: { bridged_to_seq?: unknown } };
  try {
    rec = JSON.parse(line) as typeof rec;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
  const n = rec._seal?.size ?? rec._chain_bridge?.bridged_to_seq ?? rec.seq;
  return typeof n === 'number' ? n : Number.POSITIVE_INFINITY;
}

/** Ends a stream; settles once its descriptor is closed (after its writes, or after an error). */
function ended(stream: WriteStream): Promise<void> {
  return new Promise<void>((resolve) => {
    if (stream.closed) return resolve();
    stream.once('close', () => resolve());
    stream.end();
  });
}

/**
 * Whether a file has nothing left to write: no pending lines, no hold or held lines, no write in
 * flight. Its content is then final, and it can be closed and opened again at once.
 */
function quiescent(f: OrgFile): boolean {
  return (
    f.pendingBytes === 0 &&
    f.hold === null &&
    f.held.length === 0 &&
    (f.stream === undefined || f.stream.writableLength === 0)
  );
}

/** Reports something an operator should know (the server's logger). */
export type Warn = (msg: string, fields: Record<string, unknown>) => void;

/** Where the kept part of an org's files ends: lines from `offset` of `paths[file]` on are cut. */
interface Cut {
  readonly file: number;
  readonly offset: number;
}

/**
 * Reads an org's files (oldest first) back from the end, checking each line against the store,
 * until an event the store holds and, before it, the event of the store's last seal before that
 * one. Cuts a torn last line off the newest file. Returns the last line to keep, and where the
 * lines the store does not hold begin (none when all are held).
 */
function checkTail(
  org: string,
  paths: readonly string[],
  source: LogSource,
): { last: string | undefined; cut: Cut | undefined } {
  let last: string | undefined;
  let cut: Cut | undefined;
  let bound = 0; // once `last` is found, the check ends at an event of this seq or before
  let newest = true;
  for (let file = paths.length - 1; file >= 0; file--) {
    const path = paths[file] as string;
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch {
      continue;
    }
    try {
      const size = fstatSync(fd).size;
      if (size === 0) continue;
      const end = lastNewline(fd, size, size) + 1;
      if (end < size) {
        if (newest)
          truncateSync(path, end); // a torn last line (a crash mid-write)
        else {
          cut = { file, offset: end };
          last = undefined;
        }
      }
      newest = false;
      for (const { start, text } of linesBackward(fd, end)) {
        const held = heldLine(org, text, source);
        if (held === undefined) {
          cut = { file, offset: start };
          last = undefined;
          continue;
        }
        if (last === undefined) {
          last = text;
          bound = 'size' in held ? held.size : source.sealedAt(org, held.seq);
        }
        if ('seq' in held && held.seq <= bound) return { last, cut };
      }
    } finally {
      closeSync(fd);
    }
  }
  return { last, cut };
}

/** A line the store holds as it is: an event (by seq and hash) or a seal (the whole line). */
function heldLine(
  org: string,
  text: string,
  source: LogSource,
): { seq: number } | { size: number } | undefined {
  let rec: unknown;
  try {
    rec = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof rec !== 'object' || rec === null) return undefined;
  const { seq, hash, _seal, _chain_bridge } = rec as {
    seq?: unknown;
    hash?: unknown;
    _seal?: { size?: unknown } | null;
    _chain_bridge?: { bridged_to_seq?: unknown } | null;
  };
  if (_chain_bridge !== undefined) {
    const to = _chain_bridge?.bridged_to_seq;
    return typeof to === 'number' && source.bridgeLine(org) === text ? { size: to } : undefined;
  }
  if (_seal !== undefined) {
    const size = _seal?.size;
    if (typeof size !== 'number') return undefined;
    const seal = source.sealAt(org, size);
    return seal !== undefined && sealLine(seal) === text ? { size } : undefined;
  }
  if (typeof seq !== 'number' || typeof hash !== 'string') return undefined;
  return source.eventHash(org, seq) === hash ? { seq } : undefined;
}

/** The complete lines of the first `end` bytes of a file (`end` just after a newline), last first. */
function* linesBackward(fd: number, end: number): Generator<{ start: number; text: string }> {
  if (end === 0) return;
  let parts: Buffer[] = []; // the line being read: its bytes after the chunk at hand
  let chunkEnd = end - 1; // the last line's newline is not part of it
  while (chunkEnd > 0) {
    const chunkStart = Math.max(0, chunkEnd - TAIL_CHUNK);
    const buf = Buffer.allocUnsafe(chunkEnd - chunkStart);
    readSync(fd, buf, 0, buf.length, chunkStart);
    let j = buf.length;
    while (j > 0) {
      const i = buf.lastIndexOf(NEWLINE, j - 1);
      if (i < 0) break;
      parts.unshift(buf.subarray(i + 1, j));
      yield { start: chunkStart + i + 1, text: Buffer.concat(parts).toString('utf8') };
      parts = [];
      j = i;
    }
    parts.unshift(buf.subarray(0, j));
    chunkEnd = chunkStart;
  }
  yield { start: 0, text: Buffer.concat(parts).toString('utf8') };
}

/**
 * Moves the lines from `cut` on out of the log, kept for forensics: the files after the cut one
 * are renamed, the cut one's tail is copied out (and synced) before it is cut off. Returns the
 * files written, oldest first.
 */
function setAside(paths: readonly string[], cut: Cut): string[] {
  const stamp = new Date().toISOString().replace(/:/g, '');
  const moved: string[] = [];
  for (let file = paths.length - 1; file >= cut.file; file--) {
    const path = paths[file] as string;
    if (!existsSync(path)) continue; // the live file, after a rotation
    let to = `${path}.diverged-${stamp}`;
    for (let n = 2; existsSync(to); n++) to = `${path}.diverged-${stamp}-${n}`;
    if (file > cut.file || cut.offset === 0) renameSync(path, to);
    else {
      copyTail(path, cut.offset, to);
      truncateSync(path, cut.offset);
    }
    moved.unshift(to);
  }
  return moved;
}

/** Copies the bytes of `from` after `offset` to a new file `to`, synced. */
function copyTail(from: string, offset: number, to: string): void {
  const src = openSync(from, 'r');
  try {
    const dst = openSync(to, 'wx', 0o600);
    try {
      const buf = Buffer.allocUnsafe(TAIL_CHUNK);
      for (let at = offset; ; ) {
        const n = readSync(src, buf, 0, buf.length, at);
        if (n === 0) break;
        writeSync(dst, buf, 0, n);
        at += n;
      }
      fsyncSync(dst);
    } finally {
      closeSync(dst);
    }
  } finally {
    closeSync(src);
  }
}

/** Where an existing file ends: after event `seq`, or after the seal of `size`. */
function resumeFrom(
  f: Pick<OrgFile, 'queuedSeq' | 'appendedSeq' | 'writtenSeal'>,
  last: string | undefined,
): void {
  if (last === undefined) return;
  let rec: { seq?: unknown; _seal?: { size?: unknown }; _chain_bridge?: { bridged_to_seq?: unknown } };
  try {
    rec = JSON.parse(last) as typeof rec;
  } catch {
    return;
  }
  const sealSize = rec._seal?.size ?? rec._chain_bridge?.bridged_to_seq;
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

/**
 * No JSONL file at all: a sidecar's log lives in its store and is shipped to the control plane,
 * whose org chain writes the JSONL file an auditor reads; a second file per sidecar would only be
 * written, then cut again as what it holds is acknowledged.
 */
export class NoJsonlLog extends JsonlLog {
  override checkAll(): void {}
  override divergedFiles(): string[] {
    return [];
  }
  override events(): void {}
  override hold(): number {
    return 0;
  }
  override seal(): void {}
  override release(): void {}
  override async drain(): Promise<void> {}
  override async rewrite(): Promise<number> {
    return 0;
  }
  override async prune(): Promise<number> {
    return 0;
  }
  override async close(): Promise<void> {}
}
