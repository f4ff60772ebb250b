// Governance benchmark (issue "Decide every action locally", item 9). One command, bounded time:
//   1. In-process: evaluate() on a generated 200-rule policy (p50/p99 over 200,000 timed calls per
//      action) and detect() on a 4 KB prose prompt, in a child process pinned to the server CPU.
//   2. POST /v1/govern over HTTP: govgate with the 200-rule policy published and assigned to its org,
//      pinned to the server CPU; autocannon (50 connections) on the generator CPU, for an allowed
//      TOOL_CALL (a mandate is issued) and a blocked one: decisions/s and server CPU µs per decision.
//   3. Gateway overhead with governance on: a ~4 KB chat prompt of plain prose through direct, the
//      passthrough, govgate (default policy) and govgate (200-rule policy); CPU µs/req at saturation
//      and the open-loop paced (1,000 RPS) added latency, in rotating rounds.
// Reuses targets.mjs (processes) and loadgen.mjs (saturation and paced phases). Writes
// results/NAME.json and .md (default NAME: govern) and prints the Markdown tables.
//
// Usage: node govern.mjs [--quick] [--rounds=N] [--skip=inproc,govern,gateway] [--rate=RPS]
//                        [--connections=N] [--gen-cpu=0] [--server-cpu=1] [--nice=N] [--out=NAME]
//                        [--baseline=DIR]  (gateway rounds also run the build in DIR: A/B)
import { mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  BENCH_DIR,
  chatBodies,
  clkTck,
  directTarget,
  hasTaskset,
  http,
  log,
  median,
  parseFlags,
  parseJson,
  percentile,
  pinSelf,
  ROOT_DIR,
  runBench,
  sleep,
  smokeCheck,
  spawnNode,
  spawnOptions,
  startGovgate,
  startLoadgen,
  startMock,
  startPassthrough,
} from './targets.mjs';

// ---------------------------------------------------------------------------------------------
// The workload: a 200-rule policy, the governed actions, a 4 KB prose prompt.

const SERVICES = [
  'payments',
  'crm',
  'db',
  'fs',
  'email',
  'github',
  'slack',
  'calendar',
  'jira',
  'storage',
  'billing',
  'hr',
  'search',
  'shell',
  'browser',
  'docs',
  'analytics',
  'vault',
  'k8s',
  'ticketing',
];
const OPS = ['read', 'list', 'create', 'update', 'delete', 'send', 'transfer', 'refund', 'query', 'exec'];
const MODELS = [
  'gpt-4o*',
  'gpt-4.1*',
  'o1-*',
  'o3-*',
  'claude-3-opus*',
  'claude-3-5-sonnet*',
  'gemini-1.5-pro*',
  'mistral-large*',
  'llama-3*',
  'command-r*',
];
const PROVIDERS = ['openai', 'anthropic', 'google', 'mistral', 'cohere', 'azure-openai'];

