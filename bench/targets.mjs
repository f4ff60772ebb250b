// Starting and stopping the processes of a benchmark run: the mock upstream, the load generator and
// the targets (direct, passthrough, portkey, govgate). Every server binds 127.0.0.1 only.
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';

export const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
export const ROOT_DIR = resolve(BENCH_DIR, '..');
export const GOVGATE_CLI = join(ROOT_DIR, 'dist', 'src', 'cli.js');
const PORTKEY_ENTRY = join(BENCH_DIR, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js');
const LOOPBACK = '127.0.0.1';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function log(msg) {
  const s = ((Date.now() - log.t0) / 1000).toFixed(1).padStart(6);
  process.stderr.write(`[${s}s] ${msg}\n`);
}
log.t0 = Date.now();

export function hasTaskset() {
  return spawnSync('taskset', ['-V'], { stdio: 'ignore' }).status === 0;
}

export function clkTck() {
  const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const n = Number(r.stdout?.trim());
  return Number.isInteger(n) && n > 0 ? n : 100;
}

export function pinSelf(cpu) {
  spawnSync('taskset', ['-a', '-p', '-c', String(cpu), String(process.pid)], { stdio: 'ignore' });
}

export function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer();
    s.once('error', rej);
    s.listen(0, LOOPBACK, () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

const children = new Set();

// Spawns `node ...args` (through `taskset -c cpu` when pinning), keeps the last lines of its output.
// With `spawnOptions.nice` set (a negative value needs root), runs under `nice -n N` so that other
// work on a shared machine disturbs the measurement less. nice and taskset exec, so pid is node's.
export const spawnOptions = { nice: null };

export function spawnNode(name, args, { cpu, env, ipc = false } = {}) {
  let argv = [process.execPath, ...args];
  if (cpu !== undefined) argv = ['taskset', '-c', String(cpu), ...argv];
  if (spawnOptions.nice !== null) argv = ['nice', '-n', String(spawnOptions.nice), ...argv];
  const cmd = argv.shift();
  const stdio = ipc ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'];
  const proc = spawn(cmd, argv, { cwd: BENCH_DIR, env: env ?? process.env, stdio });
  const child = { name, proc, pid: proc.pid, tail: [], exited: false, exitCode: null };
  children.add(child);
  const keep = (buf) => {
    for (const line of buf.toString('utf8').split('\n')) {
      if (!line.trim()) continue;
      child.tail.push(line.slice(0, 400));
      if (child.tail.length > 40) child.tail.shift();
    }
  };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  proc.on('exit', (code, signal) => {
    child.exited = true;
    child.exitCode = code ?? signal;
    children.delete(child);
  });
  return child;
}

// Waits for a `{"ready":true,"port":N}` line on the child's stdout.
export function readyPort(child, timeoutMs = 10_000) {
  return new Promise((res, rej) => {
    let buf = '';
    const timer = setTimeout(() => rej(new Error(`${child.name}: not ready in ${timeoutMs} ms`)), timeoutMs);
    const onData = (d) => {
      buf += d.toString('utf8');
      for (const line of buf.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const m = JSON.parse(line);
          if (m.ready && Number.isInteger(m.port)) {
            clearTimeout(timer);
            child.proc.stdout.off('data', onData);
            res(m.port);
            return;
          }
        } catch {}
      }
    };
    child.proc.stdout.on('data', onData);
    child.proc.once('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`${child.name} exited (${code}) before ready: ${child.tail.join(' | ')}`));
    });
  });
}

export async function stopChild(child, graceMs = 2000) {
  if (child.exited) return;
  const gone = new Promise((r) => child.proc.once('exit', r));
  child.proc.kill('SIGTERM');
  const t = setTimeout(() => {
    if (!child.exited) child.proc.kill('SIGKILL');
  }, graceMs);
  await gone;
  clearTimeout(t);
}

export async function stopAll() {
  await Promise.all([...children].map((c) => stopChild(c)));
}

export function killAllSync() {
  for (const c of children) {
    try {
      c.proc.kill('SIGKILL');
    } catch {}
  }
}

