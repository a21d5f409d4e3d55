-- Flow reads that must not walk a deep backlog (src/engine/flow-keys.ts, flow-submit.ts, canary
-- invariant F-02). Each index leads with status, as executions_status_recent does: a backlog grown
-- since the last ANALYZE looks empty to PostgreSQL, and between two indexes on the same leading
-- column it then takes the smaller one, this one, rather than reading every queued row of every
-- agent through executions_status_recent.
-- Never edit a shipped migration: add a new numbered file.

-- When a closed key throttle reopens: whether its key has a queued task due.
CREATE INDEX executions_key_queued ON executions (status, agent, flow_key, run_after) WHERE status = 'queued' AND flow_key IS NOT NULL;
-- Debounced tasks waiting: a debounced submit's fold and F-02 read these, not the key's whole backlog.
CREATE INDEX executions_debounce_open ON executions (status, agent, flow_key, run_after)
  WHERE status = 'queued' AND flow_key IS NOT NULL AND debounce_seconds IS NOT NULL;
