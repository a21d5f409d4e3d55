-- The agent dashboard's charts (GET /v1/agents/{agent}/series and /seats): one agent's runs that
-- finished in a time range, newest first. A range seek into this index, never a walk through the
-- agent's history. It carries the columns the series reads (status, duration, when the run was
-- queued and started), so a day of a busy agent is read from the index alone. Runs still queued
-- or running come from the live partial indexes (executions_admission, executions_running).
-- Never edit a shipped migration: add a new numbered file.
CREATE INDEX executions_agent_finished ON executions (agent, completed_at, status, duration_ms, queued_at, started_at) WHERE completed_at IS NOT NULL;
