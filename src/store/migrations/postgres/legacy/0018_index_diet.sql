-- Fewer writes per task (issue #12): indexes that no query reads, or whose every reader another
-- index serves as well, cost each task a write per index on insert, claim, heartbeat, complete
-- and prune. Each drop below names the index that serves the readers it had (test/plans.test.ts
-- checks every hot query's plan over a long history on both stores). Never edit a shipped
-- migration: add a new numbered file.

-- Every statement on running rows (the reaper's lapsed-lease / deadline / cancel sweep, seat
-- counts, the seat holders of an agent) reads executions_running (agent) WHERE status = 'running'
-- or a seek into executions_status_recent / executions_agent_status_recent: running rows are a few
-- hundred at most, and the reaper's sweep ORs three columns, so neither index gave it a seek.
-- Dropping them saves each task two index entries at claim, two at completion, and the
-- executions_lease entry rewritten by every heartbeat.
DROP INDEX executions_lease;
DROP INDEX executions_deadline;
-- Queued rows: admission and per-agent queue depth read executions_admission (agent, priority,
-- queued_at, id) WHERE status = 'queued'; the backlog-expiry sweep filters on
-- coalesce(started_at, queued_at), which no index on queued_at serves.
DROP INDEX executions_queued_at;
-- The canary reads events since its checkpoint as a primary-key range and judges seats from all
-- of them (migration 0006's checkpoints), so nothing reads this partial index any more; it cost
-- two of every task's three events an entry.
DROP INDEX execution_events_seats;
-- Nothing reads the audit log by execution (the pruner removes it by id range, the oldest row
-- is the primary key's first): one entry per audit row saved.
DROP INDEX audit_log_execution;

-- The pruner and `baton export` walk finished rows in (completed_at, id) order, a page after a
-- (completed_at, id) cursor. Without id in the index SQLite sorted each page's ties, and for the
-- cursor page chose executions_agent_finished (a skip-scan over every agent, then a sort of the
-- whole remaining range: quadratic over an export); PostgreSQL sorted the range before its LIMIT.
-- One index in that order serves both, plus the oldest finished row (doctor, /metrics).
DROP INDEX executions_completed;
CREATE INDEX executions_completed ON executions (completed_at, id) WHERE completed_at IS NOT NULL;
