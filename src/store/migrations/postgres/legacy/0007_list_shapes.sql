-- Two read shapes 0006 left without an index made for them. Never edit a shipped migration: add
-- a new numbered file.

-- One schedule's runs of one status, newest first (`GET /v1/executions?schedule_id=…&status=…`),
-- and a deleted schedule's queued and running runs: a seek, not a walk through every run the
-- schedule ever made (one a minute is half a million a year).
CREATE INDEX executions_schedule_status_recent ON executions (schedule_id, status, created_at DESC, id DESC) WHERE schedule_id IS NOT NULL;
-- The foreign key retry_of → executions(id): deleting an execution (retention) makes the
-- database look for retries that still point at it, and without this index that look is a scan
-- of every execution, once per deleted row (on SQLite the plan of every insert carries it too).
CREATE INDEX executions_retry_of ON executions (retry_of) WHERE retry_of IS NOT NULL;
