-- Pools: named limits several agents draw from (src/domain/pools.ts, src/engine/pools.ts), and
-- throttles (src/domain/throttle.ts) on agents and pools. Admission reads and advances them under
-- the agent's lock, then the pools' in name order. Budgets gain a 'minute' window.
-- Never edit a shipped migration: add a new numbered file.
CREATE TABLE pools (
  name text PRIMARY KEY,
  description text,
  max_parallel integer CHECK (max_parallel IS NULL OR max_parallel >= 0),
  throttle text,
  throttle_tat bigint,
  budget text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
-- Which agents draw from which pool: the agent's side is agents.pools (read with the row
-- admission locks); this table answers the pool's side (its seats, who may not delete it).
CREATE TABLE agent_pools (
  agent text NOT NULL REFERENCES agents (name) ON DELETE CASCADE,
  pool text NOT NULL REFERENCES pools (name),
  PRIMARY KEY (agent, pool)
);
CREATE INDEX agent_pools_pool ON agent_pools (pool, agent);
CREATE TABLE pool_budget_ledger (
  pool text NOT NULL REFERENCES pools (name) ON DELETE CASCADE,
  window_kind text NOT NULL CHECK (window_kind IN ('minute', 'hour', 'day', 'month')),
  window_start bigint NOT NULL,
  cost_usd double precision NOT NULL DEFAULT 0,
  total_tokens bigint NOT NULL DEFAULT 0,
  run_ms bigint NOT NULL DEFAULT 0,
  updated_at bigint NOT NULL,
  PRIMARY KEY (pool, window_kind, window_start)
);
-- The pools an agent draws from, as a JSON array in name order (null: none).
ALTER TABLE agents ADD COLUMN pools text, ADD COLUMN throttle text, ADD COLUMN throttle_tat bigint;

ALTER TABLE agent_budget_ledger DROP CONSTRAINT agent_budget_ledger_window_kind_check;
ALTER TABLE agent_budget_ledger ADD CONSTRAINT agent_budget_ledger_window_kind_check
  CHECK (window_kind IN ('minute', 'hour', 'day', 'month'));
