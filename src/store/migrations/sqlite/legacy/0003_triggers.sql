-- Triggers: schedules, webhooks, idempotency keys, retry policies and attribution.
-- Booleans are INTEGER 0|1 on both stores (one query layer, no dialect branch).

CREATE TABLE schedules (
  id                    TEXT PRIMARY KEY,
  agent                 TEXT NOT NULL,
  name                  TEXT NOT NULL,
  cron                  TEXT NOT NULL,
  timezone              TEXT NOT NULL,
  message               TEXT NOT NULL,
  payload               TEXT NOT NULL,
  enabled               INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  overlap_policy        TEXT NOT NULL CHECK (overlap_policy IN ('skip', 'queue', 'allow')),
  misfire_policy        TEXT NOT NULL CHECK (misfire_policy IN ('run_once', 'skip')),
  misfire_grace_seconds INTEGER NOT NULL CHECK (misfire_grace_seconds >= 0),
  retry_policy          TEXT,
  priority              INTEGER NOT NULL,
  -- The next due time not yet handled (epoch ms); NULL when disabled or no future run.
  next_run_at           BIGINT,
  last_run_at           BIGINT,
  created_at            BIGINT NOT NULL,
  updated_at            BIGINT NOT NULL,
  CONSTRAINT schedules_enabled_has_next CHECK (enabled = 1 OR next_run_at IS NULL)
);
CREATE UNIQUE INDEX schedules_agent_name ON schedules (agent, name);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled = 1 AND next_run_at IS NOT NULL;

CREATE TABLE webhooks (
  id                    TEXT PRIMARY KEY,
  agent                 TEXT NOT NULL,
  schedule_id           TEXT,
  name                  TEXT NOT NULL,
  -- SHA-256 of the URL token; the token itself is shown once and never stored.
  token_hash            TEXT NOT NULL,
  -- The HMAC secret, AES-256-GCM encrypted under a key derived from the token (so the database
  -- alone cannot reveal it). NULL: no signature required.
  secret_enc            TEXT,
  message               TEXT NOT NULL,
  overlap_policy        TEXT NOT NULL CHECK (overlap_policy IN ('skip', 'queue', 'allow')),
  enabled               INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  created_at            BIGINT NOT NULL,
  updated_at            BIGINT NOT NULL,
  last_delivery_at      BIGINT
);
CREATE UNIQUE INDEX webhooks_token ON webhooks (token_hash);
CREATE INDEX webhooks_agent ON webhooks (agent);

CREATE TABLE idempotency_keys (
  -- 'agent:<name>' or 'webhook:<id>'
  scope                 TEXT NOT NULL,
  idem_key              TEXT NOT NULL,
  request_hash          TEXT NOT NULL,
  state                 TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
  -- An in-flight claim older than this may be taken over (its process died mid-request).
  locked_until          BIGINT NOT NULL,
  status_code           INTEGER,
  response              TEXT,
  execution_id          TEXT,
  created_at            BIGINT NOT NULL,
  expires_at            BIGINT NOT NULL,
  PRIMARY KEY (scope, idem_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

ALTER TABLE agents ADD COLUMN retry_policy TEXT;

-- The effective retry policy (task, else schedule, else agent) copied at creation; the retry
-- number in the chain (0 for the first run) and the chain's first member.
ALTER TABLE executions ADD COLUMN retry_policy TEXT;
ALTER TABLE executions ADD COLUMN retry_number INTEGER NOT NULL DEFAULT 0;
ALTER TABLE executions ADD COLUMN retry_root TEXT;
ALTER TABLE executions ADD COLUMN webhook_id TEXT;
-- Runs sharing a serial key run one at a time (a schedule with overlap policy 'queue'):
-- admission skips a queued row while another row with its key is running.
ALTER TABLE executions ADD COLUMN serial_key TEXT;
CREATE INDEX executions_serial_running ON executions (serial_key) WHERE serial_key IS NOT NULL AND status = 'running';
CREATE INDEX executions_retry_root ON executions (retry_root) WHERE retry_root IS NOT NULL;
CREATE INDEX executions_schedule_open ON executions (schedule_id) WHERE schedule_id IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX executions_webhook_open ON executions (webhook_id) WHERE webhook_id IS NOT NULL AND status IN ('queued', 'running');
