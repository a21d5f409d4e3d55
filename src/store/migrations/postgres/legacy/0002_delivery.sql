-- Delivery: execution logs (ordered, bounded per execution) and push signing secrets.
-- Never edit a shipped migration: add a new numbered file.

-- AES-256-GCM ciphertext of the agent's push signing secret (never the plain secret).
ALTER TABLE agents ADD COLUMN push_secret TEXT;

-- Output lines of an execution, in the order its worker sent them. Appends are fenced by the
-- lease token and take the execution's row lock, so seq is gap-free and ordered per execution.
CREATE TABLE execution_logs (
  execution_id  TEXT NOT NULL REFERENCES executions (id),
  seq           INTEGER NOT NULL,
  at            BIGINT NOT NULL,
  stream        TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr', 'system')),
  line          TEXT NOT NULL,
  PRIMARY KEY (execution_id, seq)
);

-- Running totals per execution, so the bounds (lines, bytes) are checked without a scan.
CREATE TABLE execution_log_heads (
  execution_id  TEXT PRIMARY KEY REFERENCES executions (id),
  lines         INTEGER NOT NULL,
  bytes         BIGINT NOT NULL,
  truncated     INTEGER NOT NULL DEFAULT 0
);