// A rule set of `n` rules (docs/policy.md format) in ten families, cycled: TOOL_CALL rules on exact
// tools, service globs and tool lists with field conditions (gt, in, exists, matches, nested
// all/any/not); LLM_CALL model/provider rules on detections and payload fields; redact rules for
// external providers; systems of record, credentials, skills and state transitions.
export function generateRuleSet(n = 200) {
  const rules = [];
  for (let i = 0; rules.length < n; i++) {
    const k = Math.floor(i / 10);
    const svc = SERVICES[k % SERVICES.length];
    const tool = `${svc}.${OPS[(k * 3 + i) % OPS.length]}`;
    const id = (kind) => `r${String(rules.length).padStart(3, '0')}-${kind}`;
    const provider = PROVIDERS[k % PROVIDERS.length];
    switch (i % 10) {
      case 0: // an amount threshold on an exact tool → approval (signed for some)
        rules.push({
          id: id('amount'),
          when: {
            type: 'TOOL_CALL',
            tool: k % 5 === 0 ? `${svc}.transfer` : tool,
            all: [{ field: 'args.amount', op: 'gt', value: 1000 + i * 25 }],
          },
          then: 'require_approval',
          tier: k % 3 === 0 ? 'signed' : 'standard',
          reason: `amounts over ${1000 + i * 25} need an approval`,
        });
        break;
      case 1: // a currency allow-list on a service glob → block
        rules.push({
          id: id('currency'),
          when: {
            type: 'TOOL_CALL',
            tool: `${svc}.*`,
            all: [
              { field: 'args.currency', op: 'exists', value: true },
              { not: { field: 'args.currency', op: 'in', value: ['EUR', 'USD', 'GBP'] } },
            ],
          },
          then: 'block',
          reason: 'only EUR, USD and GBP',
        });
        break;
      case 2: // recipient outside the known accounts, too many items, or a system path → block
        rules.push({
          id: id('recipient'),
          when: {
            type: 'TOOL_CALL',
            tool,
            any: [
              {
                all: [
                  { field: 'args.recipient', op: 'exists' },
                  {
                    not: {
                      field: 'args.recipient',
                      op: 'matches',
                      value: '^acct-(?:supplier|partner)-[a-z]+$',
                    },
                  },
                ],
              },
              { field: 'args.count', op: 'gt', value: 500 + i },
              { field: 'args.path', op: 'matches', value: '^/(?:etc|root|var/lib)/', flags: 'i' },
            ],
          },
          then: 'block',
        });
        break;
      case 3: // destructive operations, as a tool list
        rules.push({
          id: id('destructive'),
          when: { type: 'TOOL_CALL', tool: [`${svc}.delete`, `${svc}.drop`, `${svc}.purge`] },
          then: k % 2 ? 'block' : 'require_approval',
        });
        break;
      case 4: // exec-like tools for agents outside a trusted list
        rules.push({
          id: id('exec'),
          when: {
            type: ['TOOL_CALL', 'CODE_EXEC'],
            tool: ['*.exec', `${svc}.run*`],
            not: { agent_id: ['trusted-*', 'ops-bot', `svc-${svc}`] },
          },
          then: 'require_approval',
        });
        break;
      case 5: // read tools allowed under a limit
        rules.push({
          id: id('read'),
          when: {
            type: 'TOOL_CALL',
            tool: [`${svc}.read`, `${svc}.list`, `${svc}.query`],
            all: [{ field: 'args.limit', op: 'lte', value: 1000 }],
          },
          then: 'allow',
        });
        break;
      case 6: // a model family at two providers: block on sensitive detections
        rules.push({
          id: id('model'),
          when: {
            type: 'LLM_CALL',
            model: MODELS[k % MODELS.length],
            provider: [provider, PROVIDERS[(k + 1) % PROVIDERS.length]],
            any: [
              { field: 'detections.pii', op: 'contains', value: 'iban' },
              { field: 'detections.secrets', op: 'contains', value: 'private_key' },
              { field: 'detections.injection.jailbreak', op: 'gte', value: 0.5 },
            ],
          },
          then: 'block',
        });
        break;
      case 7: // external providers redact PII; deprecated models; premium models need an approval
        if (k % 3 === 0) {
          rules.push({
            id: id('redact'),
            when: { type: ['LLM_CALL', 'EMBEDDING_CALL'], provider: [provider, 'openai', 'anthropic'] },
            then: 'redact',
            redact: ['pii'],
          });
        } else if (k % 3 === 1) {
          rules.push({
            id: id('deprecated'),
            when: { type: 'LLM_CALL', model: [`gpt-3.5-turbo-${k}*`, `text-davinci-${k}*`] },
            then: 'block',
            reason: 'deprecated model',
          });
        } else {
          rules.push({
            id: id('premium'),
            when: {
              type: 'LLM_CALL',
              model: MODELS[(k + 3) % MODELS.length],
              all: [
                { not: { agent_id: ['research-*', `team-${k}-*`] } },
                {
                  any: [
                    { field: 'payload.max_tokens', op: 'gt', value: 8000 },
                    { field: 'payload.n', op: 'gt', value: 1 },
                  ],
                },
              ],
            },
            then: 'require_approval',
          });
        }
        break;
      case 8: // writes to production systems of record
        rules.push({
          id: id('sor'),
          when: {
            type: 'SYSTEM_OF_RECORD_WRITE',
            any: [
              { field: 'payload.target', op: 'matches', value: `^prod[-_]${svc}`, flags: 'i' },
              { field: 'payload.tables', op: 'contains', value: 'customers' },
            ],
          },
          then: 'require_approval',
          tier: k % 3 ? 'standard' : 'signed',
        });
        break;
      default: // credentials, skills, state transitions
        if (k % 3 === 0) {
          rules.push({
            id: id('cred'),
            when: {
              type: 'CREDENTIAL_ACCESS',
              any: [{ field: 'payload.secret', op: 'matches', value: `^prod/${svc}/` }],
            },
            then: 'require_approval',
          });
        } else if (k % 3 === 1) {
          rules.push({
            id: id('skill'),
            when: {
              type: 'SKILL_LOAD',
              not: { field: 'payload.publisher', op: 'in', value: ['internal', 'verified'] },
            },
            then: 'block',
          });
        } else {
          rules.push({
            id: id('state'),
            when: {
              type: 'STATE_TRANSITION',
              all: [
                { field: 'payload.to', op: 'eq', value: 'closed' },
                { field: 'payload.value', op: 'gte', value: 10000 + i },
              ],
            },
            then: 'require_approval',
          });
        }
    }
  }
  return { mode: 'enforce', default: 'allow', rules };
}

// Tool arguments without anything a detector flags. The blocked call differs only in its currency.
const ALLOWED_ARGS = {
  amount: 120,
  currency: 'EUR',
  recipient: 'acct-supplier-acme',
  reference: 'invoice for office supplies',
};
const GOVERN_BODIES = {
  allowed: JSON.stringify({ type: 'TOOL_CALL', payload: { tool: 'payments.transfer', args: ALLOWED_ARGS } }),
  blocked: JSON.stringify({
    type: 'TOOL_CALL',
    payload: { tool: 'payments.transfer', args: { ...ALLOWED_ARGS, currency: 'JPY' } },
  }),
};