export async function http(method, url, { headers = {}, body, timeoutMs = 5000 } = {}) {
  const res = await request(url, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const text = await res.body.text();
  return { status: res.statusCode, text, headers: res.headers };
}

export function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

// One request of each kind must come back 200 with the mock's answer in it.
export async function smokeCheck(target, bodies) {
  const url = `${target.origin}${target.path}`;
  const plain = await http('POST', url, { headers: target.headers, body: bodies.chat });
  const msg = parseJson(plain.text)?.choices?.[0]?.message?.content;
  if (plain.status !== 200 || typeof msg !== 'string' || !msg.includes('concise summary')) {
    throw new Error(`chat: HTTP ${plain.status} ${plain.text.slice(0, 300)}`);
  }
  const sse = await http('POST', url, { headers: target.headers, body: bodies.stream });
  if (sse.status !== 200 || !sse.text.includes('[DONE]') || !sse.text.includes('concise')) {
    throw new Error(`stream: HTTP ${sse.status} ${sse.text.slice(0, 300)}`);
  }
}

async function waitFor(fn, timeoutMs, what) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      if (await fn()) return;
    } catch (err) {
      last = err;
    }
    await sleep(150);
  }
  throw new Error(`${what}: not ready in ${timeoutMs} ms${last ? ` (${last.message})` : ''}`);
}

const BENCH_AUTH = { authorization: 'Bearer sk-bench' };

export async function startMock(cpu) {
  const child = spawnNode('mock', ['mock-upstream.mjs', '--port=0'], { cpu });
  const port = await readyPort(child);
  return { child, port, origin: `http://${LOOPBACK}:${port}` };
}

export function directTarget(mock) {
  return {
    name: 'direct',
    origin: mock.origin,
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', ...BENCH_AUTH },
    pid: mock.child.pid,
    child: null,
  };
}

export async function startPassthrough(mock, cpu) {
  const child = spawnNode('passthrough', ['passthrough.mjs', `--upstream=${mock.origin}`, '--port=0'], {
    cpu,
  });
  const port = await readyPort(child);
  return {
    name: 'passthrough',
    origin: `http://${LOOPBACK}:${port}`,
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', ...BENCH_AUTH },
    pid: child.pid,
    child,
  };
}

export function portkeyVersion() {
  try {
    const p = join(BENCH_DIR, 'node_modules', '@portkey-ai', 'gateway', 'package.json');
    return JSON.parse(readFileSync(p, 'utf8')).version;
  } catch {
    return null;
  }
}

export async function startPortkey(mock, cpu, bodies) {
  if (!existsSync(PORTKEY_ENTRY))
    throw new Error('@portkey-ai/gateway is not installed (cd bench && npm ci)');
  const port = await freePort();
  const child = spawnNode(
    'portkey',
    ['--import', './force-loopback.mjs', PORTKEY_ENTRY, `--port=${port}`, '--headless'],
    // Production mode, as deployed: no UI routes.
    { cpu, env: { ...process.env, NODE_ENV: 'production' } },
  );
  const target = {
    name: 'portkey',
    origin: `http://${LOOPBACK}:${port}`,
    path: '/v1/chat/completions',
    headers: {
      'content-type': 'application/json',
      ...BENCH_AUTH,
      'x-portkey-provider': 'openai',
      'x-portkey-custom-host': `${mock.origin}/v1`,
    },
    pid: child.pid,
    child,
  };
  try {
    await waitFor(
      async () => {
        if (child.exited) throw new Error(`exited: ${child.tail.join(' | ')}`);
        await smokeCheck(target, bodies);
        return true;
      },
      20_000,
      'portkey',
    );
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return target;
}

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
function base62(n) {
  let s = '';
  while (s.length < n) {
    for (const b of randomBytes(n * 2)) {
      if (b < 248 && s.length < n) s += BASE62[b % 62];
    }
  }
  return s;
}

/**
 * Runs `govgate <command>` on 127.0.0.1 with a fresh data dir (removed when it exits) and
 * `env` on top, and waits for its readiness probe. Returns the child and its origin.
 */
async function spawnGovgate(name, cli, command, { cpu, env, nodeArgs = [] }) {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), `govgate-bench-${command}-`));
  const child = spawnNode(name, [...nodeArgs, cli, command], {
    cpu,
    env: {
      ...process.env,
      SERVICE_HOST: LOOPBACK,
      SERVICE_PORT: String(port),
      SERVICE_DATA_DIR: dataDir,
      SERVICE_KEYS_DIR: join(dataDir, 'keys'),
      SERVICE_LOG_LEVEL: 'warn',
      ...env,
    },
  });
  child.cleanup = () => rmSync(dataDir, { recursive: true, force: true });
  child.proc.once('exit', () => child.cleanup());
  const origin = `http://${LOOPBACK}:${port}`;
  try {
    await waitFor(
      async () => {
        if (child.exited) throw new Error(`exited (${child.exitCode}): ${child.tail.join(' | ')}`);
        return (await http('GET', `${origin}/api/health/ready`, { timeoutMs: 1000 })).status === 200;
      },
      30_000,
      `${name} /api/health/ready`,
    );
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return { child, origin };
}

