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

-- The pruner's record. `pruning` is SQLite's flag (see the SQLite migration); PostgreSQL's
-- pruner marks its transaction with SET LOCAL baton.pruning = 'on' instead, and the column
-- stays 0 here.
CREATE TABLE retention_state (
  id                 TEXT PRIMARY KEY,
  pruning            INTEGER NOT NULL DEFAULT 0 CHECK (pruning IN (0, 1)),
  last_started_at    BIGINT,
  last_completed_at  BIGINT,
  last_duration_ms   BIGINT,
  last_executions    BIGINT,
  last_audit         BIGINT,
  last_error         TEXT,
  total_executions   BIGINT NOT NULL DEFAULT 0,
  total_audit        BIGINT NOT NULL DEFAULT 0
);
INSERT INTO retention_state (id) VALUES ('retention');

-- History stays append-only for every writer but the pruner: updates and truncation are always
-- refused; a delete only inside a transaction that declared itself the pruner's. Statement-level,
-- so a prune batch pays one check per statement, not one per row.
CREATE FUNCTION baton_guard_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND current_setting('baton.pruning', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege';
END;
$$;
DROP TRIGGER audit_log_append_only ON audit_log;
DROP TRIGGER execution_events_append_only ON execution_events;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
  FOR EACH STATEMENT EXECUTE FUNCTION baton_guard_history();
CREATE TRIGGER execution_events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON execution_events
  FOR EACH STATEMENT EXECUTE FUNCTION baton_guard_history();
DROP FUNCTION baton_refuse_mutation();

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
