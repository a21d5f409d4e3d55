-- PostgreSQL's 0008 drops foreign keys that could not fail (execution_logs, execution_log_heads →
-- executions; executions.retry_of) to make retention deletes cheaper. SQLite keeps them: dropping
-- a foreign key there means rebuilding the table, and its checks are index probes in-process.
-- This file keeps the two stores' migration numbers in step. Never edit a shipped migration.
SELECT 1;
