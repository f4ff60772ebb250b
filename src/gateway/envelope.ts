/** The governance envelope on every gateway response (spec 2.2). */
export interface ServiceEnvelope {
  session_id: string;
  task_id: string;
  audit_url: string;
  blocked: boolean;
  [extra: string]: unknown;
}

export function envelope(
  baseUrl: string,
  sessionId: string,
  taskId: string,
  pipelineId: string,
  blocked: boolean,
): ServiceEnvelope {
  return {
    session_id: sessionId,
    task_id: taskId,
    audit_url: `${baseUrl}/api/audit/pipeline/${pipelineId}`,
    blocked,
  };
}
