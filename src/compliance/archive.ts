import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import { erasedLine } from '../audit/chain-log.js';
import { fileNameOf } from '../audit/jsonl-log.js';
import type { AuditEvent } from '../audit/types.js';
import type { ErasureTarget, JsonValue } from '../core/chain/index.js';
import type { ArchiveStore } from './archive-store.js';

/** One file retention wrote: events `from`..`to` of the org chain (with their seals and bridge). */
export interface ArchiveFile {
  readonly store: ArchiveStore;
  /** The org's folder (its file name: fileNameOf). */
  readonly folder: string;
  readonly name: string;
  readonly from: number;
  readonly to: number;
}

const NAME = /^(.+)-([1-9][0-9]*)-([1-9][0-9]*)\.jsonl\.gz$/;

/** The name of the file of the org's events `from`..`to`: `<org>-<from>-<to>.jsonl.gz`. */
export function archiveName(org: string, from: number, to: number): string {
  const name = fileNameOf(org);
  return `${name}-${from}-${to}.jsonl.gz`;
}

/**
 * The retention archive (SERVICE_AUDIT_ARCHIVE) as retention writes it and erasure and DSAR read
 * it: the gzipped JSONL files of each org (`<org>/<org>-<from>-<to>.jsonl.gz`), on local disk, in
 * an S3 bucket or an Azure blob container (ArchiveStore). Events there left the store, but not
 * the deployment: a DSAR shows them and an erasure tombstones them, as it does in the store
 * (docs/audit.md). Retention writes to `target`; erasure and DSAR read every store in `sources`
 * (the local directory always: files an earlier setting wrote hold events too).
 */
export class RetentionArchive {
  constructor(
    readonly target: ArchiveStore | undefined,
    private readonly sources: readonly ArchiveStore[],
  ) {}

  /**
   * The org's archive files, oldest first (none when it has no archive yet). A name found in two
   * stores (a file copied from one to the other) is read from the first of `sources` only.
   */
  async files(org: string): Promise<ArchiveFile[]> {
    const seen = new Set<string>();
    return (await this.#everyCopy(org)).filter((f) => !seen.has(f.name) && seen.add(f.name));
  }

  /** Every archive file of the org in every store, a name in two stores twice, oldest first. */
  async #everyCopy(org: string): Promise<ArchiveFile[]> {
    const folder = fileNameOf(org);
    const out: ArchiveFile[] = [];
    for (const store of this.sources) {
      for (const name of await store.list(folder)) {
        const m = NAME.exec(name);
        if (!m || m[1] !== folder) continue;
        out.push({ store, folder, name, from: Number(m[2]), to: Number(m[3]) });
      }
    }
    // Stable: of two copies, the first source's comes first (files() keeps that one).
    return out.sort((a, b) => a.from - b.from);
  }

  /** The archived events of `org` with `from ≤ seq ≤ to`, in seq order (seal and bridge lines skipped). */
  async *events(org: string, from = 1, to = Number.MAX_SAFE_INTEGER): AsyncGenerator<AuditEvent> {
    for (const f of await this.files(org)) {
      if (f.to < from || f.from > to) continue;
      for await (const line of linesOf(await f.store.read(f.folder, f.name))) {
        if (!line.startsWith('{"_chain_version"')) continue;
        const e = JSON.parse(line) as AuditEvent;
        if (e.seq < from) continue;
        if (e.seq > to) return;
        yield e;
      }
    }
  }

