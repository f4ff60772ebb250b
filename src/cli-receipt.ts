import { readFile } from 'node:fs/promises';
import { VerifyInputError, verifiersFromKeys } from './audit/verify-file.js';
import { verifyArgs } from './cli-args.js';
import type { VerifyIO } from './cli-verify.js';
import {
  checkPersonalField,
  checkpointOrigin,
  duplicateMember,
  fromHex,
  isHash,
  parseCheckpoint,
  type Receipt,
  receiptOrigin,
  verifyConsistency,
  verifyNote,
  verifyReceipt,
} from './core/chain/index.js';

export const RECEIPT_USAGE = `Usage: govgate verify-receipt <event-or-receipt.json> --keys <signing-key.json> [--event <event.json>] [--org <org_id>] [--json]

Checks offline that one audit event is in its org's sealed chain: the receipt's checkpoint is
signed by both keys (Ed25519 and ML-DSA-65), its tree size is the receipt's, and the RFC 9162
inclusion proof leads from the event's hash to the checkpoint's root.

  <file>          an event as GET /api/audit/events/{id} serves it (its receipt inlined: the
                  event itself is checked too), or a receipt (GET /api/audit/events/{id}/receipt)
  --keys <file>   the signing-key document (required)
  --event <file>  with a bare receipt: the event, whose hash is recomputed from its content
  --org <org_id>  the org whose chain the checkpoint must be (its origin line govgate/<org_id>)
  --json          print {ok, reason?, event_id, seq, tree_size, origin}

Exit status: 0 included, 1 not (content_modified, signature_invalid, checkpoint_mismatch,
not_included, org_mismatch), 2 usage or input error.`;

