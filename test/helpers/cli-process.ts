import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { testServiceEnv } from './env.js';

/** The built CLI (`govgate`), run as its own process. */
export const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

export interface Running {
  readonly child: ChildProcess;
  readonly base: string;
  readonly out: () => string;
}

/** Starts `govgate start`; resolves once its output matches `ready` (it arrives in pieces). */
export function startCli(
  dir: string,
  pat: string,
  ready: RegExp,
  env: Record<string, string> = {},
): Promise<Running> {
  const child = spawn(process.execPath, [CLI, 'start'], {
    env: { ...process.env, ...testServiceEnv(dir, pat), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  return new Promise((resolve, reject) => {
    // A start that never gets ready is stopped too: a test that fails must not leave it running.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no start within 20 s: ${out}`));
    }, 20_000);
    const check = (): void => {
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m === null || !ready.test(out)) return;
      clearTimeout(timer);
      child.stdout?.off('data', check);
      resolve({ child, base: m[1] as string, out: () => out });
    };
    child.stdout?.on('data', check);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited (${code}) before listening: ${out}`));
    });
  });
}

export function exited(child: ChildProcess): Promise<number | null> {
  // Once its output is read to the end too ('close', not 'exit'), so `out()` holds all of it.
  return new Promise((resolve) => {
    const done = (): void => resolve(child.exitCode);
    const stdout = child.stdout;
    if (child.exitCode !== null || child.signalCode !== null) {
      if (stdout === null || stdout.readableEnded || stdout.destroyed) done();
      else stdout.once('close', done);
    } else child.once('close', done);
  });
}

/**
 * The one org log in `auditDir` (the `_system` chain aside), checked offline by `govgate verify
 * --json` with the published keys at `keysPath`: its exit code, its output and the parsed result.
 * `chain`: the files of one org's chain instead (rotated ones oldest first, then the live one),
 * when the directory holds several orgs.
 */
export async function verifyOrgLog(
  auditDir: string,
  keysPath: string,
  chain?: readonly string[],
): Promise<{
  files: string[];
  code: number | null;
  out: string;
  result: { status: string; chain_length: number };
}> {
  const files = readdirSync(auditDir).filter((f) => f.endsWith('.jsonl') && !f.startsWith('_system'));
  const verify = spawn(
    process.execPath,
    [CLI, 'verify', ...(chain ?? [join(auditDir, files[0] ?? '')]), '--keys', keysPath, '--json'],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  verify.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  // A process can exit before its output has been read to the end: `exited` waits for that too
  // (before it did not, and CI once read a verify's result as 'unreadable', with exit code 0).
  const code = await exited(verify);
  let result = { status: 'unreadable', chain_length: -1 };
  try {
    result = JSON.parse(out);
  } catch {
    // the caller's assertions show `out`
  }
  return { files, code, out, result };
}
