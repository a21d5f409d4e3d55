-- Baton schema, version 1. Never edit a shipped migration: add a new numbered file.
-- Timestamps are UTC milliseconds since the Unix epoch (BIGINT) in every table.

CREATE TABLE agents (
  name               TEXT PRIMARY KEY,
  max_parallel       INTEGER NOT NULL CHECK (max_parallel >= 0),
  max_backlog        INTEGER NOT NULL CHECK (max_backlog >= 0),
  timeout_seconds    INTEGER NOT NULL CHECK (timeout_seconds > 0),
  lease_ttl_seconds  INTEGER NOT NULL CHECK (lease_ttl_seconds > 0),
  max_redeliveries   INTEGER NOT NULL CHECK (max_redeliveries >= 0),
  delivery           TEXT NOT NULL CHECK (delivery IN ('pull', 'push')),
  push_url           TEXT,
  description        TEXT,
  created_at         BIGINT NOT NULL,
  updated_at         BIGINT NOT NULL
);

CREATE TABLE executions (
  id                 TEXT PRIMARY KEY,
  agent              TEXT NOT NULL,
  schedule_id        TEXT,
  scheduled_for      BIGINT,
  trigger_kind       TEXT NOT NULL CHECK (trigger_kind IN ('schedule', 'manual', 'webhook', 'api', 'mcp', 'cli', 'retry')),
  origin             TEXT NOT NULL,
  message            TEXT NOT NULL,
  payload            TEXT NOT NULL,
  priority           INTEGER NOT NULL,
  run_after          BIGINT,
  status             TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped')),
  attempt            INTEGER NOT NULL,
  max_redeliveries   INTEGER NOT NULL,
  timeout_seconds    INTEGER NOT NULL,
  lease_ttl_seconds  INTEGER NOT NULL,
  lease_owner        TEXT,
  lease_token        TEXT,
  lease_expires_at   BIGINT,
  heartbeat_at       BIGINT,
  deadline_at        BIGINT,
  cancel_requested_at BIGINT,
  created_at         BIGINT NOT NULL,
  queued_at          BIGINT,
  started_at         BIGINT,
  completed_at       BIGINT,
  duration_ms        BIGINT,
  result             TEXT,
  error_code         TEXT,
  error_message      TEXT,
  usage              TEXT,
  retry_of           TEXT REFERENCES executions (id),
  idempotency_key    TEXT,
  -- The last status change: when, by whom, why. The event trigger copies them into execution_events.
  changed_at         BIGINT NOT NULL,
  changed_by         TEXT NOT NULL,
  change_reason      TEXT,
  CONSTRAINT running_has_lease CHECK (status <> 'running' OR (lease_token IS NOT NULL AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE UNIQUE INDEX executions_schedule_tick ON executions (schedule_id, scheduled_for) WHERE scheduled_for IS NOT NULL;
CREATE INDEX executions_admission ON executions (agent, priority, queued_at, id) WHERE status = 'queued';
CREATE INDEX executions_running ON executions (agent) WHERE status = 'running';
CREATE INDEX executions_lease ON executions (lease_expires_at) WHERE status = 'running';
CREATE INDEX executions_deadline ON executions (deadline_at) WHERE status = 'running';
CREATE INDEX executions_queued_at ON executions (queued_at) WHERE status = 'queued';
CREATE INDEX executions_recent ON executions (created_at DESC, id DESC);
CREATE INDEX executions_agent_recent ON executions (agent, created_at DESC, id DESC);

CREATE TABLE execution_events (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  execution_id  TEXT NOT NULL REFERENCES executions (id),
  agent         TEXT NOT NULL,
  from_status   TEXT,
  to_status     TEXT NOT NULL,
  at            BIGINT NOT NULL,
  actor         TEXT NOT NULL,
  reason        TEXT,
  attempt       INTEGER NOT NULL,
  seats_in_use  INTEGER,
  seat_cap      INTEGER
);
CREATE INDEX execution_events_execution ON execution_events (execution_id, id);

CREATE TABLE audit_log (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  at            BIGINT NOT NULL,
  actor         TEXT NOT NULL,
  action        TEXT NOT NULL,
  subject       TEXT,
  execution_id  TEXT,
  detail        TEXT
);
CREATE INDEX audit_log_execution ON audit_log (execution_id);


CREATE TABLE api_keys (
  id            TEXT PRIMARY KEY,
  name          TEXT NOT NULL,
  secret_hash   TEXT NOT NULL,
  scope         TEXT NOT NULL CHECK (scope IN ('admin', 'agent')),
  agent         TEXT,
  created_at    BIGINT NOT NULL,
  revoked_at    BIGINT,
  CONSTRAINT agent_scope_names_agent CHECK (scope <> 'agent' OR agent IS NOT NULL)
);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
  BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
  BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER execution_events_no_update BEFORE UPDATE ON execution_events
  BEGIN SELECT RAISE(ABORT, 'execution_events is append-only'); END;
CREATE TRIGGER execution_events_no_delete BEFORE DELETE ON execution_events
  BEGIN SELECT RAISE(ABORT, 'execution_events is append-only'); END;

-- Every status change (and a cancellation request) appends its execution event in the same
-- statement, so no writer can forget it. Admissions also record the seats in use and the cap.
CREATE TRIGGER executions_event_insert AFTER INSERT ON executions
BEGIN
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  VALUES (NEW.id, NEW.agent, NULL, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt, NULL, NULL);
END;
CREATE TRIGGER executions_event_update AFTER UPDATE ON executions
  WHEN OLD.status IS NOT NEW.status OR OLD.cancel_requested_at IS NOT NEW.cancel_requested_at
BEGIN
  INSERT INTO execution_events (execution_id, agent, from_status, to_status, at, actor, reason, attempt, seats_in_use, seat_cap)
  VALUES (
    NEW.id, NEW.agent, OLD.status, NEW.status, NEW.changed_at, NEW.changed_by, NEW.change_reason, NEW.attempt,
    CASE WHEN NEW.status = 'running' AND OLD.status <> 'running'
      THEN (SELECT count(*) FROM executions WHERE agent = NEW.agent AND status = 'running') END,
    CASE WHEN NEW.status = 'running' AND OLD.status <> 'running'
      THEN (SELECT max_parallel FROM agents WHERE name = NEW.agent) END
  );
END;
