import { spawn } from 'node:child_process';
import t from 'tap';
import { exited } from '../helpers/cli-process.js';

// The tests read a CLI's answer once it has exited (`govgate verify --json`): all of it. A process
// can exit before the pipe carrying its output has been read to the end (node's 'exit' comes
// before 'close'); CI once read a verify's result as 'unreadable', with exit code 0. Here the
// output comes after the exit for certain: a process that shares the pipe writes it later.
t.test('exited() resolves once the output is read to the end', async (t) => {
  const late = "setTimeout(() => process.stdout.write('late output'), 300)";
  const child = spawn(
    process.execPath,
    [
      '-e',
      `require('node:child_process').spawn(process.execPath, ['-e', ${JSON.stringify(late)}], { stdio: 'inherit' }).unref()`,
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
  });
  t.equal(await exited(child), 0);
  t.equal(out, 'late output', 'what was written after the exit was read too');
});
