import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { randomBase62 } from '../../src/util/ids.js';
import { CLI, startCli } from '../helpers/cli-process.js';
import { tempDir } from '../helpers/tmp.js';

// The services' command line as an operator meets it when something is wrong: arguments they do
// not take, and a data or keys dir they cannot use. (Apart from cli.test.ts, which is long
// enough already: each of these starts processes.)

t.test('a data or keys dir the service cannot use is said in one line, without a stack trace', async (t) => {
  const dir = tempDir('govgate-cli-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'a-file');
  writeFileSync(file, 'x');
  for (const name of ['SERVICE_DATA_DIR', 'SERVICE_KEYS_DIR']) {
    const why = await startCli(dir, `gk_pat_${randomBase62(40)}`, /listening on/, { [name]: file }).then(
      () => 'it started',
      (err: Error) => err.message,
    );
    t.match(
      why,
      /exited \(1\) before listening: govgate: EEXIST.*a-file.*check SERVICE_DATA_DIR and SERVICE_KEYS_DIR/,
      name,
    );
    t.notMatch(why, /\n\s+at /, `${name}: no stack trace`);
  }
});

t.test(
  'the services take no arguments: --help is help, anything else a usage error, and nothing starts',
  async (t) => {
    const dir = tempDir('govgate-cli-');
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    for (const command of ['start', 'control', 'sidecar']) {
      for (const [arg, code] of [
        ['--help', 0],
        ['--port=9000', 2],
      ] as const) {
        const r = spawnSync(process.execPath, [CLI, command, arg], {
          cwd: dir,
          encoding: 'utf8',
          timeout: 20_000,
        });
        t.equal(r.status, code, `${command} ${arg}`);
        t.match(`${r.stdout}${r.stderr}`, /Usage:/);
      }
    }
    t.same(readdirSync(dir), [], 'no data or keys dir was made');
  },
);
