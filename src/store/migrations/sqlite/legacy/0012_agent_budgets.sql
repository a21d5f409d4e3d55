-- Budgets (issue #13): an agent's optional limits, as JSON (src/domain/budget.ts), null: none.
ALTER TABLE agents ADD COLUMN budget TEXT;

-- The budget ledger: one row per agent per window (hour, day or month, started on the budget's
-- time-zone wall clock), its counters added to in each completion's transaction. Admission reads
-- the current windows' rows by this primary key under the agent lock, and GET
-- /v1/agents/{agent}/budget reads the same; neither ever scans the history of executions.
-- alerted_at: when the 80 % alert fired in this window (it fires once per window).
-- Never edit a shipped migration: add a new numbered file.
CREATE TABLE agent_budget_ledger (
  agent         TEXT NOT NULL,
  window_kind   TEXT NOT NULL CHECK (window_kind IN ('hour', 'day', 'month')),
  window_start  BIGINT NOT NULL,
  cost_usd      REAL NOT NULL DEFAULT 0,
  total_tokens  BIGINT NOT NULL DEFAULT 0,
  run_ms        BIGINT NOT NULL DEFAULT 0,
  alerted_at    BIGINT,
  updated_at    BIGINT NOT NULL,
  PRIMARY KEY (agent, window_kind, window_start)
);
