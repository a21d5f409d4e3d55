-- The status indexes hold every row again, as migration 0006 made them: 0020 made them hold
-- finished rows only, to spare a claim and a completion their index writes, and it bought nothing
-- measurable (W1 on SQLite within its noise; each statement within 1 µs of before, timed inside
-- SQLite), while a page of queued rows then sorted every queued row: 0.6 → 100 ms for
-- `status=queued` with 119,000 queued, 0.6 → 7 ms for one agent's 1,000. Backlogs are bounded
-- only by max_backlog (up to 1,000,000 an agent). docs/benchmarks.md, "Status indexes for
-- finished rows only, and back". Never edit a shipped migration: add a new numbered file.
DROP INDEX executions_status_recent;
DROP INDEX executions_agent_status_recent;
CREATE INDEX executions_status_recent ON executions (status, created_at DESC, id DESC);
CREATE INDEX executions_agent_status_recent ON executions (agent, status, created_at DESC, id DESC);
