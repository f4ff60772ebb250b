// Append A/B: the audit append path of two builds, taking turns on one core, so that the VM's
// drift (it moved by half within minutes) hits both alike. Each run is a child process that
// appends a fixed number of events (after 20,000 of warm-up) to a fresh ChainLog with a real
// LMDB store and the ML-DSA signing worker, and reports process CPU per event (user + system,
// every thread: seals included). Prints min and median per build.
//
// Usage: node append-ab.mjs --base=DIR [--new=DIR] [--rounds=4] [--orgs=1] [--batch=100]
//                           [--agents=12] [--events=40000] [--cpu=1]
//   DIR is a build's dist/ (default --new: this checkout's dist/).
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { makeInputs } from './audit-events.mjs';

const HERE = import.meta.dirname;

if (process.argv[2] === '--child') {
  await child(JSON.parse(process.argv[3]));
} else {
  await main();
}

async function child({ dist, orgs: nOrgs, batch, agents, events }) {
  const load = (p) => import(pathToFileURL(join(dist, 'src', p)).href);
  const { ChainLog } = await load('audit/chain-log.js');
  const { openStore } = await load('store/db.js');
  const { AuditKeys } = await load('crypto/audit-keys.js');
  const { WorkerSealSigner } = await load('crypto/seal-signer.js');
  const root = mkdtempSync(join(tmpdir(), 'govgate-append-ab-'));
  const signer = await WorkerSealSigner.start(AuditKeys.load({ keysDir: join(root, 'keys') }));
  const store = openStore(join(root, 'data'));
  const log = new ChainLog(store, signer, { dataDir: join(root, 'data'), rotationMaxMb: 256 });
  const orgs = Array.from({ length: nOrgs }, (_, i) => `org_${i}`);
  // audit.mjs's workload: governed tool calls and LLM calls, ~1 KB each, cycled per org.
  const pools = orgs.map((o) => makeInputs(o, 4096, agents));
  let k = 0;
  const run = async (n) => {
    for (let done = 0; done < n; done += batch) {
      let last;
      for (let i = 0; i < batch; i++, k++) {
        const pool = pools[k % nOrgs];
        last = log.append(pool[Math.floor(k / nOrgs) % pool.length]);
      }
      await last;
    }
  };
  await run(20_000);
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await run(events);
  const wall = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  process.stdout.write(`${JSON.stringify({ cpuUs: (c.user + c.system) / events, perS: events / wall })}\n`);
  await log.close();
  await store.close();
  await signer.close();
  rmSync(root, { recursive: true, force: true });
  process.exit(0);
}

async function main() {
  const flags = new Map(
    process.argv.slice(2).map((a) => {
      const [k, v] = a.replace(/^--/, '').split('=');
      return [k, v ?? 'true'];
    }),
  );
  if (!flags.has('base')) {
    console.error(
      'usage: node append-ab.mjs --base=DIR [--new=DIR] [--rounds=4] [--orgs=1] [--batch=100] [--agents=12] [--events=40000]',
    );
    process.exit(2);
  }
  const builds = {
    base: resolve(flags.get('base')),
    new: resolve(flags.get('new') ?? join(HERE, '..', 'dist')),
  };
  const opts = {
    orgs: Number(flags.get('orgs') ?? 1),
    batch: Number(flags.get('batch') ?? 100),
    agents: Number(flags.get('agents') ?? 12),
    events: Number(flags.get('events') ?? 40_000),
  };
  const rounds = Number(flags.get('rounds') ?? 4);
  let taskset = [];
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
    taskset = ['taskset', '-c', String(flags.get('cpu') ?? 1)];
  } catch {
    console.error('taskset not found: runs are not pinned');
  }
  const samples = { base: [], new: [] };
  for (let r = 0; r < rounds; r++) {
    for (const name of r % 2 ? ['new', 'base'] : ['base', 'new']) {
      const args = [
        process.execPath,
        join(HERE, 'append-ab.mjs'),
        '--child',
        JSON.stringify({ dist: builds[name], ...opts }),
      ];
      const [cmd, ...rest] = taskset.length > 0 ? [...taskset, ...args] : args;
      const out = spawnSync(cmd, rest, { encoding: 'utf8', timeout: 300_000 });
      if (out.status !== 0) throw new Error(`${name} run failed: ${out.stderr}`);
      const m = JSON.parse(out.stdout.trim().split('\n').pop());
      samples[name].push(m.cpuUs);
      console.log(
        `round ${r + 1} ${name.padEnd(4)} ${m.cpuUs.toFixed(1)} µs/event, ${Math.round(m.perS)} events/s`,
      );
    }
  }
  const sorted = (a) => [...a].sort((x, y) => x - y);
  for (const name of ['base', 'new']) {
    const s = sorted(samples[name]);
    console.log(
      `${name}: min ${s[0].toFixed(1)}, median ${s[s.length >> 1].toFixed(1)} µs/event (${JSON.stringify(opts)})`,
    );
  }
}
