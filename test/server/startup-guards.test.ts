import { existsSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { open } from 'lmdb';
import t from 'tap';
import { randomBase62 } from '../../src/util/ids.js';
import { exited, startCli } from '../helpers/cli-process.js';
import { ENGINES, startService } from '../helpers/service.js';
import { tempDir } from '../helpers/tmp.js';

/** A port nothing listens on right now. */
function freePort(): Promise<number> {
  const probe = createServer();
  return new Promise((resolve) =>
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    }),
  );
}

// What keeps an operator's mistake at start from costing audit events or keys: one process per
// data dir, one process per port, the keys dir that belongs to the data dir, and no bootstrap
// secrets made by a start that then fails.

t.test('a second service on a held data dir is refused, and the dir is free again after close', async (t) => {
  const first = await startService();
  const second = startService({ dataDir: first.dataDir, env: { SERVICE_BOOTSTRAP_TOKEN: first.pat } });
  await t.rejects(second, { name: 'DataDirInUseError', message: /in use by another govgate process/ });
  // The refused start did not disturb the first one.
  const me = await first.call('/api/me', { token: first.pat });
  t.equal(me.status, 200);
  await first.close(true);
  const third = await startService({ dataDir: first.dataDir, env: { SERVICE_BOOTSTRAP_TOKEN: first.pat } });
  t.teardown(() => third.close());
  t.equal((await third.call('/api/me', { token: first.pat })).status, 200, 'the dir was let go');
});

for (const engine of ENGINES) {
  t.test(`a port held by another service is refused, naming the cause (${engine})`, async (t) => {
    const first = await startService({ engine });
    t.teardown(() => first.close());
    const port = String(first.service.server.port);
    await t.rejects(startService({ engine, env: { SERVICE_PORT: port } }), {
      message: new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}.*EADDRINUSE`),
    });
  });
}

t.test('across processes: a held data dir and a held port are refused; SIGKILL frees both', async (t) => {
  const dir = tempDir('govgate-held-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pat = `gk_pat_${randomBase62(40)}`;
  // A port named, not 0: the kernel lets SO_REUSEPORT share an explicitly bound port only.
  const port = String(await freePort());
  const child = await startCli(dir, pat, /listening on/, { SERVICE_PORT: port });
  t.teardown(() => child.child.kill('SIGKILL'));
  await t.rejects(startService({ dataDir: dir, env: { SERVICE_BOOTSTRAP_TOKEN: pat } }), {
    name: 'DataDirInUseError',
  });
  // uWS would share a port held with SO_REUSEPORT by another process, splitting its traffic.
  await t.rejects(startService({ engine: 'uws', env: { SERVICE_PORT: port } }), { message: /EADDRINUSE/ });
  child.child.kill('SIGKILL');
  await exited(child.child);
  const after = await startService({
    dataDir: dir,
    env: { SERVICE_BOOTSTRAP_TOKEN: pat, SERVICE_PORT: port },
  });
  t.equal((await after.call('/api/me', { token: pat })).status, 200, 'the dir and the port are free again');
  await after.close(true);
});

t.test('a first start that cannot listen creates nothing: the next start shows the secrets', async (t) => {
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  t.teardown(() => holder.close());
  const port = (holder.address() as { port: number }).port;
  const dir = tempDir('govgate-listen-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  await t.rejects(
    startService({ dataDir: dir, env: { SERVICE_PORT: String(port), SERVICE_BOOTSTRAP_TOKEN: '' } }),
    {
      message: /EADDRINUSE/,
    },
  );
  const svc = await startService({ dataDir: dir, env: { SERVICE_BOOTSTRAP_TOKEN: '' } });
  t.teardown(() => svc.close(true));
  const created = svc.service.bootstrap.created;
  t.ok(created?.agentKey, 'the first start that listened bootstrapped, and has the agent key to show');
});

t.test('a data dir started with another keys dir is refused, and no keys are made', async (t) => {
  const first = await startService();
  await first.close(true);
  const env = { SERVICE_BOOTSTRAP_TOKEN: first.pat };
  const empty = tempDir('govgate-keys-');
  t.teardown(() => rmSync(empty, { recursive: true, force: true }));
  await t.rejects(
    startService({ dataDir: first.dataDir, env: { ...env, SERVICE_KEYS_DIR: join(empty, 'keys') } }),
    { name: 'KeysDirMismatchError', message: /holds no vault\.key/ },
  );
  t.notOk(existsSync(join(empty, 'keys', 'vault.key')), 'no vault key was generated');
  t.notOk(existsSync(join(empty, 'keys', 'audit')), 'no audit key was generated');

  // The keys of another data dir.
  const other = await startService();
  await other.close(true);
  t.teardown(() => rmSync(other.dataDir, { recursive: true, force: true }));
  await t.rejects(
    startService({ dataDir: first.dataDir, env: { ...env, SERVICE_KEYS_DIR: join(other.dataDir, 'keys') } }),
    { name: 'KeysDirMismatchError', message: /another vault key/ },
  );

  // Audit keys lost while the vault key stayed.
  const keys = join(first.dataDir, 'keys');
  const audit = join(keys, 'audit');
  const saved = tempDir('govgate-audit-keys-');
  t.teardown(() => rmSync(saved, { recursive: true, force: true }));
  for (const f of readdirSync(audit)) rmSync(join(audit, f), { force: true });
  await t.rejects(startService({ dataDir: first.dataDir, env }), {
    name: 'KeysDirMismatchError',
    message: /lost its audit keys/,
  });
  t.equal(readdirSync(audit).length, 0, 'the audit keys were not replaced by new ones');
  rmSync(first.dataDir, { recursive: true, force: true });
});

t.test('a store from before bindings: a keys dir without a vault key is refused all the same', async (t) => {
  const first = await startService();
  await first.close(true);
  t.teardown(() => rmSync(first.dataDir, { recursive: true, force: true }));
  const db = open({ path: join(first.dataDir, 'data', 'govgate.lmdb'), maxDbs: 32 });
  const meta = db.openDB({ name: 'meta' });
  t.ok(meta.get('keys_binding'), 'the first start recorded its vault key');
  await meta.remove('keys_binding');
  await db.close();
  const empty = tempDir('govgate-keys-');
  t.teardown(() => rmSync(empty, { recursive: true, force: true }));
  await t.rejects(
    startService({
      dataDir: first.dataDir,
      env: { SERVICE_BOOTSTRAP_TOKEN: first.pat, SERVICE_KEYS_DIR: join(empty, 'keys') },
    }),
    { name: 'KeysDirMismatchError' },
  );
  const again = await startService({ dataDir: first.dataDir, env: { SERVICE_BOOTSTRAP_TOKEN: first.pat } });
  await again.close(true);
  const reopened = open({ path: join(first.dataDir, 'data', 'govgate.lmdb'), maxDbs: 32 });
  t.ok(reopened.openDB({ name: 'meta' }).get('keys_binding'), 'an old store is bound at its next start');
  await reopened.close();
});
