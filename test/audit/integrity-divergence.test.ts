import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { startService } from '../helpers/service.js';

/**
 * A log the start-up check found ahead of the store is cut back to it, and the lines it held are
 * set aside: the integrity result names those files, so an operator who checks the chain learns
 * that lines were there that the chain no longer holds (review-evidence F10).
 */
t.test('/api/audit/integrity names the files a start set aside', async (t) => {
  const first = await startService();
  const governed = await first.call('/v1/govern', {
    token: first.agentKey,
    body: { type: 'TOOL_CALL', payload: { tool: 'crm.lookup', args: { id: 'c-1' } } },
  });
  t.equal(governed.body.outcome, 'allow');
  const clean = await first.call('/api/audit/integrity?refresh=true', { token: first.pat });
  t.equal(clean.status, 200);
  t.notOk('log_divergences' in clean.body, 'nothing set aside: no such member');
  await first.close(true);

  // A line the store does not hold at the end of the log (as after a machine crash that lost
  // the store's last commits, or an edit on the host).
  const file = join(first.dataDir, 'data', 'audit', 'default.jsonl');
  const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
  const last = JSON.parse(lines.findLast((l) => !l.startsWith('{"_seal"')) as string);
  appendFileSync(
    file,
    `${JSON.stringify({ ...last, seq: last.seq + 1, hash: 'f'.repeat(64), reason: 'not in the store' })}\n`,
  );

  const again = await startService({ dataDir: first.dataDir, env: { SERVICE_BOOTSTRAP_TOKEN: first.pat } });
  t.teardown(() => again.close());
  const res = await again.call('/api/audit/integrity?refresh=true', { token: again.pat });
  t.equal(res.status, 200);
  t.equal(res.body.status, 'intact', 'the chain itself is whole');
  t.equal(res.body.log_divergences?.length, 1, JSON.stringify(res.body));
  t.match(res.body.log_divergences?.[0], /^default\.jsonl\.diverged-/);
});