/** `cli`: another build's dist/src/cli.js (an A/B baseline in the same run); `name`: its label. */
export async function startGovgate(mock, cpu, { cli = GOVGATE_CLI, name = 'govgate', nodeArgs = [] } = {}) {
  if (!existsSync(cli)) throw new Error(`govgate is not built (${cli} missing; run npm ci at the root)`);
  const token = `gk_pat_${base62(40)}`;
  const { child, origin } = await spawnGovgate(name, cli, 'start', {
    cpu,
    nodeArgs,
    env: { SERVICE_BOOTSTRAP_TOKEN: token, SERVICE_EGRESS_ALLOW: `${LOOPBACK}:${mock.port}` },
  });
  const admin = { authorization: `Bearer ${token}` };
  try {
    const onboard = await http('POST', `${origin}/api/agents/onboard`, {
      headers: admin,
      body: { agent_id: 'bench' },
    });
    const j = parseJson(onboard.text);
    const key = typeof j?.api_key === 'string' ? j.api_key : j?.api_key?.api_key;
    if (onboard.status >= 300 || typeof key !== 'string') {
      throw new Error(`onboard: HTTP ${onboard.status} ${onboard.text.slice(0, 300)}`);
    }
    const providers = await http('PUT', `${origin}/api/settings/providers`, {
      headers: admin,
      body: {
        providers: [
          { name: 'openai', api_key: 'sk-bench', base_url: `${mock.origin}/v1`, models: ['gpt-*'] },
        ],
      },
    });
    if (providers.status >= 300) {
      throw new Error(`providers: HTTP ${providers.status} ${providers.text.slice(0, 300)}`);
    }
    return {
      name,
      origin,
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      // The bootstrap token's headers, for admin calls (publishing policies: govern.mjs).
      adminHeaders: admin,
      pid: child.pid,
      child,
    };
  } catch (err) {
    await stopChild(child);
    throw err;
  }
}

/**
 * A govgate sidecar in front of a govgate control plane (DESIGN A.1): the control plane on
 * `controlCpu` (it takes in the sidecar's log; in a cluster it runs in its own pod), the sidecar
 * on `cpu`. The target is the sidecar: its CPU is what an agent pod pays per call. `controlPid`
 * lets a script read the control plane's share too.
 */
export async function startSidecarTarget(
  mock,
  cpu,
  controlCpu,
  { cli = GOVGATE_CLI, name = 'sidecar' } = {},
) {
  const control = await startGovgate(mock, controlCpu, {
    cli,
    name: `${name}-control`,
    nodeArgs: (process.env.CONTROL_NODE_ARGS ?? '').split(' ').filter(Boolean),
  });
  const made = await http('POST', `${control.origin}/api/sidecars`, {
    headers: control.adminHeaders,
    body: { name: 'bench' },
  });
  const token = parseJson(made.text)?.token;
  if (made.status !== 201 || typeof token !== 'string') {
    await stopChild(control.child);
    throw new Error(`sidecar token: HTTP ${made.status} ${made.text.slice(0, 300)}`);
  }
  try {
    const { child, origin } = await spawnGovgate(name, cli, 'sidecar', {
      cpu,
      nodeArgs: (process.env.SIDECAR_NODE_ARGS ?? '').split(' ').filter(Boolean),
      env: {
        SERVICE_CONTROL_URL: control.origin,
        SERVICE_SIDECAR_TOKEN: token,
        SERVICE_PROXY_PORT: String(await freePort()),
        SERVICE_EGRESS_ALLOW: `${LOOPBACK}:${mock.port}`,
      },
    });
    return { ...control, name, origin, pid: child.pid, child, controlPid: control.pid, control };
  } catch (err) {
    await stopChild(control.child);
    throw err;
  }
}

/** utime + stime of a process in µs, from /proc/<pid>/stat (null when it cannot be read). */
export function procCpuUs(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1e6) / clkTck();
  } catch {
    return null;
  }
}

