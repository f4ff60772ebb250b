import { hash } from 'node:crypto';
import t from 'tap';
import { canonicalize } from '../../../src/core/chain/index.js';
import {
  actionFingerprint,
  actionIdentity,
  argsDigest,
  type FingerprintInput,
} from '../../../src/core/guardrails/index.js';

const sha = (s: string): string => hash('sha256', s, 'hex');

// The definition: SHA-256 of the JCS of the whole action. Approvals stored with it must keep
// matching, so the assembled text has to be byte-for-byte that canonical form.
const reference = (i: FingerprintInput): string =>
  sha(
    canonicalize({
      org_id: i.org_id,
      agent_id: i.agent_id,
      type: i.type,
      tool: i.tool,
      args: (i.args === undefined ? null : i.args) as never,
      // A null context is left out, so fingerprints without one stay what they were.
      ...(i.context === undefined || i.context === null ? {} : { context: i.context as never }),
    }),
  );

const strings = [
  '',
  'a',
  'default-agent',
  'quote"back\\slash',
  'line\nbreak\u0001',
  'ünï 東京 😀',
  '\ud800lone',
];
const argsList: unknown[] = [
  undefined,
  null,
  {},
  { amount: 120, currency: 'EUR', nested: { z: 1, a: [1, 'two', null, { b: true }] } },
  { '10': 'x', '2': 'y', args: 'shadow', agent_id: 'inner' },
  { é: 1, e: 2, '😀': 3 },
];

t.test('the fingerprint and args digest equal their JCS definitions', async (t) => {
  let n = 0;
  for (const org_id of strings.slice(0, 4))
    for (const agent_id of strings)
      for (const tool of [null, ...strings])
        for (const args of argsList) {
          const input = { org_id, agent_id, type: 'TOOL_CALL', tool, args };
          const id = actionIdentity(input);
          const want = reference(input);
          if (id.fingerprint !== want || actionFingerprint(input) !== want)
            t.fail(`fingerprint of ${JSON.stringify(input)}`);
          if (
            id.argsSha256 !== argsDigest(args) ||
            id.argsSha256 !== sha(canonicalize((args ?? null) as never))
          )
            t.fail(`args digest of ${JSON.stringify(args)}`);
          n++;
        }
  t.ok(n > 1000, `${n} actions checked`);
  for (const type of ['LLM_CALL', 'SYSTEM_OF_RECORD_WRITE', 'x"y']) {
    const input = { org_id: 'o', agent_id: 'a', type, tool: 't', args: { k: 1 } };
    t.equal(actionIdentity(input).fingerprint, reference(input), type);
  }
  const seen = new Set<string>();
  for (const context of [
    null,
    {},
    { target: 'prod' },
    { target: 'prod"x' },
    { model: 'm', content: 'f00' },
    ['a'],
  ]) {
    const input = {
      org_id: 'o',
      agent_id: 'a',
      type: 'SYSTEM_OF_RECORD_WRITE',
      tool: null,
      args: null,
      context,
    };
    const fp = actionIdentity(input).fingerprint;
    t.equal(fp, reference(input), `context ${JSON.stringify(context)}`);
    seen.add(fp);
  }
  t.equal(seen.size, 6, 'each context is its own action');
});
