import { readFileSync, rmSync } from 'node:fs';
import type { Test } from 'tap';
import t from 'tap';
import { JsonlLog } from '../../src/audit/jsonl-log.js';
import type { StoredSeal } from '../../src/audit/types.js';
import { tempDir } from '../helpers/tmp.js';

const ORG = 'org_jsonl';

function setup(t: Test) {
  const dir = tempDir('govgate-jsonl-');
  const log = new JsonlLog(dir, 100, {
    lines: () => [],
    eventHash: () => undefined,
    sealAt: () => undefined,
    bridgeLine: () => undefined,
    sealedAt: () => 0,
  });
  t.teardown(async () => {
    await log.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const events = (...seqs: number[]) =>
    log.events(
      ORG,
      seqs,
      seqs.map((s) => JSON.stringify({ seq: s })),
    );
  const seal = (size: number): StoredSeal => ({ seq: size, size, note: `note ${size}`, ts: 'ts' });
  /** The file as `e<seq>` and `s<size>` tokens. */
  const read = async (): Promise<string[]> => {
    await log.drain();
    return readFileSync(log.pathOf(ORG), 'utf8')
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => {
        const r = JSON.parse(l) as { seq?: number; _seal?: { size: number } };
        return r._seal !== undefined ? `s${r._seal.size}` : `e${r.seq}`;
      });
  };
  return { log, events, seal, read };
}

const inOrder = (tokens: string[]): string[] => {
  const want: string[] = [];
  const seqs = tokens.filter((x) => x.startsWith('e')).map((x) => Number(x.slice(1)));
  for (const s of seqs) {
    want.push(`e${s}`);
    if (tokens.includes(`s${s}`)) want.push(`s${s}`);
  }
  return want;
};

t.test(
  'a hold replaced after a failed commit: lines stay in seq order, seals after their event',
  async (t) => {
    const { log, events, seal, read } = setup(t);
    events(1, 2, 3);
    const first = log.hold(ORG, 3); // seal 3 is being signed
    events(4, 5); // held behind it
    // The head is reset (a failed commit) while seal 3 is signed; the reloaded head cuts seal 7.
    const second = log.hold(ORG, 7);
    events(6, 7); // at or before the new hold: written now
    events(8); // held behind seal 7
    log.release(ORG, first); // seal 3 fails (its head is dead): must not release seal 7's hold
    events(9);
    log.seal(ORG, seal(7), second);
    events(10);
    const got = await read();
    t.same(got, ['e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7', 's7', 'e8', 'e9', 'e10']);
    t.same(got, inOrder(got));
  },
);

t.test("a replaced hold's seal that still commits is left out rather than written late", async (t) => {
  const { log, events, seal, read } = setup(t);
  events(1, 2);
  const first = log.hold(ORG, 2);
  events(3);
  const second = log.hold(ORG, 4);
  events(4, 5);
  log.seal(ORG, seal(2), first); // its place (after e2) is behind e3 and e4 already
  log.seal(ORG, seal(4), second);
  const got = await read();
  t.same(got, ['e1', 'e2', 'e3', 'e4', 's4', 'e5']);
});

t.test('the ordinary cycle is unchanged: hold, seal, release', async (t) => {
  const { log, events, seal, read } = setup(t);
  events(1, 2);
  const a = log.hold(ORG, 2);
  events(3);
  log.seal(ORG, seal(2), a);
  const b = log.hold(ORG, 3);
  events(4);
  log.release(ORG, b); // its seal failed: the held line is written, no seal line
  const c = log.hold(ORG, 4);
  log.seal(ORG, seal(4), c);
  t.same(await read(), ['e1', 'e2', 's2', 'e3', 'e4', 's4']);
});
