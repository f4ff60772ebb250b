import t from 'tap';
import { OrgQueue } from '../../src/util/org-queue.js';

t.test("one org's jobs run one at a time, in order; other orgs' alongside", async (t) => {
  const q = new OrgQueue();
  const log: string[] = [];
  const job =
    (name: string, ms: number, fail = false) =>
    async () => {
      log.push(`${name}:start`);
      await new Promise((r) => setTimeout(r, ms));
      log.push(`${name}:end`);
      if (fail) throw new Error(name);
      return name;
    };
  const results = await Promise.allSettled([
    q.run('a', job('a1', 30)),
    q.run('a', job('a2', 5, true)),
    q.run('b', job('b1', 10)),
    q.run('a', job('a3', 5)),
  ]);
  t.same(
    results.map((r) => r.status),
    ['fulfilled', 'rejected', 'fulfilled', 'fulfilled'],
    'a failed job does not stop the next',
  );
  const a = log.filter((l) => l.startsWith('a'));
  t.same(a, ['a1:start', 'a1:end', 'a2:start', 'a2:end', 'a3:start', 'a3:end'], 'org a in turn');
  t.ok(log.indexOf('b1:start') < log.indexOf('a1:end'), 'org b did not wait for org a');
});