// 4,092 characters of ordinary prose: no personal data, secrets, injection phrases or odd unicode
// (the in-process phase checks that detect() finds nothing in it).
const PROSE = [
  'Please read the operations review below and write a short briefing for the regional managers.',
  'The warehouse in the north handled more parcels this quarter than in any quarter before, and the',
  'team kept the average time from order to dispatch under one working day for most of the period.',
  'Two things made that possible: the new sorting line that went live in the spring, and a rota that',
  'moved the busiest shifts closer to the afternoon peak. Staff turnover fell, partly because the',
  'rota gave people more notice of their hours, and partly because the canteen finally reopened.',
  'The southern depot had a harder time. A supplier of packing material changed its delivery days',
  'without much warning, and for about three weeks the depot ran short of medium boxes. The team',
  'worked around it by borrowing stock from the coastal site, which added cost and some confusion',
  'about who owned the transfer paperwork. That has since been settled, and the supplier now sends',
  'a weekly forecast so that the depot can plan ahead instead of reacting on the day.',
  'Customer complaints were roughly flat overall. Most of them were about late deliveries in rural',
  'areas, where the courier partner struggles with long routes and narrow roads in bad weather. The',
  'customer care team suggests offering a collection point in the larger villages, so that people',
  'can pick up their parcels at a shop rather than wait at home for a van that may not arrive.',
  'Returns are growing faster than sales. The finance team thinks the main cause is the free returns',
  'offer on clothing, which was meant to run for a single season but was never switched off. They',
  'would like to replace it with a small fee for returns that are not caused by a fault, and to keep',
  'returns free for loyal customers. Marketing is worried this will hurt the brand, so the question',
  'is on the agenda for the next leadership meeting, with a proposal from each side.',
  'On the technology side, the stock system was moved to new servers without any lost orders, though',
  'the night batch that reconciles stock levels now finishes later than it used to. The engineers',
  'expect to fix that once the old reports are retired, which should happen before the holidays.',
  'The handheld scanners in the north are reaching the end of their life, and the battery packs no',
  'longer last a full shift, so a replacement is planned for the new year.',
  'Safety figures improved. There were fewer minor injuries than last year, mostly thanks to better',
  'lighting in the loading bays and a refresher course on lifting. One near miss with a forklift in',
  'the southern depot led to a review of the walkways, and the painted lanes have been redone.',
  'Looking ahead, the main risks are the rising price of fuel, the renewal of the courier contract,',
  'and the busy season, when volumes usually double for several weeks. The plan is to hire seasonal',
  'staff earlier than last year, to test the collection points in a handful of villages, and to agree',
  'a clear owner for every transfer between sites. The review ends with thanks to the teams who kept',
  'things moving through a difficult spring.',
  'The people team reports that the mentoring scheme for new supervisors has been popular, and',
  'several shift leads have asked to join as mentors. Exit interviews point to the same themes as',
  'before: people value predictable hours, fair overtime and managers who explain decisions. The',
  'team would like to run short workshops on giving feedback, and to publish the rota further ahead.',
  'Energy use in the buildings went down after the heating controls were replaced, although the',
  'savings were smaller than hoped because the winter was colder than usual. Solar panels on the',
  'roof of the northern warehouse are being considered, and a survey of the roof is booked.',
  'Finally, the board asked for a simple summary it can read in a few minutes. Please keep the',
  'briefing plain and factual, point out anything that looks unusual or needs a decision, and say',
  'clearly where the review does not give enough detail to draw a conclusion.',
  'Thank you for keeping it brief.',
  'A table is not needed; short paragraphs are fine.',
  'Use British spelling throughout.',
].join(' ');

const SYSTEM =
  'You are a careful operations analyst. Answer in plain English, keep a neutral tone, and say so ' +
  'when the review does not contain the answer.';

// ---------------------------------------------------------------------------------------------
// Arguments

function parseArgs(argv) {
  const { flags, quick, num, outName } = parseFlags(argv);
  const skip = new Set((flags.get('skip') ?? '').split(',').filter(Boolean));
  for (const s of skip)
    if (!['inproc', 'govern', 'gateway'].includes(s)) throw new Error(`unknown --skip ${s}`);
  const out = outName('govern');
  const baseline = flags.get('baseline');
  return {
    inproc: flags.get('inproc') === 'true', // internal: the pinned in-process child
    // --baseline=DIR: the gateway rounds also measure the govgate build in DIR (default policy).
    baseline: baseline === undefined ? null : resolve(baseline),
    quick,
    out,
    skip: [...skip],
    rounds: Math.max(1, Math.round(num('rounds', 3))),
    connections: Math.round(num('connections', 50)),
    rate: num('rate', 1000),
    genCpu: Math.round(num('gen-cpu', 0)),
    serverCpu: Math.round(num('server-cpu', 1)),
    nice: flags.has('nice') ? Math.round(Number(flags.get('nice'))) : process.getuid?.() === 0 ? -20 : null,
    saturation: quick ? { warmupS: 0.3, durationS: 1 } : { warmupS: 1, durationS: 5 },
    paced: quick ? { warmupS: 0.3, durationS: 1.5 } : { warmupS: 1, durationS: 10 },
    prewarmS: quick ? 0.5 : 1,
    settleMs: quick ? 200 : 500,
    evalCalls: 200_000,
    detectCalls: quick ? 2_000 : 10_000,
  };
}

// ---------------------------------------------------------------------------------------------
// 1. In-process (runs in a child pinned to the server CPU)

const distUrl = (p) => pathToFileURL(join(ROOT_DIR, 'dist', 'src', p)).href;

const EMPTY_DETECTIONS = {
  pii: [],
  secrets: [],
  injection: { direct: 0, indirect: 0, jailbreak: 0, role_hijack: 0, context_manipulation: 0 },
  unicode: [],
};

function stats(ns, n = ns.length) {
  const s = ns.subarray(0, n).sort();
  let sum = 0;
  for (let i = 0; i < n; i++) sum += s[i];
  const us = (x) => (x === null ? null : Math.round(x) / 1000);
  return {
    n,
    p50Us: us(percentile(s, 0.5, n)),
    p90Us: us(percentile(s, 0.9, n)),
    p99Us: us(percentile(s, 0.99, n)),
    p999Us: us(percentile(s, 0.999, n)),
    meanUs: us(sum / n),
  };
}

// Times every call with process.hrtime.bigint(); `timerP50Us` (the cost of an empty timed call) is
// reported beside, not subtracted. Also the plain loop's mean (no per-call timer).
function timeCalls(fn, n, warm) {
  let sink = 0;
  for (let i = 0; i < warm; i++) sink += fn();
  const ns = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    sink += fn();
    ns[i] = Number(process.hrtime.bigint() - t0);
  }
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) sink += fn();
  const loopMeanUs = Number(process.hrtime.bigint() - t0) / n / 1000;
  return { ...stats(ns), loopMeanUs: Math.round(loopMeanUs * 1000) / 1000, sink };
}

