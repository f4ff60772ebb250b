import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import type { JsonValue } from '../core/chain/index.js';

/**
 * Where retention archive files live (SERVICE_AUDIT_ARCHIVE): a folder per org holding its
 * `<org>-<from>-<to>.jsonl.gz` files, on local disk, in an S3 bucket or in an Azure blob
 * container. A file is written whole, read whole and replaced whole (an erasure rewrites it).
 */
export interface ArchiveStore {
  readonly type: 'local' | 's3' | 'blob';
  /** Where the files go, for the settings view: never a credential. */
  readonly where: Record<string, JsonValue>;
  /** The names of the files in `folder`, none when it has none. */
  list(folder: string): Promise<string[]>;
  /** The bytes of `folder/name`. */
  read(folder: string, name: string): Promise<Readable>;
  /**
   * A local path to write a file bound for `folder/name` into, before `put` (next to it on local
   * disk, so `put` is a rename).
   */
  staging(folder: string, name: string): Promise<string>;
  /**
   * Puts the finished file `file` (from `staging`; `sha256` hex and `bytes` of its content) at
   * `folder/name`, replacing what was there. `file` is gone afterwards, whatever the outcome.
   * Returns where it now is, for the bridge record (`file`, `key`, `blob`: never a credential).
   */
  put(
    folder: string,
    name: string,
    file: string,
    sha256: string,
    bytes: number,
  ): Promise<Record<string, JsonValue>>;
}

/** `SERVICE_AUDIT_ARCHIVE=local`: the files under a directory (`<dir>/<org>/<file>`). */
export class LocalArchiveStore implements ArchiveStore {
  readonly type = 'local';

  constructor(private readonly dir: string) {}

  get where(): Record<string, JsonValue> {
    return { dir: this.dir };
  }

  async list(folder: string): Promise<string[]> {
    try {
      return await readdir(join(this.dir, folder));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }

  async read(folder: string, name: string): Promise<Readable> {
    const stream = createReadStream(join(this.dir, folder, name));
    // Opened before it is handed on, so a missing file is this call's failure.
    await new Promise<void>((resolve, reject) => {
      stream.once('open', () => resolve());
      stream.once('error', reject);
    });
    return stream;
  }

  async staging(folder: string, name: string): Promise<string> {
    await mkdir(join(this.dir, folder), { recursive: true, mode: 0o700 });
    return join(this.dir, folder, `${name}.${randomBytes(4).toString('hex')}.tmp`);
  }

  async put(folder: string, name: string, file: string): Promise<Record<string, JsonValue>> {
    try {
      await syncAndRename(file, join(this.dir, folder, name));
    } catch (err) {
      await rm(file, { force: true });
      throw err;
    }
    return { file: `${folder}/${name}` };
  }
}

/**
 * An S3 or blob store: files wait under a local staging directory (the data dir's
 * `archive-staging`) until they are uploaded whole, and are removed after, uploaded or not.
 */
export abstract class RemoteArchiveStore {
  constructor(
    private readonly stagingDir: string,
    /** The largest file one upload takes (the service's limit for a single PUT). */
    private readonly maxBytes: number,
    private readonly limitText: string,
  ) {}

  async staging(folder: string, name: string): Promise<string> {
    await mkdir(this.stagingDir, { recursive: true, mode: 0o700 });
    return join(this.stagingDir, `${folder}-${name}.${randomBytes(4).toString('hex')}.tmp`);
  }

  async put(
    folder: string,
    name: string,
    file: string,
    sha256: string,
    bytes: number,
  ): Promise<Record<string, JsonValue>> {
    try {
      if (bytes > this.maxBytes)
        throw new Error(`the file is ${bytes} bytes: ${this.limitText} (run retention more often)`);
      return await this.upload(folder, name, file, sha256, bytes);
    } finally {
      await rm(file, { force: true });
    }
  }

  /** Uploads the staging file `file` to `folder/name`; returns where it is (ArchiveStore.put). */
  protected abstract upload(
    folder: string,
    name: string,
    file: string,
    sha256: string,
    bytes: number,
  ): Promise<Record<string, JsonValue>>;
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
