-- Pools: named limits several agents draw from (src/domain/pools.ts, src/engine/pools.ts), and
-- throttles (src/domain/throttle.ts) on agents and pools. Admission reads and advances them under
-- the agent's lock, then the pools' in name order. Budgets gain a 'minute' window.
-- Never edit a shipped migration: add a new numbered file.
CREATE TABLE pools (
  name          TEXT PRIMARY KEY,
  description   TEXT,
  max_parallel  INTEGER CHECK (max_parallel IS NULL OR max_parallel >= 0),
  throttle      TEXT,
  throttle_tat  BIGINT,
  budget        TEXT,
  created_at    BIGINT NOT NULL,
  updated_at    BIGINT NOT NULL
);
-- Which agents draw from which pool: the agent's side is agents.pools (read with the row
-- admission locks); this table answers the pool's side (its seats, who may not delete it).
CREATE TABLE agent_pools (
  agent  TEXT NOT NULL REFERENCES agents (name) ON DELETE CASCADE,
  pool   TEXT NOT NULL REFERENCES pools (name),
  PRIMARY KEY (agent, pool)
);
CREATE INDEX agent_pools_pool ON agent_pools (pool, agent);
CREATE TABLE pool_budget_ledger (
  pool          TEXT NOT NULL REFERENCES pools (name) ON DELETE CASCADE,
  window_kind   TEXT NOT NULL CHECK (window_kind IN ('minute', 'hour', 'day', 'month')),
  window_start  BIGINT NOT NULL,
  cost_usd      REAL NOT NULL DEFAULT 0,
  total_tokens  BIGINT NOT NULL DEFAULT 0,
  run_ms        BIGINT NOT NULL DEFAULT 0,
  updated_at    BIGINT NOT NULL,
  PRIMARY KEY (pool, window_kind, window_start)
);
-- The pools an agent draws from, as a JSON array in name order (null: none).
ALTER TABLE agents ADD COLUMN pools TEXT;
ALTER TABLE agents ADD COLUMN throttle TEXT;
ALTER TABLE agents ADD COLUMN throttle_tat BIGINT;

-- The agent ledger's window check gains 'minute' (SQLite changes a check by rebuilding the table).
CREATE TABLE agent_budget_ledger_next (
  agent         TEXT NOT NULL,
  window_kind   TEXT NOT NULL CHECK (window_kind IN ('minute', 'hour', 'day', 'month')),
  window_start  BIGINT NOT NULL,
  cost_usd      REAL NOT NULL DEFAULT 0,
  total_tokens  BIGINT NOT NULL DEFAULT 0,
  run_ms        BIGINT NOT NULL DEFAULT 0,
  alerted_at    BIGINT,
  updated_at    BIGINT NOT NULL,
  PRIMARY KEY (agent, window_kind, window_start)
);
INSERT INTO agent_budget_ledger_next SELECT agent, window_kind, window_start, cost_usd, total_tokens, run_ms, alerted_at, updated_at FROM agent_budget_ledger;
DROP TABLE agent_budget_ledger;
ALTER TABLE agent_budget_ledger_next RENAME TO agent_budget_ledger;