// The load generator: a child process on the generator CPU, driven over IPC.
export function startLoadgen(cpu) {
  const child = spawnNode('loadgen', ['loadgen.mjs'], { cpu, ipc: true });
  child.proc.stdout.on('data', (d) => process.stderr.write(d));
  child.proc.stderr.on('data', (d) => process.stderr.write(d));
  let seq = 0;
  const pending = new Map();
  child.proc.on('message', (m) => {
    const p = pending.get(m?.id);
    if (!p) return;
    pending.delete(m.id);
    if (m.error) p.rej(new Error(`loadgen: ${m.error}`));
    else p.res(m.result);
  });
  child.proc.on('exit', (code) => {
    for (const p of pending.values()) p.rej(new Error(`loadgen exited (${code})`));
    pending.clear();
  });
  return {
    child,
    call(cmd, spec) {
      const id = ++seq;
      return new Promise((res, rej) => {
        pending.set(id, { res, rej });
        child.proc.send({ id, cmd, spec });
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Session helpers for the standalone scripts (govern.mjs, audit.mjs); run.mjs keeps its own copy.

// A negative niceness only counts within the process's scheduler autogroup (one per session when
// kernel.sched_autogroup_enabled=1), so a script re-launches itself in a new session (setsid), with
// `taskset -c cpu` in front when `cpu` is given; the outer process relays signals and the exit code.
// Returns the inner child, or null when this process is the one that measures.
export function relaunchInSession({ nice, cpu } = {}) {
  if (process.env.BENCH_INNER === '1') return null;
  const wantNice = Number.isInteger(nice) && nice < 0;
  const wantPin = cpu !== undefined && hasTaskset();
  const canSetsid =
    existsSync('/proc/self/autogroup') && spawnSync('setsid', ['-V'], { stdio: 'ignore' }).status === 0;
  if (!wantPin && !(wantNice && canSetsid)) return null;
  let argv = [process.execPath, ...process.argv.slice(1)];
  if (wantPin) argv = ['taskset', '-c', String(cpu), ...argv];
  if (wantNice && canSetsid) argv = ['setsid', '-w', ...argv];
  const cmd = argv.shift();
  const child = spawn(cmd, argv, {
    stdio: ['inherit', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, BENCH_INNER: '1' },
  });
  const relay = (signal) => {
    if (child.connected) child.send({ stop: signal });
  };
  process.on('SIGINT', () => relay('SIGINT'));
  process.on('SIGTERM', () => relay('SIGTERM'));
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
  return child;
}

export function setAutogroupNice(nice) {
  if (!Number.isInteger(nice) || nice >= 0 || process.env.BENCH_INNER !== '1') return false;
  try {
    writeFileSync('/proc/self/autogroup', String(nice));
    log(`scheduler autogroup niceness ${nice}`);
    return true;
  } catch (err) {
    log(`could not set autogroup niceness (${err.code ?? err.message}); measurements share the CPUs evenly`);
    return false;
  }
}

// Percentile as loadgen.mjs takes it: the ceil(q·n)-th smallest of a sorted array.
export function percentile(sorted, q, n = sorted.length) {
  if (n === 0) return null;
  return sorted[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))];
}

/** The benchmark's chat request bodies (plain and streaming) for a system and a user message. */
// ~1 KB chat request: a system and a user message, plain prose (nothing a PII/secret detector flags).
export const SYSTEM =
  'You are a careful financial analyst assistant. Answer in plain English, keep a neutral tone, cite ' +
  'the section of the report you rely on, and say so when the report does not contain the answer. ' +
  'Prefer short paragraphs over bullet lists.';
export const USER =
  'Please summarise the quarterly report below for the leadership team in about one hundred words. ' +
  'Revenue rose by eleven percent against the same quarter last year, mostly because the subscription ' +
  'tier kept growing, while hardware sales stayed flat. Operating margin improved by two points thanks ' +
  'to lower cloud spending and a smaller marketing budget. The report lists three risks: exposure to ' +
  'European currencies, the renewal of a large supplier contract, and slower hiring in customer ' +
  'support. Guidance for the next quarter is growth of eight to ten percent, with two new integrations ' +
  'planned. Mention anything that looks unusual.';

export function chatBodies(system, user) {
  const base = {
    model: 'gpt-4o-mini',
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: user },
    ],
    temperature: 0.2,
  };
  return { chat: JSON.stringify(base), stream: JSON.stringify({ ...base, stream: true }) };
}

export function median(xs) {
  const v = xs.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/**
 * `--name=value` / `--flag` arguments: the flags, whether `--quick` was given, and `num(name,
 * default)` for a non-negative number.
 */
/**
 * The set-up the A/B scripts share (paced-ab.mjs, sat.mjs): generator and mock pinned to CPU 0,
 * servers to CPU 1, the niceness asked for, the mock, the passthrough when asked, one govgate per
 * variant, the load generator, each target warmed up (3 s of saturation), and `spec(target)`,
 * what the load generator is told of a target for `cfg.scenario`.
 */
export async function startVariants(cfg, { passthrough = false, sidecar = false, sidecarBase } = {}) {
  const pin = hasTaskset();
  const gen = pin ? 0 : undefined;
  const server = pin ? 1 : undefined;
  if (pin) pinSelf(0);
  if (Number.isInteger(cfg.nice) && cfg.nice !== 0) spawnOptions.nice = cfg.nice;
  const bodies = chatBodies(SYSTEM, USER);
  const mock = await startMock(gen);
  const targets = [];
  if (passthrough) targets.push(await startPassthrough(mock, server));
  for (const v of cfg.variants)
    targets.push(await startGovgate(mock, server, { cli: v.cli, name: v.name, nodeArgs: v.nodeArgs }));
  if (sidecar) targets.push(await startSidecarTarget(mock, server, gen));
  if (sidecarBase)
    targets.push(await startSidecarTarget(mock, server, gen, { cli: sidecarBase, name: 'sidecar-base' }));
  const lg = startLoadgen(gen);
  await lg.call('config', { clkTck: clkTck() });
  const spec = (t) => ({
    url: `${t.origin}${t.path}`,
    headers: t.headers,
    body: bodies[cfg.scenario],
    pid: t.pid,
    mockPid: mock.child.pid,
  });
  for (const t of targets)
    await lg.call('saturate', { ...spec(t), connections: 50, warmupS: 0, durationS: 3 });
  return { mock, targets, lg, spec };
}

/** `--scenario=chat|stream` (default chat). */
export function scenarioFlag(flags) {
  const scenario = flags.get('scenario') ?? 'chat';
  if (scenario !== 'chat' && scenario !== 'stream') throw new Error('--scenario is chat or stream');
  return scenario;
}

/**
 * `--variants='NAME=CLI|NODE_FLAGS;…'`: govgate builds to take turns (an empty CLI is this
 * checkout's dist/src/cli.js) with optional node flags, e.g. 'head=;base=/tmp/base/dist/src/cli.js'.
 */
export function parseVariants(spec) {
  return (spec ?? 'govgate=')
    .split(';')
    .filter(Boolean)
    .map((v) => {
      const i = v.indexOf('=');
      const [cli, nodeFlags] = (i < 0 ? '' : v.slice(i + 1)).split('|');
      return {
        name: i < 0 ? v : v.slice(0, i),
        cli: cli || GOVGATE_CLI,
        nodeArgs: (nodeFlags ?? '').split(' ').filter(Boolean),
      };
    });
}

export function parseFlags(argv) {
  const flags = new Map();
  for (const a of argv) {
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(a);
    if (!m) throw new Error(`unknown argument ${a}`);
    flags.set(m[1], m[2] ?? 'true');
  }
  const num = (k, d) => {
    const v = flags.has(k) ? Number(flags.get(k)) : d;
    if (!Number.isFinite(v) || v < 0) throw new Error(`--${k} must be a number`);
    return v;
  };
  const outName = (d) => {
    const out = flags.get('out') ?? d;
    if (!/^[a-z0-9][a-z0-9-]*$/.test(out)) throw new Error(`--out must be a simple name like ${d}`);
    return out;
  };
  return { flags, quick: flags.get('quick') === 'true', num, outName };
}

/**
 * Runs a benchmark's `main(cfg)` the same way for every script: re-launched in its own session
 * (and pinned to `cpu` when given) by `relaunchInSession`; then every child process is stopped
 * on the way out, whether the run ends, fails, is interrupted (SIGINT, SIGTERM, a stop message
 * from the outer process) or loses its parent (IPC disconnect).
 */
export function runBench(main, cfg, { nice, cpu } = {}) {
  if (relaunchInSession({ nice, cpu })) return;
  setAutogroupNice(nice);
  let stopping = false;
  const shutdown = async (code) => {
    if (stopping) return;
    stopping = true;
    if (code === 130 || code === 143) log('interrupted: stopping every child process');
    const force = setTimeout(() => {
      killAllSync();
      process.exit(code);
    }, 5000);
    await stopAll().catch(() => {});
    clearTimeout(force);
    process.exit(code);
  };
  if (process.send) {
    process.on('message', (m) => {
      if (m?.stop) shutdown(130);
    });
    process.on('disconnect', () => shutdown(130));
  }
  process.on('SIGINT', () => shutdown(130));
  process.on('SIGTERM', () => shutdown(143));
  process.on('exit', killAllSync);
  for (const event of ['uncaughtException', 'unhandledRejection']) {
    process.on(event, (err) => {
      log(`error: ${err?.stack ?? err}`);
      shutdown(1);
    });
  }
  main(cfg).then(
    () => shutdown(0),
    (err) => {
      if (stopping) return; // children killed by a signal: their failures are expected
      log(`error: ${err?.stack ?? err}`);
      shutdown(1);
    },
  );
}
