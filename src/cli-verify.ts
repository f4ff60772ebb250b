import { readFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { type VerifyFileResult, VerifyInputError, verifyFile } from './audit/verify-file.js';
import { verifyArgs } from './cli-args.js';
import { duplicateMember, type IntegrityResult } from './core/chain/index.js';

/** Where `govgate verify` writes; `isTTY` (of stderr) enables the progress bar. */
export interface VerifyIO {
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown };
  isTTY: boolean;
}

export const VERIFY_USAGE = `Usage: govgate verify <file.jsonl> [more files…] --keys <signing-key.json> [--org <org_id>] [--checkpoint <seal.json>] [--json]

Checks an exported audit chain (GET /api/audit/export?format=jsonl) offline, with nothing but
the public keys (the body of GET /api/audit/signing-key). Rotated logs are given oldest first,
e.g. org.1.jsonl org.2.jsonl org.jsonl, and are checked as one chain.

  --keys <file>        the signing-key document (required)
  --org <org_id>       the org whose chain this must be: every seal must name its log
                       (govgate/<org_id>). Every org's chain is signed by the same keys, so
                       without it another org's intact export is intact too
  --checkpoint <file>  a seal saved earlier: a {"_seal": …} line of an earlier export, or an
                       event from the API (GET /api/audit/events/{id}, seal inlined). The files must hold the chain it signed:
                       a file cut at its end is a sealed chain of its own, and only this check
                       finds the events that were cut off (compromised, exit 1)
  --json               print the result object (the shape of GET /api/audit/integrity, plus
                       origin, sealed_through and unsealed_events, and checkpoint when one is
                       given)

Exit status:
  0  intact: every event is covered by a valid seal (or the file holds no events)
  1  compromised: an event, link or seal does not check out (tampering or damage)
  2  usage or input error
  3  unsealed: nothing is wrong, but some events are covered by no valid seal (the tail after
     the last seal, or every event when there is none), so nothing proves who wrote them. A
     live log's last ~250 ms is normal; an export taken when the chain is quiet has none.`;

const PROGRESS_MIN_BYTES = 1 << 20;
const REDRAW_MS = 100;
const BAR_WIDTH = 24;
const MAX_LISTED = 20;
const MB = 1024 * 1024;

const int = new Intl.NumberFormat('en-US');

/**
 * `govgate verify`. `argv` holds the arguments after the command name. Resolves to the exit code:
 * 0 intact or empty, 1 compromised, 2 usage error, unreadable file or invalid keys document,
 * 3 unsealed (events no valid seal covers; see `VerifyStatus`).
 */
export async function runVerify(argv: string[], io: VerifyIO): Promise<number> {
  const args = verifyArgs(argv, io, {
    command: 'verify',
    usage: VERIFY_USAGE,
    extra: ['checkpoint'],
    // Tolerate being handed the command name too (`verify a.jsonl …`).
    files: (p) => {
      const files = p[0] === 'verify' && p.length > 1 ? p.slice(1) : p;
      return files.length === 0 ? 'no chain file given' : files;
    },
  });
  if (typeof args === 'number') return args;
  const { files } = args;
  const values = { keys: args.keys, org: args.org, json: args.json, checkpoint: args.options.checkpoint };

  let keysDoc: unknown;
  try {
    keysDoc = JSON.parse(await readFile(values.keys, 'utf8'));
  } catch (err) {
    const why = err instanceof SyntaxError ? `not JSON (${err.message})` : (err as Error).message;
    io.stderr.write(`govgate verify: cannot read keys file ${values.keys}: ${why}\n`);
    return 2;
  }

  let checkpoint: unknown;
  if (values.checkpoint !== undefined) {
    try {
      const text = await readFile(values.checkpoint, 'utf8');
      checkpoint = JSON.parse(text);
      // A repeated member reads one way here and maybe another to whoever saved the file.
      const repeated = duplicateMember(text);
      if (repeated !== undefined) throw new Error(`the member "${repeated}" appears twice in one object`);
    } catch (err) {
      const why = err instanceof SyntaxError ? `not JSON (${err.message})` : (err as Error).message;
      io.stderr.write(`govgate verify: cannot read checkpoint file ${values.checkpoint}: ${why}\n`);
      return 2;
    }
  }

  const bar = io.isTTY ? new ProgressBar(io.stderr) : undefined;
  let result: VerifyFileResult;
  try {
    result = await verifyFile(
      files,
      keysDoc,
      Object.assign(
        bar === undefined ? {} : { onProgress: bar.update },
        { checkpoint },
        values.org === undefined ? {} : { org: values.org },
      ),
    );
  } catch (err) {
    bar?.clear();
    if (err instanceof VerifyInputError) {
      const what =
        err.code === 'invalid_keys'
          ? `invalid keys file ${values.keys}: `
          : err.code === 'invalid_checkpoint'
            ? `invalid checkpoint file ${values.checkpoint}: `
            : '';
      io.stderr.write(`govgate verify: ${what}${err.message}\n`);
    } else {
      // Never exit 1 on a crash: 1 means the chain was found compromised.
      const detail = err instanceof Error ? (err.stack ?? err.message) : String(err);
      io.stderr.write(`govgate verify: internal error: ${detail}\n`);
    }
    return 2;
  }
  bar?.clear();

  io.stdout.write(
    values.json === true ? `${JSON.stringify(integrityOnly(result))}\n` : summary(result, files),
  );
  return EXIT[result.status];
}

const EXIT: Record<VerifyFileResult['status'], number> = { intact: 0, empty: 0, compromised: 1, unsealed: 3 };

