-- Retention deletes executions with everything they own; foreign keys that could not fail cost
-- every such delete a check per row (measured: 40 % of a prune batch's time in the executions
-- delete alone). As 0005 did for execution_events, drop the ones whose only writers make them
-- hold by construction, on PostgreSQL. SQLite keeps them (dropping one needs a table rebuild).
-- Never edit a shipped migration: add a new numbered file.

-- Log lines and the log head are written only by appendLogs, fenced by the lease token of an
-- execution it holds locked in the same transaction, and deleted only by the pruner with it.
ALTER TABLE execution_logs DROP CONSTRAINT execution_logs_execution_id_fkey;
ALTER TABLE execution_log_heads DROP CONSTRAINT execution_log_heads_execution_id_fkey;

-- retry_of is written only by transitions/retry.ts, in the transaction that failed the execution
-- it names; the pruner removes a retry chain whole or not at all. The canary's E-07 checks that
-- every retry_of names an existing execution of the same agent.
ALTER TABLE executions DROP CONSTRAINT executions_retry_of_fkey;
