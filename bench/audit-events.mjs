// The audit benchmarks' workload (audit.mjs, append-ab.mjs).

// Events of a realistic shape: governed tool calls (decision record, detections, personal args)
// and LLM calls (usage, cost, personal end-user id), ~1 KB of JSON each once chained.

export function makeInputs(org, count, agents = 12) {
  const out = [];
  for (let i = 0; i < count; i++) {
    const agent = `agent-${i % agents}`;
    const pipeline = `pl_${org.slice(-4)}${i.toString(36).padStart(6, '0')}`;
    if (i % 3 === 0) {
      out.push({
        org_id: org,
        event_type: 'govern.decision',
        agent_id: agent,
        session_id: `ses_${i % 97}`,
        task_id: null,
        pipeline_id: pipeline,
        behavior_type: 'TOOL_CALL',
        outcome: i % 7 === 0 ? 'block' : 'allow',
        reason: i % 7 === 0 ? 'only EUR, USD and GBP' : '',
        rule_id: i % 7 === 0 ? 'r001-currency' : null,
        model: null,
        provider: null,
        detections: {
          input: { pii: [], secrets: [], injection: { direct: 0, jailbreak: 0 }, unicode: [], counts: {} },
        },
        details: {
          behavior_id: `bh_${i.toString(36)}`,
          action: { type: 'TOOL_CALL', tool: 'payments.transfer', server: null, model: null, provider: null },
          decision: {
            mode: 'enforce',
            effect: i % 7 === 0 ? 'block' : 'allow',
            outcome: i % 7 === 0 ? 'block' : 'allow',
            matched: i % 7 === 0 ? ['r001-currency'] : [],
            redact: [],
            alert: false,
            policy_id: 'pol_bench200',
            policy_version: 1,
          },
          fingerprint: 'f3a1c2d4e5b6a7980112233445566778899aabbccddeeff00112233445566778',
          mandate_jti: i % 7 === 0 ? null : `mdt_${i.toString(36).padStart(22, '0')}`,
        },
        personal: {
          args: {
            amount: 100 + (i % 900),
            currency: i % 7 === 0 ? 'JPY' : 'EUR',
            recipient: 'acct-supplier-acme',
          },
        },
      });
    } else {
      out.push({
        org_id: org,
        event_type: 'llm_call',
        agent_id: agent,
        session_id: `ses_${i % 97}`,
        pipeline_id: pipeline,
        behavior_type: 'LLM_CALL',
        outcome: 'allow',
        provider: 'openai',
        model: 'gpt-4o-mini',
        usage: { prompt_tokens: 900 + (i % 200), completion_tokens: 112, total_tokens: 1012 + (i % 200) },
        cost: 0.000203,
        detections: { input: { pii: [], secrets: [], unicode: [] } },
        details: {
          route: '/v1/chat/completions',
          status: 200,
          latency_ms: 180 + (i % 50),
          stream: i % 4 === 0,
        },
        personal: i % 2 ? { end_user: `user-${i % 5000}` } : undefined,
      });
    }
  }
  return out;
}
