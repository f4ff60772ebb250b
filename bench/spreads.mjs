// Object spreads against Object.assign and named members, on this Node (docs/ops.md, "Object spreads
// on the request path"). Each shape builds 1,000,000 objects; results are kept in a ring so the
// optimiser cannot drop them. Prints µs per object, min of 3 runs.
//
// Usage: node spreads.mjs   (pin it for steadier numbers: taskset -c 1 node spreads.mjs)

const N = 1_000_000;
const RING = 1024;

// The gateway's audit input: a call's base fields, its details, and the outcome of the call.
const base = {
  org_id: 'org_a',
  agent_id: 'agent-1',
  session_id: 'ses_x',
  task_id: null,
  pipeline_id: 'pl_x',
  behavior_type: 'LLM_CALL',
  provider: 'openai',
  model: 'gpt-4o-mini',
  rule_id: null,
  detections: null,
  personal: {},
};
const details = { endpoint: '/v1/chat/completions', format: 'openai', stream: false, acting_admin: false };
const events = Array.from({ length: RING }, (_, i) => ({
  outcome: 'allow',
  reason: null,
  usage: { prompt_tokens: i, completion_tokens: 10, total_tokens: i + 10 },
  cost: 0.0002,
  details: { status: 200, finish_reason: 'stop', tool_calls: [], upstream_ms: i, output_detections: [] },
}));
const items = Array.from({ length: RING }, (_, i) => ({ message: i, part: -1, text: `text ${i}` }));
const NONE = [];

const shapes = {
  'audit input: { ...base, k, ...event, details: { ...a, ...b } }': (i) => {
    const e = events[i];
    return { ...base, event_type: 'llm_call', ...e, details: { ...details, ...e.details } };
  },
  'audit input: Object.assign (what the gateway does)': (i) => {
    const e = events[i];
    return Object.assign({ event_type: 'llm_call' }, base, e, {
      details: Object.assign({}, details, e.details),
    });
  },
  '3 members: { ...item, findings }': (i) => ({ ...items[i], findings: NONE }),
  '3 members: Object.assign({}, item, { findings })': (i) => Object.assign({}, items[i], { findings: NONE }),
  '3 members: named ({ message: item.message, … })': (i) => {
    const it = items[i];
    return { message: it.message, part: it.part, text: it.text, findings: NONE };
  },
  '3 members: a bare clone { ...item }': (i) => ({ ...items[i] }),
};

const ring = new Array(RING);
for (const [name, make] of Object.entries(shapes)) {
  let best = Number.POSITIVE_INFINITY;
  for (let run = 0; run < 3; run++) {
    const t0 = performance.now();
    for (let i = 0; i < N; i++) ring[i & (RING - 1)] = make(i & (RING - 1));
    best = Math.min(best, ((performance.now() - t0) * 1000) / N);
  }
  console.log(`${best.toFixed(3).padStart(7)} µs  ${name}`);
}