  /**
   * Writes `lines` (the org's events `from`..`to`, with their seals and the earlier bridge) as a
   * gzipped file to the target store, through a local staging file: the file is whole and synced
   * (local) or uploaded with its SHA-256 signed (S3) before it counts. Returns what the bridge
   * records of it: the store's type, where the file is, its SHA-256, size and line count.
   */
  async write(
    org: string,
    from: number,
    to: number,
    lines: Iterable<string>,
  ): Promise<Record<string, JsonValue>> {
    const store = this.target;
    if (store === undefined) throw new Error('no archive is configured');
    const folder = fileNameOf(org);
    const name = archiveName(org, from, to);
    let count = 0;
    const written = await writeGz(
      await store.staging(folder, name),
      Readable.from(
        (function* () {
          for (const l of lines) {
            count++;
            yield `${l}\n`;
          }
        })(),
      ),
    );
    const at = await store.put(folder, name, written.file, written.sha256, written.bytes);
    return {
      type: store.type,
      ...at,
      sha256: written.sha256,
      bytes: written.bytes,
      lines: count,
      compression: 'gzip',
    };
  }

  /**
   * Tombstones the named fields of archived events, as `ChainLog.erase` does in the store (the
   * line's hash unchanged): each file holding one is rewritten (a staging copy, then put over it,
   * in every store that holds a copy). Returns the files rewritten and the lines changed.
   */
  async erase(
    org: string,
    targets: readonly ErasureTarget[],
  ): Promise<{ files: Array<{ file: string; lines: number }>; lines: number }> {
    const byId = new Map<string, readonly string[]>();
    for (const t of targets) byId.set(t.event_id, [...(byId.get(t.event_id) ?? []), ...t.fields]);
    const files: Array<{ file: string; lines: number }> = [];
    let total = 0;
    if (byId.size === 0) return { files, lines: 0 };
    // Every copy: a file copied from the local archive to a bucket (a move to S3) is two, and an
    // erasure must reach both.
    for (const f of await this.#everyCopy(org)) {
      const changed = await rewriteGz(f, (line) => {
        if (!line.startsWith('{"_chain_version"')) return undefined;
        const fields = byId.get((JSON.parse(line) as { id: string }).id);
        return fields === undefined ? undefined : erasedLine(line, fields)?.json;
      });
      if (changed > 0) files.push({ file: f.name, lines: changed });
      total += changed;
    }
    return { files, lines: total };
  }
}

/** The lines of a gzipped stream; the streams are closed however the reading ends. */
async function* linesOf(input: Readable): AsyncGenerator<string> {
  const gunzip = input.pipe(createGunzip());
  const lines = createInterface({ input: gunzip, crlfDelay: Infinity });
  try {
    yield* lines;
  } finally {
    lines.close();
    gunzip.destroy();
    input.destroy();
  }
}

/** Gzips `source` into the new file `file`, with the SHA-256 and size of what was written. */
async function writeGz(
  file: string,
  source: Readable,
): Promise<{ file: string; sha256: string; bytes: number }> {
  const digest = createHash('sha256');
  let bytes = 0;
  try {
    await pipeline(
      source,
      createGzip(),
      new Transform({
        transform(chunk: Buffer, _enc, cb) {
          digest.update(chunk);
          bytes += chunk.length;
          cb(null, chunk);
        },
      }),
      createWriteStream(file, { mode: 0o600, flags: 'wx' }),
    );
  } catch (err) {
    await rm(file, { force: true });
    throw err;
  }
  return { file, sha256: digest.digest('hex'), bytes };
}

/** Rewrites an archive file through `edit` when a line changes (a staging copy, then put over it). */
async function rewriteGz(f: ArchiveFile, edit: (line: string) => string | undefined): Promise<number> {
  let changed = 0;
  const input = await f.store.read(f.folder, f.name);
  const written = await writeGz(
    await f.store.staging(f.folder, f.name),
    Readable.from(
      (async function* () {
        for await (const line of linesOf(input)) {
          const next = edit(line);
          if (next !== undefined && next !== line) changed++;
          yield `${next ?? line}\n`;
        }
      })(),
    ),
  );
  if (changed === 0) {
    await rm(written.file, { force: true });
    return 0;
  }
  await f.store.put(f.folder, f.name, written.file, written.sha256, written.bytes);
  return changed;
}
