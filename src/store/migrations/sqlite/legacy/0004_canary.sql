-- The canary: stored violations (one open row per invariant and subject), the cycle state
-- (also the lease that lets one process at a time run the timer), and alert deliveries.
-- Rows hold ids, reason codes and numbers only: never payloads, results or secrets.

CREATE TABLE canary_violations (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  invariant     TEXT NOT NULL,
  subject       TEXT NOT NULL,
  agent         TEXT,
  tier          TEXT NOT NULL CHECK (tier IN ('A', 'B')),
  severity      TEXT NOT NULL CHECK (severity IN ('critical', 'warning')),
  reason        TEXT NOT NULL,
  -- JSON object of ids and numbers (e.g. seats_in_use, seat_cap, lapsed_ms).
  detail        TEXT,
  first_seen    BIGINT NOT NULL,
  last_seen     BIGINT NOT NULL,
  resolved_at   BIGINT
);
CREATE UNIQUE INDEX canary_violations_open ON canary_violations (invariant, subject) WHERE resolved_at IS NULL;
CREATE INDEX canary_violations_recent ON canary_violations (last_seen DESC, id DESC);

CREATE TABLE canary_state (
  id                 TEXT PRIMARY KEY,
  lease_owner        TEXT,
  lease_expires_at   BIGINT,
  last_started_at    BIGINT,
  last_completed_at  BIGINT,
  -- 1 when the last cycle read its snapshot; 0 when the read failed (H-01).
  last_ok            INTEGER,
  last_duration_ms   BIGINT,
  -- Independent evidence for H-01: executions and the newest event seen by the last good snapshot.
  seen_executions    BIGINT,
  seen_event_id      BIGINT,
  cycles             BIGINT NOT NULL DEFAULT 0
);
INSERT INTO canary_state (id) VALUES ('canary');

CREATE TABLE canary_alerts (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  invariant        TEXT NOT NULL,
  transition       TEXT NOT NULL CHECK (transition IN ('violated', 'resolved')),
  sink             TEXT NOT NULL CHECK (sink IN ('webhook', 'slack')),
  -- The JSON body sent (ids, reason codes, diagnosis); the sink URL is configuration, not stored.
  body             TEXT NOT NULL,
  status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts         INTEGER NOT NULL DEFAULT 0,
  next_attempt_at  BIGINT NOT NULL,
  last_error       TEXT,
  created_at       BIGINT NOT NULL,
  delivered_at     BIGINT
);
CREATE INDEX canary_alerts_pending ON canary_alerts (next_attempt_at) WHERE status = 'pending';

-- S-02 replays admissions and seat releases from the event log.
CREATE INDEX execution_events_seats ON execution_events (id) WHERE to_status = 'running' OR from_status = 'running';
