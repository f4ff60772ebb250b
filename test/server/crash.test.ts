import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { randomBase62 } from '../../src/util/ids.js';
import { exited, startCli as start, verifyOrgLog } from '../helpers/cli-process.js';
import { callHttp } from '../helpers/http.js';
import { tempDir } from '../helpers/tmp.js';

// Nothing acknowledged is lost when the process dies: `govgate start` is killed with SIGKILL
// right after its last answer, while seals, the JSONL log and the overview rollups are still
// behind the store (they catch up on timers). After a restart every answered call is in the
// audit trail, the overview counts every event once, integrity is intact, and the JSONL log,
// checked offline, holds the whole chain.

t.test('SIGKILL after the last answer loses no audit event, count or JSONL line', async (t) => {
  const dir = tempDir('govgate-crash-');
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pat = `gk_pat_${randomBase62(40)}`;
  const first = await start(dir, pat, /agent key \([^)]*\): gk_agent_\w+\n/);
  t.teardown(() => first.child.kill('SIGKILL'));
  const key = /agent key \([^)]*\): (gk_agent_\w+)/.exec(first.out())?.[1] as string;
  t.ok(key, 'the first start prints an agent key');
  const call = (base: string, path: string, token: string, body?: unknown) =>
    callHttp(`${base}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: body === undefined ? undefined : JSON.stringify(body),
    }) as Promise<{ status: number; body: any }>;

  // Bursts of concurrent calls, the last one answered just before the kill.
  const pipelines: string[] = [];
  for (let wave = 0; wave < 6; wave++) {
    const answers = await Promise.all([
      ...Array.from({ length: 20 }, (_, i) =>
        call(first.base, '/v1/chat/completions', key, {
          model: 'mock-echo',
          messages: [{ role: 'user', content: `wave ${wave} call ${i}` }],
        }),
      ),
      ...Array.from({ length: 5 }, (_, i) =>
        call(first.base, '/v1/govern', key, {
          type: 'TOOL_CALL',
          payload: { tool: 'crm.read', args: { wave, i } },
        }),
      ),
    ]);
    for (const a of answers) {
      t.equal(a.status, 200);
      const url = a.body.service?.audit_url as string | undefined;
      pipelines.push(url === undefined ? `pl:${a.body.pipeline_id}` : url);
    }
  }
  first.child.kill('SIGKILL');
  await exited(first.child);

  const second = await start(dir, pat, /listening on/);
  t.teardown(async () => {
    if (second.child.exitCode === null) second.child.kill('SIGKILL');
  });
  let found = 0;
  for (const p of pipelines) {
    const path = p.startsWith('pl:') ? `/api/audit/pipeline/${p.slice(3)}` : new URL(p).pathname;
    const res = await call(second.base, path, pat);
    if (res.status === 200 && res.body.data.length > 0) found++;
  }
  t.equal(found, 150, 'every answered call has its audit event');
  const overview = await call(second.base, '/api/audit/_overview', pat);
  t.equal(overview.status, 200);
  t.equal(overview.body.by_type.llm_call, 120, 'the overview counts each call once');
  t.equal(overview.body.by_type['govern.decision'], 30);
  // Search postings (the pipelines above, types and categories here) are stored once a second too:
  // rebuilt past their mark.
  const llm = await call(second.base, '/api/audit?event_type=llm_call&action=allow&limit=1000', pat);
  t.equal(llm.body.data?.length, 120, 'search by type and outcome finds every call');
  const governed = await call(second.base, '/api/audit?category=govern&limit=1000', pat);
  t.equal(governed.body.data?.length, 30, 'search by category finds every decision');
  const integrity = await call(second.base, '/api/audit/integrity?refresh=true', pat);
  t.equal(integrity.body.status, 'intact', JSON.stringify(integrity.body));
  const keys = await call(second.base, '/api/audit/signing-key', pat);
  const keysPath = join(dir, 'signing-key.json');
  writeFileSync(keysPath, JSON.stringify(keys.body));

  // A graceful stop writes the JSONL log to the end; offline verification sees the whole chain.
  second.child.kill('SIGTERM');
  t.equal(await exited(second.child), 0, 'a clean shutdown');
  const { files, code, out, result } = await verifyOrgLog(join(dir, 'data', 'audit'), keysPath);
  t.equal(files.length, 1, `one org log: ${files.join(', ')}`);
  t.equal(code, 0, out);
  t.equal(result.status, 'intact');
  t.equal(result.chain_length, integrity.body.chain_length, 'the JSONL log holds every event of the chain');
});
