-- SQLite: a page of executions with no status filter (all of them, or one agent's) seeks the status
-- indexes once per status and merges (src/engine/list-executions.ts), so the two indexes that
-- served it go: every insert writes two index entries fewer, and every pruned execution deletes
-- two fewer (the pruner's DELETE at 1M: 37.6–38.4 → 18.8–19.3 µs per execution, docs/benchmarks.md,
-- "The SQLite pruner under load once more"). Never edit a shipped migration: add a new numbered file.
DROP INDEX executions_recent;
DROP INDEX executions_agent_recent;
