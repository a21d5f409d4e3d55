-- The status indexes hold every row again, as migration 0006 made them: 0021 made them hold
-- finished rows only, to spare a claim and a completion their index entries, and it bought
-- nothing measurable (W1 within the noise on both stores), while a page of queued rows then
-- sorted every queued row (on SQLite, 0.6 → 100 ms for `status=queued` with 119,000 queued).
-- Backlogs are bounded only by max_backlog (up to 1,000,000 an agent). docs/benchmarks.md,
-- "Status indexes for finished rows only, and back". Never edit a shipped migration: add a new
-- numbered file.
DROP INDEX executions_status_recent;
DROP INDEX executions_agent_status_recent;
CREATE INDEX executions_status_recent ON executions (status, created_at DESC, id DESC);
CREATE INDEX executions_agent_status_recent ON executions (agent, status, created_at DESC, id DESC);
