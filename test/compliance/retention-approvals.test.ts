import t from 'tap';
import type { AuditInput } from '../../src/audit/types.js';
import { RetentionDesk } from '../../src/compliance/retention.js';
import { ServiceError } from '../../src/core/errors.js';
import type { Principal } from '../../src/identity/types.js';

// A retention run deletes the org's approvals that are over and older than its cutoff, but only
// once its chain cut (if any) is made: a run that fails (an archive refused, the store) deletes
// nothing. A run with no chain cut that deleted approvals is still an admin.retention_run event.

const ADMIN: Principal = {
  kind: 'user',
  id: 'usr_admin',
  org_id: 'org_a',
  role: 'admin',
  agent_id: null,
  credential_id: 'tok_admin',
  email: null,
};
const NOW = Date.parse('2030-06-01T00:00:00Z');

function desk(opts: { cut: boolean; pruneFails: boolean }) {
  const events: AuditInput[] = [];
  const pruned: number[] = [];
  const retention = new RetentionDesk({
    settings: { retentionDays: 30, rotationMaxMb: 100 },
    clock: () => NOW,
    approvals: {
      pruneBefore: async (_org: string, beforeMs: number) => {
        pruned.push(beforeMs);
        return 3;
      },
    },
    audit: {
      append: async (input: AuditInput) => {
        events.push(input);
        return { id: `ae_${events.length}`, seq: events.length };
      },
    },
    log: {
      finishPrune: async () => {},
      pruneCut: () => (opts.cut ? { fromSeq: 1, toSeq: 10, lastTs: '2030-01-01T00:00:00.000Z' } : undefined),
      prune: async () => {
        if (opts.pruneFails)
          throw new ServiceError('unavailable', 'the archive could not be written: refused');
        return {
          from_seq: 1,
          to_seq: 10,
          events: 10,
          seals: 1,
          files_deleted: 0,
          bridge: { bridged_to_seq: 10, bridged_hash: 'h', last_seal: null, archive: null },
        } as any;
      },
      bridge: () => undefined,
      lastSeq: () => 12,
    } as any,
  });
  return { retention, events, pruned };
}

t.test('a run whose chain prune fails deletes no approval', async (t) => {
  const { retention, events, pruned } = desk({ cut: true, pruneFails: true });
  await t.rejects(retention.run('org_a', ADMIN), { code: 'unavailable' });
  t.same(pruned, [], 'pruneBefore never ran');
  t.same(events, [], 'and nothing is recorded');
});

t.test('a run that cuts the chain deletes approvals after, and records how many', async (t) => {
  const { retention, events, pruned } = desk({ cut: true, pruneFails: false });
  const out = await retention.run('org_a', ADMIN);
  t.same(pruned, [NOW - 30 * 86_400_000]);
  t.equal(out.approvals_deleted, 3);
  t.equal(events.length, 1);
  t.match(events[0], { event_type: 'admin.retention_run', details: { approvals_deleted: 3, to_seq: 10 } });
});

t.test('a run with no chain cut that deleted approvals is an event too', async (t) => {
  const { retention, events } = desk({ cut: false, pruneFails: false });
  const out = await retention.run('org_a', ADMIN);
  t.match(out, { pruned: null, approvals_deleted: 3, event_id: 'ae_1' });
  t.match(events, [{ event_type: 'admin.retention_run', details: { pruned: null, approvals_deleted: 3 } }]);
});
