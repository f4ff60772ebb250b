import t from 'tap';
import type { AuditEvent } from '../../src/audit/types.js';
import {
  OUTBOUND_STRING_MAX,
  outboundEvent,
  passes,
  scrubText,
  severityOf,
  toCef,
} from '../../src/export/formats.js';

// What leaves govgate (spec 6.2 "Redact"): secrets, connection-string passwords and file paths
// stripped, long strings cut, personal fields as commitments; hashes and ids kept as they are.

t.test('scrubText strips secrets and paths, keeps prose and API routes, truncates', async (t) => {
  const cases: Array<[string, string]> = [
    ['key AKIAIOSFODNN7EXAMPLE here', 'key [SECRET] here'],
    ['ghp_0123456789abcdefghijklmnopqrstuvwxyzAB', '[SECRET]'],
    ['agent key gk_agent_0YWNu3OjmomVb5gy7gKTpBKV417qYNKvnetOkBg9 leaked', 'agent key [SECRET] leaked'],
    ['token gk_pat_bzGOe8DToXpfZj54ZbIakF0o8UnA0CzKwfw0Mqn6', 'token [SECRET]'],
    ['postgres://app:hunter2pass@db.internal:5432/app', 'postgres://app:[SECRET]@db.internal:5432/app'],
    ['read /etc/passwd and /home/alice/.ssh/id_rsa', 'read [PATH] and [PATH]'],
    ['C:\\Users\\alice\\secret.txt was opened', '[PATH] was opened'],
    ['opened \\\\fs01\\finance\\payroll.xlsx', 'opened [PATH]'],
    ['fetch file:///etc/shadow now', 'fetch file://[PATH] now'],
    ['POST /v1/chat/completions then /api/audit', 'POST /v1/chat/completions then /api/audit'],
    ['see https://example.com/home/x', 'see https://example.com/home/x'],
    ['blocked by rule no-wires: wires need approval', 'blocked by rule no-wires: wires need approval'],
  ];
  for (const [input, want] of cases) t.equal(scrubText(input), want, input);
  const long = 'z'.repeat(OUTBOUND_STRING_MAX + 10);
  t.equal(scrubText(long), `${'z'.repeat(OUTBOUND_STRING_MAX)}…[truncated 10 chars]`);
});

t.test('outboundEvent: personal values out, structure kept, nothing mutated', async (t) => {
  const e = {
    id: 'ae_1',
    org_id: 'org_a',
    seq: 3,
    ts: '2026-01-01T00:00:00.000Z',
    event_type: 'govern.decision',
    hash: 'a'.repeat(64),
    prev_hash: 'b'.repeat(64),
    outcome: 'allow',
    reason: `token sk-ant-api03-${'x'.repeat(40)}`,
    details: { file: '/var/lib/app/db.sqlite', nested: [{ dsn: 'mysql://u:pw12345678@h/db' }] },
    personal: { end_user: { value: 'alice@example.com', salt: 's', c: 'c'.repeat(64) } },
    seal: { seq: 1 },
  } as unknown as AuditEvent;
  const before = JSON.stringify(e);
  const o = outboundEvent(e) as unknown as Record<string, any>;
  t.same(o.personal, { end_user: { c: 'c'.repeat(64) } });
  t.equal(o.hash, 'a'.repeat(64));
  t.equal(o.reason, 'token [SECRET]');
  t.equal(o.details.file, '[PATH]');
  t.equal(o.details.nested[0].dsn, 'mysql://u:[SECRET]@h/db');
  t.notOk('seal' in o);
  t.equal(JSON.stringify(e), before, 'the trail event is not touched');

  // Clean strings are remembered (they recur in every event); what holds a secret never is, so
  // it is scrubbed every time, however many events went out before it.
  for (let i = 0; i < 5_000; i++) {
    const again = outboundEvent({
      ...e,
      id: `ae_${i}`,
      reason: `call ${i % 50} ok`,
      details: { file: '/var/lib/app/db.sqlite' },
    } as unknown as AuditEvent) as unknown as Record<string, any>;
    if (again.reason !== `call ${i % 50} ok` || again.details.file !== '[PATH]')
      t.fail(`event ${i}: ${JSON.stringify(again)}`);
  }
  t.equal((outboundEvent(e) as unknown as Record<string, any>).reason, 'token [SECRET]', 'still scrubbed');
  t.equal(
    (outboundEvent(e) as unknown as Record<string, any>).details.nested[0].dsn,
    'mysql://u:[SECRET]@h/db',
  );
});

t.test('severity filters and CEF escaping', async (t) => {
  const blocked = {
    event_type: 'llm_call',
    outcome: 'block',
    behavior_type: 'LLM_CALL',
    detections: null,
    details: {},
  } as unknown as AuditEvent;
  const found = {
    event_type: 'llm_call',
    outcome: 'allow',
    behavior_type: 'LLM_CALL',
    detections: { input: { counts: { pii: 1 } } },
    details: {},
  } as unknown as AuditEvent;
  const admin = {
    event_type: 'admin.user_created',
    outcome: 'allow',
    behavior_type: null,
    detections: null,
    details: {},
  } as unknown as AuditEvent;
  t.same(
    [blocked, found, admin].map((e) => severityOf(e)),
    ['block', 'detect', 'info'],
  );
  t.same(
    [blocked, found, admin].map((e) => passes(e, 'detection')),
    [true, true, false],
  );
  t.same(
    [blocked, found, admin].map((e) => passes(e, 'action')),
    [true, true, false],
  );
  t.same(
    [blocked, found, admin].map((e) => passes(e, 'block')),
    [true, false, false],
  );
  const line = toCef(
    {
      ...blocked,
      id: 'ae_9',
      org_id: 'o',
      seq: 9,
      ts: '2026-01-01T00:00:00Z',
      reason: 'a|b=c\nd',
      agent_id: 'bot',
    } as AuditEvent,
    'gw',
    'prod',
  );
  t.match(line, /^CEF:0\|govgate\|govgate\|[^|]+\|llm_call\|a\\\|b=c d\|8\|/);
  t.match(line, /reason=a\|b\\=c\\nd/);
  t.match(line, /suser=bot/);
  // A custom field without a value goes without its label too.
  t.match(line, /cs1Label=org_id cs1=o/);
  t.notMatch(line, /cs3Label|cs4Label/, 'no provider or model: no labels for them');
});
