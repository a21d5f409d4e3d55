-- Concurrency keys (src/domain/flow.ts, src/engine/flow-keys.ts): a task's key, its fairness round,
-- the agent's per-key limits, and one row of state per (agent, key).
-- Never edit a shipped migration: add a new numbered file.
ALTER TABLE executions ADD COLUMN flow_key TEXT;
ALTER TABLE executions ADD COLUMN fair_round BIGINT NOT NULL DEFAULT 0;
-- A debounced task's window (seconds): a keyed submit that asks for it folds into the task while queued and not due.
ALTER TABLE executions ADD COLUMN debounce_seconds INTEGER CHECK (debounce_seconds IS NULL OR debounce_seconds >= 1 AND debounce_seconds <= 3600);
ALTER TABLE agents ADD COLUMN admit_round BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN key_max_parallel INTEGER CHECK (key_max_parallel IS NULL OR key_max_parallel >= 1);
ALTER TABLE agents ADD COLUMN key_overrides TEXT;
ALTER TABLE agents ADD COLUMN key_throttle TEXT;

CREATE TABLE flow_keys (
  agent        TEXT NOT NULL REFERENCES agents (name) ON DELETE CASCADE,
  flow_key     TEXT NOT NULL,
  last_round   BIGINT NOT NULL DEFAULT 0,
  throttle_tat BIGINT,
  PRIMARY KEY (agent, flow_key)
);

-- Keys whose throttle is closed (admission leaves their tasks out).
CREATE INDEX flow_keys_throttle ON flow_keys (agent, throttle_tat) WHERE throttle_tat IS NOT NULL;

-- Admission order: (priority, fair_round, queued_at, id).
DROP INDEX executions_admission;
CREATE INDEX executions_admission ON executions (agent, priority, fair_round, queued_at, id) WHERE status = 'queued';
-- Seats in use per key.
CREATE INDEX executions_key_running ON executions (agent, flow_key) WHERE flow_key IS NOT NULL AND status = 'running';
-- A key's live tasks: singleton, debounce, the live keys read.
CREATE INDEX executions_key_live ON executions (agent, flow_key, status) WHERE flow_key IS NOT NULL AND status IN ('queued', 'running');