/** `govgate verify-receipt`. Resolves to the exit code: 0 included, 1 not, 2 usage or input error. */
export async function runVerifyReceipt(argv: string[], io: VerifyIO): Promise<number> {
  const args = verifyArgs(argv, io, {
    command: 'verify-receipt',
    usage: RECEIPT_USAGE,
    extra: ['event'],
    files: (p) => (p.length === 1 ? p : 'give one event or receipt file'),
  });
  if (typeof args === 'number') return args;
  const { files } = args;
  const values = { keys: args.keys, org: args.org, json: args.json, event: args.options.event };

  // A member a file repeats reads one way here (JSON.parse keeps the last) and maybe another
  // to whoever reads the file: the event it gives is not the one checked.
  let repeated: string | undefined;
  const read = async (path: string, what: string): Promise<unknown> => {
    const { value, duplicate } = await readJsonChecked(path, what);
    repeated ??= duplicate;
    return value;
  };
  let receipt: Receipt;
  let event: Record<string, unknown> | undefined;
  let verifiers: ReturnType<typeof verifiersFromKeys>;
  try {
    verifiers = verifiersFromKeys(await read(values.keys, 'keys file'));
    const given = await read(files[0] as string, 'file');
    if (!isRecord(given)) throw new VerifyInputError('unreadable_file', `${files[0]} is not a JSON object`);
    if (isRecord(given.receipt)) {
      // An event from the API: the receipt inlined, the event hashed without its API members.
      const { receipt: inlined, seal: _seal, ...rest } = given;
      receipt = inlined as unknown as Receipt;
      event = rest;
    } else {
      receipt = given as unknown as Receipt;
      if (values.event !== undefined) {
        const e = await read(values.event, 'event');
        if (!isRecord(e))
          throw new VerifyInputError('unreadable_file', `${values.event} is not a JSON object`);
        const { receipt: _r, seal: _s, ...rest } = e;
        event = rest;
      }
    }
    if (typeof receipt.checkpoint !== 'string' || typeof receipt.seq !== 'number')
      throw new VerifyInputError('unreadable_file', 'the file holds no receipt (checkpoint, seq)');
  } catch (err) {
    if (!(err instanceof VerifyInputError)) throw err;
    io.stderr.write(`govgate verify-receipt: ${err.message}\n`);
    return 2;
  }

  const origin = receiptOrigin(receipt) ?? null;
  let verdict: { ok: true } | { ok: false; reason: string } =
    repeated === undefined
      ? verifyReceipt(receipt, verifiers, event)
      : { ok: false, reason: 'content_modified' };
  if (verdict.ok && event !== undefined && event.id !== receipt.event_id)
    verdict = { ok: false, reason: 'content_modified' };
  if (verdict.ok && values.org !== undefined && origin !== checkpointOrigin(values.org))
    verdict = { ok: false, reason: 'org_mismatch' };
  // Tombstoned personal fields: the receipt proves the event as stored, not that an erasure
  // authorised the tombstone (the erasure event does: verify the chain).
  const erased = event === undefined ? [] : erasedFields(event);
  const result = {
    ok: verdict.ok,
    ...(verdict.ok ? {} : { reason: verdict.reason }),
    event_id: receipt.event_id ?? null,
    seq: receipt.seq,
    tree_size: receipt.tree_size ?? null,
    origin,
    event_checked: event !== undefined,
    erased_fields: erased,
  };
  if (values.json === true) io.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    // Without the event, the id is the receipt's own word: only the hash is proven.
    const id = event === undefined ? `${result.event_id} (as the receipt names it)` : result.event_id;
    let out = verdict.ok
      ? `govgate verify-receipt: INCLUDED\n  event        ${id} (seq ${result.seq})\n  sealed in    ${origin} at tree size ${result.tree_size}\n  event        ${event === undefined ? 'not given: only its hash is proven' : 'content checked'}\n`
      : `govgate verify-receipt: NOT PROVEN (${result.reason})\n  event        ${id} (seq ${result.seq})\n  checkpoint   ${origin ?? 'unreadable'}\n`;
    if (repeated !== undefined)
      out += `  repeated     the member "${repeated}" appears twice in one object\n`;
    if (verdict.ok && erased.length > 0)
      out += `  erased       ${erased.join(', ')}: tombstoned; the receipt does not prove the erasure (govgate verify the chain: its erasure event must name them)\n`;
    io.stdout.write(out);
  }
  return verdict.ok ? 0 : 1;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export const CONSISTENCY_USAGE = `Usage: govgate verify-consistency <consistency.json> --keys <signing-key.json> [--org <org_id>] [--json]

Checks offline that an org's chain at one seal is a prefix of the chain at a later seal: nothing
the earlier seal covered was rewritten or dropped since. <consistency.json> is the answer of
GET /api/audit/consistency?from=M&to=N. Both checkpoints must be signed by both keys
(Ed25519 and ML-DSA-65), of the sizes given, of one log, and the RFC 9162 consistency proof must
lead from the first root to the second.

  --keys <file>   the signing-key document (required)
  --org <org_id>  the org whose chain both checkpoints must be (origin govgate/<org_id>)
  --json          print {ok, reason?, from_size, to_size, origin}

Exit status: 0 consistent, 1 not (signature_invalid, checkpoint_mismatch, org_mismatch,
inconsistent), 2 usage or input error.`;