/**
 * The GET /api/audit/integrity shape (spec 2.6; `status` may also be `unsealed`), with what the
 * seals cover and how many later erasures the file's authorities prove, nothing else file-specific.
 */
function integrityOnly(
  r: VerifyFileResult,
): Omit<IntegrityResult, 'status'> &
  Pick<
    VerifyFileResult,
    'status' | 'origin' | 'sealed_through' | 'unsealed_events' | 'erasure_authorities' | 'bridged_through'
  > &
  Partial<Pick<VerifyFileResult, 'checkpoint'>> {
  const out = {
    status: r.status,
    events: r.events,
    valid: r.valid,
    broken: r.broken,
    broken_events: r.broken_events,
    chain_length: r.chain_length,
    current_head: r.current_head,
    origin: r.origin,
    sealed_through: r.sealed_through,
    unsealed_events: r.unsealed_events,
    erasure_authorities: r.erasure_authorities,
    bridged_through: r.bridged_through,
  };
  return r.checkpoint === null ? out : Object.assign(out, { checkpoint: r.checkpoint });
}

function summary(r: VerifyFileResult, files: readonly string[]): string {
  const row = (label: string, value: string): string => `  ${label.padEnd(13)}${value}\n`;
  let out = `govgate verify: ${files.length === 1 ? files[0] : `${files.length} files, one chain`}\n`;
  out += row('status', r.status.toUpperCase());
  if (r.origin !== null) out += row('origin', r.origin);
  out += row('events', int.format(r.events));
  out += row('valid', int.format(r.valid));
  out += row('broken', int.format(r.broken));
  out += row('chain length', int.format(r.chain_length));
  if (r.bridged_through > 0)
    out += row(
      'starts',
      `after a bridge over seq 1-${int.format(r.bridged_through)} (a retention cut or a window export: those events are not in the file; the bridge's seal proves the chain's state there)`,
    );
  out += row('head', r.current_head);
  out += row('seals', `${int.format(r.seals_checked)} checked (Ed25519 + ML-DSA-65)`);
  if (r.erasure_authorities > 0)
    out += row('erasures', `${int.format(r.erasure_authorities)} made later, proven by their receipts`);
  out += row('sealed', r.sealed_through > 0 ? `through seq ${int.format(r.sealed_through)}` : 'nothing');
  out += row('unsealed', int.format(r.unsealed_events));
  out += row('lines', int.format(r.lines));
  const cp = r.checkpoint;
  if (cp !== null) {
    out += row(
      'checkpoint',
      cp.matched
        ? `${int.format(cp.size)} events, matched`
        : r.chain_length < cp.size
          ? `NOT MATCHED: the chain ends at seq ${int.format(r.chain_length)}, before the checkpoint's ${int.format(cp.size)} events: events were cut off its end`
          : `NOT MATCHED: the first ${int.format(cp.size)} events are not the ones the checkpoint signed`,
    );
  }
  const found = r.broken_events;
  if (found.length > 0) {
    const shown = found.slice(0, MAX_LISTED);
    const of = found.length > shown.length ? ` (first ${shown.length} of ${int.format(found.length)})` : '';
    out += `\nfindings${of}:\n`;
    const w = String(shown[shown.length - 1]?.line ?? 0).length;
    for (const b of shown) {
      out += `  line ${String(b.line).padStart(w)}  ${b.event_id ?? '-'}  ${b.reason}\n`;
    }
  }
  if (r.status === 'unsealed') out += `\n${unsealedNote(r)}\n`;
  if (r.unparseable.length > 0) {
    out += '\nlines that are not JSON:\n';
    for (const u of r.unparseable.slice(0, MAX_LISTED)) out += `  ${u.file}:${u.line}\n`;
  }
  return out;
}

/** Why an `unsealed` verdict is not `intact`, in words. */
function unsealedNote(r: VerifyFileResult): string {
  const n = int.format(r.unsealed_events);
  if (r.sealed_through === 0) {
    return (
      `NOT PROVEN: no event is covered by a valid seal (${n} unsealed). Hashes and links check out, ` +
      'but anyone can compute those: nothing in this file shows the service wrote it.'
    );
  }
  return (
    `NOT PROVEN PAST SEQ ${int.format(r.sealed_through)}: ${n} event(s) are covered by no seal ` +
    '(those after it, and any legacy v1 events, which have none). A live log is sealed within ' +
    '~250 ms; for an export, export again once the chain is quiet. Events up to that seq are proven.'
  );
}

/** One stderr line redrawn in place, at most every 100 ms, shown only for files over 1 MiB. */
class ProgressBar {
  readonly #out: VerifyIO['stderr'];
  readonly #t0 = performance.now();
  #last = 0;
  #drawn = false;

  constructor(out: VerifyIO['stderr']) {
    this.#out = out;
  }

  update = (bytesRead: number, totalBytes: number, lines: number): void => {
    if (totalBytes < PROGRESS_MIN_BYTES) return;
    const now = performance.now();
    if (now - this.#last < REDRAW_MS && bytesRead < totalBytes) return;
    this.#last = now;
    const frac = totalBytes === 0 ? 1 : Math.min(1, bytesRead / totalBytes);
    const filled = Math.round(frac * BAR_WIDTH);
    const secs = Math.max((now - this.#t0) / 1000, 1e-3);
    const rate = bytesRead / MB / secs;
    const pct = `${Math.floor(frac * 100)}`.padStart(3);
    this.#out.write(
      `\r\x1b[2K${pct}% [${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] ` +
        `${int.format(lines)} lines  ${rate.toFixed(1)} MB/s`,
    );
    this.#drawn = true;
  };

  clear(): void {
    if (this.#drawn) this.#out.write('\r\x1b[2K');
    this.#drawn = false;
  }
}
