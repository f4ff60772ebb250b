import { createReadStream, createWriteStream, readdirSync } from 'node:fs';
import { open, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createGzip } from 'node:zlib';
import { erasedLine } from '../audit/chain-log.js';
import { fileNameOf } from '../audit/jsonl-log.js';
import type { AuditEvent } from '../audit/types.js';
import type { ErasureTarget } from '../core/chain/index.js';

/** One file retention wrote: events `from`..`to` of the org chain (with their seals and bridge). */
export interface ArchiveFile {
  readonly path: string;
  readonly name: string;
  readonly from: number;
  readonly to: number;
}

const NAME = /^(.+)-([1-9][0-9]*)-([1-9][0-9]*)\.jsonl\.gz$/;

/** Where retention writes the org's events `from`..`to`: `<dir>/<org>/<org>-<from>-<to>.jsonl.gz`. */
export function archivePath(dir: string, org: string, from: number, to: number): string {
  const name = fileNameOf(org);
  return join(dir, name, `${name}-${from}-${to}.jsonl.gz`);
}

/**
 * The local retention archive (`SERVICE_AUDIT_ARCHIVE=local`) as erasure and DSAR read it: the
 * gzipped JSONL files retention wrote per org (`<dir>/<org>/<org>-<from>-<to>.jsonl.gz`,
 * compliance/retention.ts). Events there left the store, but not the deployment: a DSAR shows
 * them and an erasure tombstones them, as it does in the store (docs/audit.md).
 */
export class RetentionArchive {
  constructor(private readonly dir: string) {}

  /** The org's archive files, oldest first (none when it has no archive yet). */
  files(org: string): ArchiveFile[] {
    const name = fileNameOf(org);
    const folder = join(this.dir, name);
    let entries: string[];
    try {
      entries = readdirSync(folder);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const out: ArchiveFile[] = [];
    for (const e of entries) {
      const m = NAME.exec(e);
      if (!m || m[1] !== name) continue;
      out.push({ path: join(folder, e), name: e, from: Number(m[2]), to: Number(m[3]) });
    }
    return out.sort((a, b) => a.from - b.from);
  }

  /** The archived events of `org` with `from ≤ seq ≤ to`, in seq order (seal and bridge lines skipped). */
  async *events(org: string, from = 1, to = Number.MAX_SAFE_INTEGER): AsyncGenerator<AuditEvent> {
    for (const f of this.files(org)) {
      if (f.to < from || f.from > to) continue;
      for await (const line of linesOf(f.path)) {
        if (!line.startsWith('{"_chain_version"')) continue;
        const e = JSON.parse(line) as AuditEvent;
        if (e.seq < from) continue;
        if (e.seq > to) return;
        yield e;
      }
    }
  }

  /**
   * Tombstones the named fields of archived events, as `ChainLog.erase` does in the store (the
   * line's hash unchanged): each file holding one is rewritten into a synced copy renamed over
   * it. Returns the files rewritten (with their new SHA-256) and the lines changed.
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
    for (const f of this.files(org)) {
      const changed = await rewriteGz(f.path, (line) => {
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

/** The lines of a gzipped file; its streams are closed however the reading ends. */
async function* linesOf(path: string): AsyncGenerator<string> {
  const input = createReadStream(path);
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

/** Rewrites a gzipped JSONL file through `edit` when a line changes (synced copy, then renamed). */
async function rewriteGz(path: string, edit: (line: string) => string | undefined): Promise<number> {
  const tmp = `${path}.rewrite`;
  await rm(tmp, { force: true }); // a copy left by a crash
  let changed = 0;
  try {
    await pipeline(
      Readable.from(
        (async function* () {
          for await (const line of linesOf(path)) {
            const next = edit(line);
            if (next !== undefined && next !== line) changed++;
            yield `${next ?? line}\n`;
          }
        })(),
      ),
      createGzip(),
      createWriteStream(tmp, { mode: 0o600 }),
    );
    if (changed === 0) {
      await rm(tmp, { force: true });
      return 0;
    }
    await syncAndRename(tmp, path);
    return changed;
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/** Makes a finished file durable, then puts it in place (a crash leaves the old file or the new one). */
export async function syncAndRename(tmp: string, path: string): Promise<void> {
  const fh = await open(tmp, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
}
