import type { AuditEvent, AuditInput, AuditReader, AuditRef, AuditSink } from '../audit/types.js';
import { newId } from '../util/ids.js';
import type { Store } from './db.js';

/**
 * The per-org event log in LMDB: events under [org_id, seq], an id index and a pipeline index.
 * `seq` is assigned in memory at append time (one writer per org), so order is the call order.
 */
export class LmdbEventLog implements AuditSink, AuditReader {
  private readonly heads = new Map<string, number>();

  constructor(private readonly store: Store) {}

  private nextSeq(orgId: string): number {
    let head = this.heads.get(orgId);
    if (head === undefined) {
      head = 0;
      for (const key of this.store.events.getKeys({
        start: [orgId, Number.MAX_SAFE_INTEGER],
        end: [orgId],
        reverse: true,
        limit: 1,
      })) {
        head = (key as [string, number])[1];
      }
    }
    head++;
    this.heads.set(orgId, head);
    return head;
  }

  append(input: AuditInput): Promise<AuditRef> {
    const seq = this.nextSeq(input.org_id);
    const event: AuditEvent = {
      id: newId('ae_'),
      org_id: input.org_id,
      seq,
      ts: new Date().toISOString(),
      event_type: input.event_type,
      agent_id: input.agent_id ?? null,
      session_id: input.session_id ?? null,
      task_id: input.task_id ?? null,
      pipeline_id: input.pipeline_id ?? null,
      behavior_type: input.behavior_type ?? null,
      outcome: input.outcome ?? null,
      reason: input.reason ?? null,
      rule_id: input.rule_id ?? null,
      provider: input.provider ?? null,
      model: input.model ?? null,
      usage: input.usage ?? null,
      cost: input.cost ?? null,
      detections: input.detections ?? null,
      details: input.details ?? {},
      personal: input.personal ?? {},
    };
    const { events, eventIds, pipelineIndex } = this.store;
    const ref: AuditRef = { id: event.id, seq };
    return this.store.writer
      .enqueue(() => {
        events.putSync([event.org_id, seq], event);
        eventIds.putSync(event.id, [event.org_id, seq]);
        if (event.pipeline_id !== null)
          pipelineIndex.putSync([event.org_id, event.pipeline_id, seq], event.id);
      })
      .then(() => ref);
  }

  get(orgId: string, eventId: string): AuditEvent | undefined {
    const key = this.store.eventIds.get(eventId) as [string, number] | undefined;
    if (!key || key[0] !== orgId) return undefined;
    return this.store.events.get(key);
  }

  byPipeline(orgId: string, pipelineId: string): AuditEvent[] {
    const out: AuditEvent[] = [];
    for (const { key } of this.store.pipelineIndex.getRange({
      start: [orgId, pipelineId],
      end: [orgId, pipelineId, Number.MAX_SAFE_INTEGER],
    })) {
      const seq = (key as [string, string, number])[2];
      const e = this.store.events.get([orgId, seq]) as AuditEvent | undefined;
      if (e) out.push(e);
    }
    return out;
  }
}