async function inprocMain(cfg) {
  const policyMod = await import(distUrl('core/policy/index.js'));
  const detectMod = await import(distUrl('core/detect/index.js'));
  const { compilePolicy, evaluate, policyFlags, candidates, DEFAULT_POLICY } = policyMod;
  const ruleSet = generateRuleSet(200);
  const compiled = compilePolicy(ruleSet);
  if (!compiled.ok)
    throw new Error(
      `the generated policy does not compile: ${JSON.stringify(compiled.problems.slice(0, 3))}`,
    );
  const policy = compiled.policy;
  const compileMs = [];
  for (let i = 0; i < 20; i++) {
    const t0 = process.hrtime.bigint();
    compilePolicy(ruleSet);
    compileMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const flags = policyFlags(policy);
  const actions = [
    {
      name: 'TOOL_CALL payments.transfer, allowed',
      action: { type: 'TOOL_CALL', agent_id: 'bench', tool: 'payments.transfer', args: ALLOWED_ARGS },
      expect: 'allow',
    },
    {
      name: 'TOOL_CALL payments.transfer, blocked (currency)',
      action: {
        type: 'TOOL_CALL',
        agent_id: 'bench',
        tool: 'payments.transfer',
        args: { ...ALLOWED_ARGS, currency: 'JPY' },
      },
      expect: 'block',
    },
    {
      name: 'TOOL_CALL weather.lookup (no exact-tool rule)',
      action: { type: 'TOOL_CALL', agent_id: 'bench', tool: 'weather.lookup', args: { city: 'Lyon' } },
      expect: 'allow',
    },
    {
      name: 'LLM_CALL gpt-4o-mini/openai, no findings (the gateway call)',
      action: {
        type: 'LLM_CALL',
        agent_id: 'bench',
        model: 'gpt-4o-mini',
        provider: 'openai',
        payload: { tools: [], stream: false },
      },
      expect: 'allow',
    },
    {
      name: 'LLM_CALL gpt-4o-mini/openai, PII found (email, iban)',
      action: {
        type: 'LLM_CALL',
        agent_id: 'bench',
        model: 'gpt-4o-mini',
        provider: 'openai',
        payload: { tools: [], stream: false },
        detections: { ...EMPTY_DETECTIONS, pii: ['email', 'iban'] },
      },
      expect: 'block',
    },
    {
      name: 'SYSTEM_OF_RECORD_WRITE prod_crm',
      action: {
        type: 'SYSTEM_OF_RECORD_WRITE',
        agent_id: 'bench',
        payload: { target: 'prod_crm', tables: ['orders'] },
      },
      expect: 'needs_approval',
    },
  ];
  const evalResults = [];
  const run = (pol, name, action, expect, policyName) => {
    const a = { detections: EMPTY_DETECTIONS, ...action };
    const f = pol === policy ? flags : policyFlags(pol);
    const d = evaluate(pol, a, f);
    if (d.outcome !== expect) throw new Error(`${name}: expected ${expect}, got ${d.outcome} (${d.rule_id})`);
    const r = timeCalls(() => evaluate(pol, a, f).matched.length, cfg.evalCalls, 20_000);
    delete r.sink;
    evalResults.push({
      policy: policyName,
      action: name,
      candidates: candidates(pol, a.type, a.tool).length,
      outcome: d.outcome,
      rule_id: d.rule_id,
      matched: d.matched.length,
      ...r,
    });
    log(`  evaluate ${policyName} ${name}: p50 ${r.p50Us} µs, p99 ${r.p99Us} µs`);
  };
  for (const x of actions) run(policy, x.name, x.action, x.expect, '200 rules');
  run(DEFAULT_POLICY, actions[3].name, actions[3].action, 'allow', 'default');
  const timer = timeCalls(() => 0, cfg.evalCalls, 20_000);
  delete timer.sink;

  const found = detectMod.detect(PROSE);
  const injection = Object.values(found.injection).some((v) => v > 0);
  if (found.findings.length > 0 || injection) {
    throw new Error(`the 4 KB prose has findings: ${JSON.stringify(found).slice(0, 300)}`);
  }
  const det = timeCalls(() => detectMod.detect(PROSE).findings.length, cfg.detectCalls, 500);
  delete det.sink;
  log(`  detect 4 KB: p50 ${det.p50Us} µs, p99 ${det.p99Us} µs`);
  return {
    rules: ruleSet.rules.length,
    ruleSetJsonBytes: JSON.stringify(ruleSet).length,
    compileMsMedian: Math.round(median(compileMs) * 1000) / 1000,
    timerOverhead: timer,
    evaluate: evalResults,
    detect: { textChars: PROSE.length, findings: 0, ...det },
  };
}

// ---------------------------------------------------------------------------------------------
// 2 and 3. Over HTTP

async function call(t, method, path, body) {
  const r = await http(method, `${t.origin}${path}`, { headers: t.adminHeaders, body });
  return { status: r.status, body: parseJson(r.text), text: r.text };
}

// Creates, drafts, publishes and assigns (to the bootstrap token's org) a rule set.
async function publishPolicy(t, name, ruleSet) {
  const created = await call(t, 'POST', '/api/v2/policies', { name });
  if (created.status !== 201)
    throw new Error(`create policy: ${created.status} ${created.text.slice(0, 300)}`);
  const id = created.body.id;
  const draft = await call(t, 'POST', `/api/v2/policies/${id}/versions`, { rules: ruleSet });
  if (draft.status !== 201) throw new Error(`draft: ${draft.status} ${draft.text.slice(0, 300)}`);
  const n = draft.body.version_no;
  const pub = await call(t, 'POST', `/api/v2/policies/${id}/versions/${n}/publish`);
  if (pub.status !== 200) throw new Error(`publish: ${pub.status} ${pub.text.slice(0, 300)}`);
  const me = await call(t, 'GET', '/api/me');
  if (me.status !== 200 || typeof me.body?.org_id !== 'string')
    throw new Error(`/api/me: ${me.text.slice(0, 300)}`);
  const assigned = await call(t, 'POST', `/api/v2/policies/${id}/assignments`, {
    scope_type: 'org',
    scope_id: me.body.org_id,
  });
  if (assigned.status >= 300) throw new Error(`assign: ${assigned.status} ${assigned.text.slice(0, 300)}`);
  return { policyId: id, version: n, orgId: me.body.org_id };
}

// One governed call of each kind must come back as expected, decided by the published policy.
async function checkGovern(t, published) {
  const post = async (body) => {
    const r = await http('POST', `${t.origin}/v1/govern`, { headers: t.headers, body });
    return { status: r.status, body: parseJson(r.text), text: r.text };
  };
  const ok = await post(GOVERN_BODIES.allowed);
  if (ok.status !== 200 || ok.body?.outcome !== 'allow' || typeof ok.body?.mandate !== 'string') {
    throw new Error(`allowed call: HTTP ${ok.status} ${ok.text.slice(0, 300)}`);
  }
  if (ok.body.details?.policy_id !== published.policyId) {
    throw new Error(`allowed call decided by ${ok.body.details?.policy_id}, not ${published.policyId}`);
  }
  const no = await post(GOVERN_BODIES.blocked);
  if (no.status !== 200 || no.body?.outcome !== 'block' || no.body?.rule_id !== 'r001-currency') {
    throw new Error(`blocked call: HTTP ${no.status} ${no.text.slice(0, 300)}`);
  }
  const llm = await post(
    JSON.stringify({ type: 'LLM_CALL', payload: { model: 'gpt-4o-mini', provider: 'openai' } }),
  );
  if (llm.body?.outcome !== 'allow' || !String(llm.body?.rule_id).endsWith('-redact')) {
    throw new Error(`LLM_CALL check: HTTP ${llm.status} ${llm.text.slice(0, 300)}`);
  }
  return { mandateChars: ok.body.mandate.length, blockedBy: no.body.rule_id, llmRule: llm.body.rule_id };
}

const r1 = (x, d = 1) =>
  x === null || x === undefined || !Number.isFinite(x) ? null : Math.round(x * 10 ** d) / 10 ** d;
const bad = (p) => (p.errors ?? 0) + (p.non2xx ?? 0) + (p.timeouts ?? 0);

async function governRounds(cfg, lg, t, mockPid, base) {
  const spec = (kind, t) => ({
    url: `${t.origin}/v1/govern`,
    headers: t.headers,
    body: GOVERN_BODIES[kind],
    pid: t.pid,
    mockPid,
    connections: cfg.connections,
  });
  const kinds = ['allowed', 'blocked'];
  // With a baseline build (--baseline), each round measures both builds, in alternating order.
  const builds = base ? [t, base] : [t];
  for (const b of builds)
    for (const k of kinds) await lg.call('saturate', { ...spec(k, b), warmupS: 0, durationS: cfg.prewarmS });
  const rounds = [];
  const baseRounds = [];
  for (let r = 0; r < cfg.rounds; r++) {
    const order = r % 2 ? [...kinds].reverse() : kinds;
    const round = {};
    const baseRound = {};
    for (const k of order) {
      for (const b of r % 2 ? [...builds].reverse() : builds) {
        await sleep(cfg.settleMs);
        const s = await lg.call('saturate', { ...spec(k, b), ...cfg.saturation });
        (b === t ? round : baseRound)[k] = s;
        log(
          `  govern ${b === t ? '' : '(base) '}${k.padEnd(7)} round ${r + 1}: ${s.rps} decisions/s, ` +
            `${s.serverCpuUsPerReq} µs CPU/decision, server ${Math.round((s.serverCpuShare ?? 0) * 100)}% of a core, err ${bad(s)}`,
        );
      }
    }
    rounds.push(round);
    baseRounds.push(baseRound);
  }
  const result = { rounds, summary: summarizeGovern(kinds, rounds) };
  if (base) result.base = { rounds: baseRounds, summary: summarizeGovern(kinds, baseRounds) };
  return result;
}

function summarizeGovern(kinds, rounds) {
  const summary = {};
  for (const k of kinds) {
    const col = (f) => rounds.map((x) => f(x[k]));
    summary[k] = {
      decisionsPerS: r1(median(col((s) => s.rps)), 0),
      cpuUsPerDecision: r1(median(col((s) => s.serverCpuUsPerReq))),
      // Decisions per second of server CPU: what one fully used core would sustain.
      decisionsPerCpuS: r1(median(col((s) => (s.serverCpuUsPerReq ? 1e6 / s.serverCpuUsPerReq : null))), 0),
      serverCpuShare: r1(median(col((s) => s.serverCpuShare)), 2),
      latencyP50Ms: r1(median(col((s) => s.latencyMs.p50)), 2),
      latencyP99Ms: r1(median(col((s) => s.latencyMs.p99)), 2),
      perRound: {
        decisionsPerS: col((s) => s.rps),
        cpuUsPerDecision: col((s) => s.serverCpuUsPerReq),
        serverCpuShare: col((s) => s.serverCpuShare),
      },
      errors: rounds.reduce((a, x) => a + bad(x[k]), 0),
    };
  }
  return summary;
}

async function gatewayRounds(cfg, lg, targets, bodies, mockPid) {
  const names = [...targets.keys()];
  const specFor = (t) => ({
    url: `${t.origin}${t.path}`,
    headers: t.headers,
    body: bodies.chat,
    pid: t.pid,
    mockPid,
  });
  for (const name of names) {
    await lg.call('saturate', {
      ...specFor(targets.get(name)),
      connections: cfg.connections,
      warmupS: 0,
      durationS: cfg.prewarmS,
    });
  }
  const rounds = [];
  for (let r = 0; r < cfg.rounds; r++) {
    const order = names.map((_, i) => names[(i + r) % names.length]);
    log(`gateway round ${r + 1}/${cfg.rounds}: ${order.join(' → ')}`);
    const round = { order };
    for (const name of order) {
      const t = targets.get(name);
      if (t.child?.exited) {
        log(`${name}: process exited (${t.child.exitCode}): ${t.child.tail.slice(-5).join(' | ')}`);
        continue;
      }
      await sleep(cfg.settleMs);
      const s = await lg.call('saturate', { ...specFor(t), connections: cfg.connections, ...cfg.saturation });
      round[name] = { saturate: s };
      log(
        `  ${name.padEnd(11)} saturate: ${s.rps} rps, ${s.serverCpuUsPerReq} µs CPU/req, ` +
          `server ${Math.round((s.serverCpuShare ?? 0) * 100)}% of a core, err ${bad(s)}`,
      );
      if ((s.rps ?? 0) < 1.2 * cfg.rate) {
        round[name].paced = { skipped: `overloaded: ${s.rps} RPS at saturation < 1.2 × ${cfg.rate}` };
        log(`  ${name.padEnd(11)} paced ${cfg.rate}/s: skipped`);
        continue;
      }
      await sleep(cfg.settleMs);
      const p = await lg.call('paced', { ...specFor(t), rate: cfg.rate, connections: 256, ...cfg.paced });
      round[name].paced = p;
      log(
        `  ${name.padEnd(11)} paced ${cfg.rate}/s: p50 ${p.latencyMs.p50} ms, p99 ${p.latencyMs.p99} ms, ` +
          `err ${p.errors + p.non2xx}`,
      );
    }
    rounds.push(round);
  }
  // Per round: added latency vs direct and vs the passthrough, CPU ratio to the passthrough.
  const perRound = rounds.map((round) => {
    const out = {};
    const at = (n, f) => {
      const x = round[n];
      return x ? f(x) : null;
    };
    const p = (n, q) => at(n, (x) => x.paced?.latencyMs?.[q] ?? null);
    for (const n of names) {
      const cpu = at(n, (x) => x.saturate.serverCpuUsPerReq);
      const ptCpu = at('passthrough', (x) => x.saturate.serverCpuUsPerReq);
      const diff = (a, b) => (a === null || b === null ? null : a - b);
      out[n] = {
        cpuUsPerReq: cpu,
        rps: at(n, (x) => x.saturate.rps),
        serverCpuShare: at(n, (x) => x.saturate.serverCpuShare),
        p50: p(n, 'p50'),
        p99: p(n, 'p99'),
        addedP50: diff(p(n, 'p50'), p('direct', 'p50')),
        addedP99: diff(p(n, 'p99'), p('direct', 'p99')),
        overPtP50: diff(p(n, 'p50'), p('passthrough', 'p50')),
        overPtP99: diff(p(n, 'p99'), p('passthrough', 'p99')),
        cpuVsPt: cpu !== null && ptCpu ? cpu / ptCpu : null,
        errors: at(n, (x) => bad(x.saturate) + (x.paced?.skipped ? 0 : bad(x.paced))),
      };
    }
    return out;
  });
  const summary = {};
  for (const n of names) {
    const col = (k) => perRound.map((x) => x[n]?.[k] ?? null);
    const med = (k, d) => r1(median(col(k)), d);
    summary[n] = {
      cpuUsPerReq: med('cpuUsPerReq', 1),
      cpuVsPt: med('cpuVsPt', 2),
      rps: med('rps', 0),
      serverCpuShare: med('serverCpuShare', 2),
      p50: med('p50', 3),
      p99: med('p99', 3),
      addedP50: med('addedP50', 3),
      addedP99: med('addedP99', 3),
      overPtP50: med('overPtP50', 3),
      overPtP99: med('overPtP99', 3),
      perRound: {
        cpuUsPerReq: col('cpuUsPerReq'),
        rps: col('rps'),
        addedP50: col('addedP50').map((x) => r1(x, 3)),
        addedP99: col('addedP99').map((x) => r1(x, 3)),
      },
      errors: col('errors').reduce((a, b) => a + (b ?? 0), 0),
    };
  }
  return { rounds, perRound, summary };
}

// ---------------------------------------------------------------------------------------------
// Report

const f = (x, d = 2) =>
  x === null || x === undefined
    ? '–'
    : Number(x).toLocaleString('en-US', {
        minimumFractionDigits: d,
        maximumFractionDigits: d,
      });
const spread = (xs, d) => xs.map((x) => f(x, d)).join(' / ');

function report(result) {
  const out = [];
  const ip = result.inproc;
  if (ip) {
    out.push(
      `**In-process** (one core, ${ip.evaluate[0]?.n.toLocaleString('en-US')} timed calls each; a timed empty ` +
        `call costs ${f(ip.timerOverhead.p50Us, 3)} µs p50, included below; 200 rules, ` +
        `${f(ip.ruleSetJsonBytes / 1024, 1)} KB of JSON, compiled in ${f(ip.compileMsMedian, 2)} ms)`,
      '',
      '| what | policy | candidate rules | outcome | p50 µs | p99 µs | p99.9 µs | loop mean µs |',
      '| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |',
    );
    for (const e of ip.evaluate) {
      out.push(
        `| evaluate(): ${e.action} | ${e.policy} | ${e.candidates} | ${e.outcome}${e.rule_id ? ` (${e.rule_id})` : ''} | ` +
          `${f(e.p50Us, 3)} | ${f(e.p99Us, 3)} | ${f(e.p999Us, 3)} | ${f(e.loopMeanUs, 3)} |`,
      );
    }
    const d = ip.detect;
    out.push(
      `| detect(): ${d.textChars.toLocaleString('en-US')}-character prose prompt, all detectors, no findings | – | – | – | ` +
        `${f(d.p50Us, 1)} | ${f(d.p99Us, 1)} | ${f(d.p999Us, 1)} | ${f(d.loopMeanUs, 1)} |`,
      '',
    );
  }
  const g = result.govern?.summary;
  if (g) {
    out.push(
      `**POST /v1/govern** (govgate on one core, 200-rule policy published and assigned; autocannon, ` +
        `${result.config.connections} connections; medians of ${result.config.rounds} rounds, per-round values after)`,
      '',
      '| action | decisions/s | server CPU µs/decision | decisions per CPU-second | server core use | latency p50 / p99 ms | decisions/s per round | CPU µs per round |',
      '| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |',
    );
    const rows = Object.entries(g).map(([k, s]) => [k, s, '']);
    for (const [k, s] of Object.entries(result.govern.base?.summary ?? {}))
      rows.push([k, s, ' **(baseline build)**']);
    for (const [k, s, label] of rows) {
      out.push(
        `| TOOL_CALL ${k}${k === 'allowed' ? ' (mandate issued)' : ''}${label}${s.errors ? ' (errors!)' : ''} | ` +
          `${f(s.decisionsPerS, 0)} | ${f(s.cpuUsPerDecision, 1)} | ${f(s.decisionsPerCpuS, 0)} | ` +
          `${f((s.serverCpuShare ?? 0) * 100, 0)} % | ${f(s.latencyP50Ms, 1)} / ${f(s.latencyP99Ms, 1)} | ` +
          `${spread(s.perRound.decisionsPerS, 0)} | ${spread(s.perRound.cpuUsPerDecision, 1)} |`,
      );
    }
    out.push('');
  }
  const gw = result.gateway?.summary;
  if (gw) {
    out.push(
      `**Gateway, ${result.requestBytes.chat.toLocaleString('en-US')}-byte chat request (4 KB prose prompt)**, paced ` +
        `${result.config.rate} RPS open loop; added = minus direct, over PT = minus the passthrough, same round; ` +
        `medians of ${result.config.rounds} rounds`,
      '',
      '| target | CPU µs/req | ×PT | RPS (sat.) | p50 ms | p99 ms | added p50 ms | added p99 ms | over PT p50 ms | over PT p99 ms | added p50 per round |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
    );
    for (const [n, s] of Object.entries(gw)) {
      const base = n === 'direct';
      out.push(
        `| ${n}${s.errors ? ' (errors!)' : ''} | ${f(s.cpuUsPerReq, 1)} | ${f(s.cpuVsPt)} | ${f(s.rps, 0)} | ` +
          `${f(s.p50, 3)} | ${f(s.p99, 2)} | ${base ? '(baseline)' : f(s.addedP50, 3)} | ${base ? '' : f(s.addedP99, 2)} | ` +
          `${base || n === 'passthrough' ? '' : f(s.overPtP50, 3)} | ${base || n === 'passthrough' ? '' : f(s.overPtP99, 2)} | ` +
          `${base ? '' : spread(s.perRound.addedP50, 3)} |`,
      );
    }
    out.push('');
  }
  const t = result.targets;
  if (t.length) {
    out.push('| issue target | measured | met? |', '| --- | --- | --- |');
    for (const x of t)
      out.push(`| ${x.target} | ${x.measured} | ${x.met === null ? '–' : x.met ? 'yes' : '**no**'} |`);
  }
  return out.join('\n');
}

function issueTargets(result) {
  const out = [];
  const ip = result.inproc;
  if (ip) {
    const worst = Math.max(...ip.evaluate.filter((e) => e.policy === '200 rules').map((e) => e.p50Us));
    out.push({
      target: 'evaluate() ≤ 20 µs p50 (200 rules)',
      measured: `${f(worst, 2)} µs (slowest action's p50)`,
      met: worst <= 20,
    });
  }
  const g = result.govern?.summary;
  if (g) {
    for (const [k, s] of Object.entries(g)) {
      out.push({
        target: `/v1/govern ≥ 15,000 decisions/s on one core (${k})`,
        measured: `${f(s.decisionsPerS, 0)} decisions/s (${f(s.decisionsPerCpuS, 0)} per CPU-second)`,
        met: s.decisionsPerS >= 15_000,
      });
    }
  }
  const gw = result.gateway?.summary;
  if (gw) {
    for (const n of ['govgate', 'govgate-200']) {
      const s = gw[n];
      if (!s) continue;
      out.push({
        target: `added p50 ≤ 0.5 ms, 4 KB prompt, ${n === 'govgate' ? 'default policy' : '200-rule policy'}`,
        measured: `${f(s.addedP50, 3)} ms (${f(s.overPtP50, 3)} ms over the passthrough)`,
        met: s.addedP50 === null ? null : s.addedP50 <= 0.5,
      });
    }
  }
  return out;
}

// Newest modification time of govgate's built files when the run starts: which build was measured.
function govgateBuildTime() {
  try {
    const dir = join(ROOT_DIR, 'dist', 'src');
    let newest = 0;
    for (const f of readdirSync(dir, { recursive: true })) {
      if (f.endsWith('.js')) newest = Math.max(newest, statSync(join(dir, f)).mtimeMs);
    }
    return newest ? new Date(newest).toISOString() : null;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Main

async function runInprocChild(cpu) {
  const child = spawnNode('inproc', ['govern.mjs', '--inproc'], { cpu, ipc: true });
  child.proc.stderr.on('data', (d) => process.stderr.write(d));
  return new Promise((res, rej) => {
    child.proc.on('message', (m) => (m?.error ? rej(new Error(m.error)) : res(m.result)));
    child.proc.on('exit', (code) =>
      rej(new Error(`in-process child exited (${code}): ${child.tail.slice(-5).join(' | ')}`)),
    );
  });
}

async function main(cfg) {
  const nCpu = cpus().length;
  const pin = hasTaskset() && nCpu >= 2;
  if (!pin) log(`WARNING: not pinning (taskset ${hasTaskset() ? 'found' : 'missing'}, ${nCpu} CPUs)`);
  const genCpu = pin ? cfg.genCpu : undefined;
  const serverCpu = pin ? cfg.serverCpu : undefined;
  if (pin) pinSelf(cfg.genCpu);
  if (Number.isInteger(cfg.nice) && cfg.nice !== 0) spawnOptions.nice = cfg.nice;
  const ticks = clkTck();
  const build = govgateBuildTime();
  const bodies = chatBodies(SYSTEM, PROSE);
  log(`config: ${JSON.stringify({ ...cfg, pin, chatBytes: bodies.chat.length })}`);
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    cpus: `${nCpu} × ${cpus()[0]?.model ?? '?'}`,
    clkTck: ticks,
    pinning: pin ? { loadgenAndMock: genCpu, servers: serverCpu, inProcess: serverCpu } : null,
    mode: cfg.quick ? 'quick' : 'full',
    config: cfg,
    govgateBuild: build,
    requestBytes: { chat: bodies.chat.length, promptChars: PROSE.length },
    policy: generateRuleSet(200),
    inproc: null,
    govern: null,
    gateway: null,
    targetStatus: {},
  };

  if (!cfg.skip.includes('inproc')) {
    log('in-process: evaluate() and detect()');
    result.inproc = await runInprocChild(serverCpu);
  }

  if (!cfg.skip.includes('govern') || !cfg.skip.includes('gateway')) {
    const mock = await startMock(genCpu);
    log(`mock upstream on ${mock.origin} (pid ${mock.child.pid})`);
    const lg = startLoadgen(genCpu);
    await lg.call('config', { clkTck: ticks });
    const targets = new Map();
    const starters = {
      direct: async () => directTarget(mock),
      passthrough: () => startPassthrough(mock, serverCpu),
      govgate: () => startGovgate(mock, serverCpu),
      'govgate-200': async () => {
        const t = await startGovgate(mock, serverCpu, {
          nodeArgs: (process.env.GOVGATE_NODE_ARGS ?? '').split(' ').filter(Boolean),
        });
        t.name = 'govgate-200';
        t.published = await publishPolicy(t, 'bench-200-rules', result.policy);
        t.checked = await checkGovern(t, t.published);
        return t;
      },
    };
    if (cfg.baseline !== null) {
      const cli = join(cfg.baseline, 'src', 'cli.js');
      starters['govgate-base'] = () => startGovgate(mock, serverCpu, { cli, name: 'govgate-base' });
      // The same 200-rule set on the baseline build, for the /v1/govern rounds only.
      starters['govgate-200-base'] = async () => {
        const t = await startGovgate(mock, serverCpu, {
          cli,
          name: 'govgate-200-base',
          nodeArgs: (process.env.GOVGATE_NODE_ARGS ?? '').split(' ').filter(Boolean),
        });
        t.published = await publishPolicy(t, 'bench-200-rules', result.policy);
        t.checked = await checkGovern(t, t.published);
        return t;
      };
    }
    // govgate-200 serves both phases; govgate-200-base only the /v1/govern one.
    const wanted = Object.keys(starters).filter((name) =>
      name === 'govgate-200'
        ? true
        : name === 'govgate-200-base'
          ? !cfg.skip.includes('govern')
          : !cfg.skip.includes('gateway'),
    );
    for (const name of wanted) {
      try {
        const t = await starters[name]();
        await smokeCheck(t, bodies);
        targets.set(name, t);
        result.targetStatus[name] = {
          status: 'ok',
          pid: t.pid,
          ...(t.published ? { published: t.published, checked: t.checked } : {}),
        };
        log(`${name}: ready on ${t.origin} (pid ${t.pid})`);
      } catch (err) {
        result.targetStatus[name] = {
          status: 'unavailable',
          reason: String(err.message ?? err).slice(0, 600),
        };
        log(`${name}: UNAVAILABLE: ${result.targetStatus[name].reason}`);
      }
    }
    const g200 = targets.get('govgate-200');
    if (!cfg.skip.includes('govern') && g200) {
      log('POST /v1/govern at saturation');
      result.govern = await governRounds(cfg, lg, g200, mock.child.pid, targets.get('govgate-200-base'));
    }
    if (!cfg.skip.includes('gateway')) {
      const gw = new Map([...targets].filter(([name]) => name !== 'govgate-200-base'));
      result.gateway = await gatewayRounds(cfg, lg, gw, bodies, mock.child.pid);
    }
  }

  result.targets = issueTargets(result);
  const md = [
    `Run ${result.date}, node ${result.node}, ${result.cpus}, mode ${result.mode}, govgate build ${build ?? '?'}.`,
    '',
    report(result),
  ].join('\n');
  const dir = join(BENCH_DIR, 'results');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${cfg.out}.json`), `${JSON.stringify(result, null, 2)}\n`);
  writeFileSync(join(dir, `${cfg.out}.md`), `${md}\n`);
  process.stdout.write(`\n${md}\n`);
}

const cfg0 = parseArgs(process.argv.slice(2));
if (cfg0.inproc) {
  // The pinned in-process child: answers its parent over IPC.
  inprocMain(cfg0).then(
    (result) => process.send({ result }, () => process.exit(0)),
    (err) => process.send({ error: String(err?.stack ?? err) }, () => process.exit(1)),
  );
} else {
  runBench(main, cfg0, { nice: cfg0.nice });
}
