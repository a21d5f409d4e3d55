-- Fewer index writes per task (issue #12): executions_status_recent and
-- executions_agent_status_recent hold finished rows only. Over all rows, every status change moved
-- the row through both (a delete and an insert in each, at claim and at completion, and an entry
-- at submit). On PostgreSQL an update that changes the status adds an entry to every index the
-- new row version belongs to: four of a task's index entries (at submit and at claim). Their readers list or look up finished rows by
-- status; they carry the index's WHERE as written (FINISHED in src/engine/status-sql.ts).
-- Queued and running rows are few and found through executions_admission and executions_running
-- (src/engine/list-executions.ts); test/plans.test.ts checks every hot query's plan over a long
-- history, with and without statistics. Never edit a shipped migration: add a new numbered file.
DROP INDEX executions_status_recent;
DROP INDEX executions_agent_status_recent;
CREATE INDEX executions_status_recent ON executions (status, created_at DESC, id DESC)
  WHERE status IN ('succeeded', 'failed', 'cancelled', 'skipped');
CREATE INDEX executions_agent_status_recent ON executions (agent, status, created_at DESC, id DESC)
  WHERE status IN ('succeeded', 'failed', 'cancelled', 'skipped');
