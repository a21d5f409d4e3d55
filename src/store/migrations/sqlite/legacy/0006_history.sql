-- Living with age: an index for every read shape, retention, canary checkpoints, leader leases.
-- Never edit a shipped migration: add a new numbered file.

-- Lists filtered by status, or by agent and status, newest first: a seek, not a walk through
-- history (a status with few rows, such as queued, would otherwise scan every row of the agent).
CREATE INDEX executions_status_recent ON executions (status, created_at DESC, id DESC);
CREATE INDEX executions_agent_status_recent ON executions (agent, status, created_at DESC, id DESC);
CREATE INDEX executions_schedule_recent ON executions (schedule_id, created_at DESC, id DESC) WHERE schedule_id IS NOT NULL;
-- The pruner takes the oldest finished rows first; doctor and metrics read the oldest.
CREATE INDEX executions_completed ON executions (completed_at) WHERE completed_at IS NOT NULL;
-- Retention removes an execution's idempotency keys with it.
CREATE INDEX idempotency_keys_execution ON idempotency_keys (execution_id) WHERE execution_id IS NOT NULL;

-- The pruner's record, and (SQLite) its flag: the pruner sets `pruning` at the start of its
-- transaction and clears it before commit. SQLite runs one writer at a time, so no other
-- transaction ever sees it set; the append-only triggers below let deletes through only then.
CREATE TABLE retention_state (
  id                 TEXT PRIMARY KEY,
  pruning            INTEGER NOT NULL DEFAULT 0 CHECK (pruning IN (0, 1)),
  last_started_at    BIGINT,
  last_completed_at  BIGINT,
  last_duration_ms   BIGINT,
  -- What the last pass removed (executions, with their events, logs and keys; audit rows).
  last_executions    BIGINT,
  last_audit         BIGINT,
  last_error         TEXT,
  total_executions   BIGINT NOT NULL DEFAULT 0,
  total_audit        BIGINT NOT NULL DEFAULT 0
);
INSERT INTO retention_state (id) VALUES ('retention');

DROP TRIGGER audit_log_no_delete;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
  WHEN (SELECT pruning FROM retention_state WHERE id = 'retention') IS NOT 1
  BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
DROP TRIGGER execution_events_no_delete;
CREATE TRIGGER execution_events_no_delete BEFORE DELETE ON execution_events
  WHEN (SELECT pruning FROM retention_state WHERE id = 'retention') IS NOT 1
  BEGIN SELECT RAISE(ABORT, 'execution_events is append-only'); END;

-- Background passes that one process at a time runs (the pruner): whoever holds the row
-- until `expires_at` is the leader for that pass.
CREATE TABLE leader_leases (
  name        TEXT PRIMARY KEY,
  owner       TEXT NOT NULL,
  expires_at  BIGINT NOT NULL
);

-- The canary's high-water mark per invariant that reads the event log: events up to event_id
-- have been judged; `state` is what the invariant carries forward (S-02: seats in use per agent).
CREATE TABLE canary_checkpoints (
  invariant   TEXT PRIMARY KEY,
  event_id    BIGINT NOT NULL,
  state       TEXT,
  updated_at  BIGINT NOT NULL
);
