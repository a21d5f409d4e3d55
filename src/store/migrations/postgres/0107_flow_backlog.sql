-- Flow reads that must not walk a deep backlog, whatever the planner's statistics say (a backlog
-- grown since the last ANALYZE looks empty to PostgreSQL, which then seeks executions_status_recent
-- on status alone and reads every queued row of every agent).
-- Never edit a shipped migration: add a new numbered file.

-- When a closed key throttle reopens: whether its key has a queued task due (src/engine/flow-keys.ts).
CREATE INDEX executions_key_queued ON executions (agent, flow_key, run_after) WHERE status = 'queued' AND flow_key IS NOT NULL;
-- Debounced tasks waiting: a debounced submit's fold (src/engine/flow-submit.ts) and canary
-- invariant F-02 read these, not the key's whole backlog.
CREATE INDEX executions_debounce_open ON executions (agent, flow_key, run_after)
  WHERE status = 'queued' AND flow_key IS NOT NULL AND debounce_seconds IS NOT NULL;
