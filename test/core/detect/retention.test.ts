import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import t from 'tap';

// The scan keeps its working lists between texts (to allocate nothing on the request path), but
// not the lists of a huge one: after a 5 MiB text of `[` (a marker start at every character) they
// held ~100 MB for the life of the process.
t.test('scanning a huge text does not keep its working memory afterwards', async (t) => {
  const detectModule = pathToFileURL(
    join(dirname(fileURLToPath(import.meta.url)), '../../../src/core/detect/index.js'),
  );
  const script = `
    const { detect } = await import(${JSON.stringify(detectModule.href)});
    const opts = { pii: true, secrets: true, injection: true, unicode: true };
    detect('hello', opts); gc(); gc();
    const before = process.memoryUsage().heapUsed;
    for (const c of ['[', '<', '\\u200b']) detect(c.repeat(5 * 1024 * 1024), opts);
    detect('a small text [x]', opts);
    gc(); gc();
    console.log(Math.round((process.memoryUsage().heapUsed - before) / 1048576));`;
  const out = execFileSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  const retainedMb = Number(out.trim());
  t.ok(Number.isFinite(retainedMb), out);
  t.ok(retainedMb < 30, `${retainedMb} MB retained after scanning three 5 MiB texts`);
});
