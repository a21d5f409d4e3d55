-- One key's queued tasks in admission order (priority, fair_round, queued_at, id). A claim whose
-- agent's queue is led by a deep backlog of shut keys (at their cap, or their throttle closed)
-- seeks the head of each other key here instead of walking that backlog (src/engine/candidates.ts).
-- Led by agent: PostgreSQL takes no index condition from a column the partial index's WHERE fixes
-- (status here), so an index led by status is walked whole for any one agent's rows.
-- Never edit a shipped migration: add a new numbered file.
CREATE INDEX executions_key_admission ON executions (agent, flow_key, priority, fair_round, queued_at, id)
  WHERE status = 'queued' AND flow_key IS NOT NULL;
