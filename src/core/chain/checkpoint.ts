import { fromBase64, isHash, toBase64 } from './bytes.js';
import { ChainError } from './errors.js';

/** Value of the `alg` extension line of a govgate seal. */
export const SEAL_ALG_LINE = 'ed25519+ml-dsa-65';

/** What a seal commits to: a C2SP tlog-checkpoint body plus govgate's two extension lines. */
export interface CheckpointInput {
  /** `govgate/<org_id>` for an org chain (see `checkpointOrigin`). */
  origin: string;
  /** Tree size: the number of events covered (the `seq` of the last one). */
  size: number;
  /** RFC 6962 root of the first `size` event hashes (32 bytes). */
  rootHash: Uint8Array;
  /** `hash` of the event with `seq = size` (hex); GENESIS for an empty tree. */
  head: string;
  alg?: string;
}

export interface Checkpoint {
  origin: string;
  size: number;
  rootHash: Uint8Array;
  /** The `head <hex>` extension, when present. */
  head: string | undefined;
  /** The `alg <name>` extension, when present. */
  alg: string | undefined;
  /** Every extension line, in order. */
  extensions: string[];
}

const SIZE = /^(?:0|[1-9][0-9]*)$/;
const CONTROL = /[\u0000-\u001f]/;

export function checkpointOrigin(orgId: string): string {
  return `govgate/${orgId}`;
}

/**
 * The note body of a seal:
 *
 *     govgate/<org_id>\n<size>\n<base64 root>\nhead <hex>\nalg ed25519+ml-dsa-65\n
 */
export function formatCheckpoint(c: CheckpointInput): string {
  if (c.origin.length === 0 || CONTROL.test(c.origin)) {
    throw new ChainError('invalid_checkpoint', 'origin is a non-empty single line');
  }
  if (!Number.isSafeInteger(c.size) || c.size < 0) {
    throw new ChainError('invalid_checkpoint', 'size is a non-negative integer');
  }
  if (c.rootHash.length !== 32) throw new ChainError('invalid_checkpoint', 'root hash is 32 bytes');
  if (!isHash(c.head)) throw new ChainError('invalid_checkpoint', 'head is a hex event hash');
  const alg = c.alg ?? SEAL_ALG_LINE;
  if (alg.length === 0 || CONTROL.test(alg)) throw new ChainError('invalid_checkpoint', 'alg is one line');
  return `${c.origin}\n${c.size}\n${toBase64(c.rootHash)}\nhead ${c.head}\nalg ${alg}\n`;
}

/** Parses a checkpoint note body; throws `ChainError('invalid_checkpoint')` when malformed. */
export function parseCheckpoint(body: string): Checkpoint {
  if (!body.endsWith('\n')) throw new ChainError('invalid_checkpoint', 'checkpoint ends in a newline');
  const lines = body.slice(0, -1).split('\n');
  const [origin, sizeText, rootText, ...extensions] = lines;
  if (origin === undefined || sizeText === undefined || rootText === undefined || origin.length === 0) {
    throw new ChainError('invalid_checkpoint', 'checkpoint has origin, size and root lines');
  }
  if (!SIZE.test(sizeText)) throw new ChainError('invalid_checkpoint', 'tree size is a decimal integer');
  const size = Number(sizeText);
  if (!Number.isSafeInteger(size)) throw new ChainError('invalid_checkpoint', 'tree size is too large');
  const rootHash = fromBase64(rootText);
  if (rootHash === undefined || rootHash.length !== 32) {
    throw new ChainError('invalid_checkpoint', 'root hash is base64 of 32 bytes');
  }
  let head: string | undefined;
  let alg: string | undefined;
  for (const line of extensions) {
    if (line.length === 0) throw new ChainError('invalid_checkpoint', 'extension lines are non-empty');
    if (line.startsWith('head ') && head === undefined) head = line.slice(5);
    else if (line.startsWith('alg ') && alg === undefined) alg = line.slice(4);
  }
  return { origin, size, rootHash, head, alg, extensions };
}
