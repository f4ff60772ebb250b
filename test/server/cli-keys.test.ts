import { execFile } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { CLI } from '../helpers/cli-process.js';
import { startService } from '../helpers/service.js';
import { tempDir } from '../helpers/tmp.js';

const run = promisify(execFile);

/** `govgate keys …` as its own process; its exit code, stdout and stderr. */
async function keys(args: string[], env: Record<string, string>) {
  try {
    const { stdout, stderr } = await run(process.execPath, [CLI, 'keys', ...args], {
      env: { ...process.env, ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

t.test('govgate keys prints the public keys of a keys dir, offline, and makes none', async (t) => {
  const svc = await startService();
  const keysDir = join(svc.dataDir, 'keys');
  const signingKey = (await svc.call('/api/audit/signing-key', { token: svc.pat })).body;
  const jwks = (await svc.call('/.well-known/jwks.json')).body;
  await svc.close(true);
  t.teardown(() => rmSync(svc.dataDir, { recursive: true, force: true }));
  const env = { SERVICE_KEYS_DIR: keysDir, SERVICE_LOG_LEVEL: 'error' };

  const audit = await keys(['audit'], env);
  t.equal(audit.code, 0, audit.stderr);
  t.same(JSON.parse(audit.stdout), signingKey, 'the document GET /api/audit/signing-key answers');
  const mandate = await keys(['mandate'], env);
  t.equal(mandate.code, 0);
  t.same(JSON.parse(mandate.stdout), jwks);
  const ca = await keys(['proxy-ca'], env);
  t.equal(ca.code, 2, 'an all-in-one keys dir has no proxy CA');

  const empty = tempDir('govgate-keys-');
  t.teardown(() => rmSync(empty, { recursive: true, force: true }));
  const none = await keys(['audit'], { ...env, SERVICE_KEYS_DIR: join(empty, 'keys') });
  t.equal(none.code, 2);
  t.match(none.stderr, /holds no keys/);
  t.notOk(existsSync(join(empty, 'keys', 'audit')), 'no key was made');
  t.equal((await keys([], env)).code, 2);
  t.equal((await keys(['nope'], env)).code, 2);
});
