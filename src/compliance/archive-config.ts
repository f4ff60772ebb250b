import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { RetentionArchive } from './archive.js';
import { type ArchiveStore, LocalArchiveStore } from './archive-store.js';
import { BlobArchiveStore } from './blob-archive.js';
import { S3ArchiveStore } from './s3-archive.js';

/**
 * The retention archive SERVICE_AUDIT_ARCHIVE names. Runs write to it; DSAR and erasure read it and
 * the local directory too, whatever the setting says now: files an earlier setting wrote there
 * hold events as well. A remote store's files wait in `<data dir>/archive-staging` until uploaded.
 */
export function retentionArchive(config: Pick<Config, 'audit' | 'dataDir'>): RetentionArchive {
  const a = config.audit;
  const local = new LocalArchiveStore(a.archiveDir);
  const staging = join(config.dataDir, 'archive-staging');
  let remote: ArchiveStore | undefined;
  if (a.archive === 's3' && a.s3 !== undefined) remote = new S3ArchiveStore(a.s3, staging);
  if (a.archive === 'blob' && a.blobUrl !== undefined) remote = new BlobArchiveStore(a.blobUrl, staging);
  const target = a.archive === 'none' ? undefined : (remote ?? local);
  return new RetentionArchive(target, remote === undefined ? [local] : [remote, local]);
}
