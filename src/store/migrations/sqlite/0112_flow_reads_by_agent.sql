-- Flow reads of one agent's queued keyed rows (src/engine/flow-keys.ts reopensAt, flow-submit.ts's
-- debounce fold, canary invariant F-02), led by agent: a seek reads that agent's entries only.
-- Led by status (a constant in these partial indexes), a read whose agent is not an index
-- condition walks every agent's entries. Each read asks for this index's order under
-- inIndexOrder (src/engine/candidates.ts; PostgreSQL), so no plan takes executions_status_recent and sorts,
-- whatever the statistics say.
-- Never edit a shipped migration: add a new numbered file.

-- When a closed key throttle reopens: the key's first queued task by run_after, a null (due now) first (SQLite sorts nulls first).
DROP INDEX executions_key_queued;
CREATE INDEX executions_key_queued ON executions (agent, flow_key, run_after) WHERE status = 'queued' AND flow_key IS NOT NULL;
-- Debounced tasks waiting: a debounced submit's fold and F-02 read these, not the key's whole backlog.
DROP INDEX executions_debounce_open;
CREATE INDEX executions_debounce_open ON executions (agent, flow_key, run_after)
  WHERE status = 'queued' AND flow_key IS NOT NULL AND debounce_seconds IS NOT NULL;