/** `govgate verify-consistency`. Resolves to 0 consistent, 1 not, 2 usage or input error. */
export async function runVerifyConsistency(argv: string[], io: VerifyIO): Promise<number> {
  const args = verifyArgs(argv, io, {
    command: 'verify-consistency',
    usage: CONSISTENCY_USAGE,
    files: (p) => (p.length === 1 ? p : 'give one consistency file'),
  });
  if (typeof args === 'number') return args;
  const { files } = args;
  const values = { keys: args.keys, org: args.org, json: args.json };
  let given: Record<string, unknown>;
  let verifiers: ReturnType<typeof verifiersFromKeys>;
  try {
    verifiers = verifiersFromKeys(await readJson(values.keys, 'keys file'));
    const raw = await readJson(files[0] as string, 'file');
    if (
      !isRecord(raw) ||
      typeof raw.from_checkpoint !== 'string' ||
      typeof raw.to_checkpoint !== 'string' ||
      !Array.isArray(raw.consistency_proof)
    )
      throw new VerifyInputError(
        'unreadable_file',
        'the file holds no consistency proof (from_checkpoint, to_checkpoint, consistency_proof)',
      );
    given = raw;
  } catch (err) {
    if (!(err instanceof VerifyInputError)) throw err;
    io.stderr.write(`govgate verify-consistency: ${err.message}\n`);
    return 2;
  }
  const fromSize = given.from_size;
  const toSize = given.to_size;
  const check = (): { ok: true; origin: string } | { ok: false; reason: string; origin: string | null } => {
    const a = verifyNote(given.from_checkpoint as string, verifiers);
    const b = verifyNote(given.to_checkpoint as string, verifiers);
    if (!a.ok || !b.ok) return { ok: false, reason: 'signature_invalid', origin: null };
    let from: ReturnType<typeof parseCheckpoint>;
    let to: ReturnType<typeof parseCheckpoint>;
    try {
      from = parseCheckpoint(a.body);
      to = parseCheckpoint(b.body);
    } catch {
      return { ok: false, reason: 'checkpoint_mismatch', origin: null };
    }
    if (from.origin !== to.origin || from.size !== fromSize || to.size !== toSize)
      return { ok: false, reason: 'checkpoint_mismatch', origin: to.origin };
    if (values.org !== undefined && to.origin !== checkpointOrigin(values.org))
      return { ok: false, reason: 'org_mismatch', origin: to.origin };
    const proof: Uint8Array[] = [];
    for (const h of given.consistency_proof as unknown[]) {
      const bytes = typeof h === 'string' && isHash(h) ? fromHex(h) : undefined;
      if (bytes === undefined) return { ok: false, reason: 'inconsistent', origin: to.origin };
      proof.push(bytes);
    }
    return verifyConsistency(from.size, to.size, from.rootHash, to.rootHash, proof)
      ? { ok: true, origin: to.origin }
      : { ok: false, reason: 'inconsistent', origin: to.origin };
  };
  const verdict = check();
  const result = {
    ok: verdict.ok,
    ...(verdict.ok ? {} : { reason: verdict.reason }),
    from_size: typeof fromSize === 'number' ? fromSize : null,
    to_size: typeof toSize === 'number' ? toSize : null,
    origin: verdict.origin,
  };
  if (values.json === true) io.stdout.write(`${JSON.stringify(result)}\n`);
  else
    io.stdout.write(
      verdict.ok
        ? `govgate verify-consistency: CONSISTENT\n  log          ${verdict.origin}\n  sizes        ${result.from_size} is a prefix of ${result.to_size}\n`
        : `govgate verify-consistency: NOT PROVEN (${verdict.reason})\n  sizes        ${result.from_size} → ${result.to_size}\n`,
    );
  return verdict.ok ? 0 : 1;
}

async function readJson(path: string, what: string): Promise<unknown> {
  return (await readJsonChecked(path, what)).value;
}

/** A JSON file, and the first member name one of its objects repeats (see duplicateMember). */
async function readJsonChecked(path: string, what: string): Promise<{ value: unknown; duplicate?: string }> {
  let text: string;
  let value: unknown;
  try {
    text = await readFile(path, 'utf8');
    value = JSON.parse(text);
  } catch (err) {
    const why = err instanceof SyntaxError ? `not JSON (${err.message})` : (err as Error).message;
    throw new VerifyInputError('unreadable_file', `cannot read ${what} ${path}: ${why}`);
  }
  const duplicate = duplicateMember(text);
  return duplicate === undefined ? { value } : { value, duplicate };
}

/** The personal fields of `event` that hold a tombstone instead of their value. */
function erasedFields(event: Record<string, unknown>): string[] {
  const personal = event.personal;
  if (!isRecord(personal)) return [];
  return Object.keys(personal).filter((f) => checkPersonalField(f, personal[f]) === 'erased');
}
