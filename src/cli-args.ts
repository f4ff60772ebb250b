import { parseArgs } from 'node:util';
import type { VerifyIO } from './cli-verify.js';

/** An org id as `--org` takes it (the origin line is `govgate/<org_id>`). */
const ORG_ID = /^[A-Za-z0-9_-]{1,64}$/;

/** What the offline verification commands share: --keys (required), --org, --json. */
export interface VerifyArgs {
  readonly keys: string;
  readonly org: string | undefined;
  readonly json: boolean;
  /** The command's own string options (`extra`), by name. */
  readonly options: Readonly<Record<string, string | undefined>>;
  readonly files: string[];
}

/**
 * Parses the arguments of `govgate <command>`: `--keys <file>`, `--org <org_id>`, `--json`,
 * `-h/--help` and the string options named in `extra`. `files` checks the positionals (returns
 * them, possibly trimmed, or what is wrong). Returns the exit code when the command must not go
 * on: 0 after printing the help, 2 after a usage error on stderr.
 */
export function verifyArgs(
  argv: string[],
  io: VerifyIO,
  spec: {
    readonly command: string;
    readonly usage: string;
    readonly extra?: readonly string[];
    readonly files: (positionals: string[]) => string[] | string;
  },
): VerifyArgs | number {
  const usageError = (msg: string): number => {
    io.stderr.write(`govgate ${spec.command}: ${msg}\n\n${spec.usage}\n`);
    return 2;
  };
  const options: Record<string, { type: 'string' } | { type: 'boolean'; short?: string }> = {
    keys: { type: 'string' },
    org: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  };
  for (const name of spec.extra ?? []) options[name] = { type: 'string' };
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    const parsed = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
    values = parsed.values as Record<string, string | boolean | undefined>;
    positionals = parsed.positionals;
  } catch (err) {
    return usageError((err as Error).message);
  }
  if (values.help === true) {
    io.stdout.write(`${spec.usage}\n`);
    return 0;
  }
  const files = spec.files(positionals);
  if (typeof files === 'string') return usageError(files);
  const keys = values.keys;
  if (typeof keys !== 'string' || keys.length === 0) return usageError('--keys <file> is required');
  const org = values.org as string | undefined;
  if (org !== undefined && !ORG_ID.test(org))
    return usageError('--org takes an org id (org_…), as in the origin line govgate/<org_id>');
  const extra: Record<string, string | undefined> = {};
  for (const name of spec.extra ?? []) extra[name] = values[name] as string | undefined;
  return { keys, org, json: values.json === true, options: extra, files };
}
