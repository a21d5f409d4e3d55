-- A claim's candidates always through executions_admission, whatever plan a connection keeps
-- (issue #12; docs/benchmarks.md, "A claim plan made young").
--
-- baton_claim_many (0030) finds an agent's next queued rows with `agent = … AND status = 'queued'
-- ORDER BY priority, queued_at, id LIMIT free`. PL/pgSQL keeps one generic plan per statement per
-- connection, made once (after five custom ones) and kept until the table is next analysed. On a
-- store without statistics (young, or autovacuum off) the planner expects one row from every index,
-- and two plans then cost within a fraction of a unit of each other: the ordered walk of the
-- agent's queued rows (executions_admission), and every queued row of every agent through
-- executions_status_recent, filtered by agent and sorted. Which looks cheaper turns on the two
-- indexes' sizes and heights at that moment: in a scratch reproduction (agents with 40-character
-- names) plans made at 120-150 queued rows, when executions_admission had split its first page and
-- executions_status_recent had not, were the second. A connection that kept it read every queued
-- row once per agent it claimed for: in a W1 run over HTTP (2026-12-05, auto_explain) the claims'
-- connection ran 2,514 such scans over 15 ms (median 38 ms, up to 147 ms) holding the rows of the
-- agents claimed so far, completions waited for them, and the run made 776 tasks/s against
-- 1,274-1,383 in the runs beside it.
--
-- No other plan of that statement gives its order without sorting: with sorting ruled out while
-- the function plans, the ordered walk is the plan. Nothing else in the function needs a plan
-- that sorts: its other statements read one row by key or position, the event trigger's read and
-- write by key, and the loop over the claims still sorts its few elements (a sort is only made to
-- look dear, by a fixed 10^10 added to its cost, not forbidden). That cost is past the threshold at
-- which PostgreSQL compiles a plan with JIT (33 ms a call in a session with JIT on, scratch):
-- Baton's sessions run with JIT off (src/store/postgres.ts), and the function says so itself too.
-- test/claim-plan-young.test.ts has a connection make its plans in that window and then claim
-- from a deeper backlog. Never edit a shipped migration: add a new numbered file.
ALTER FUNCTION baton_claim_many(TEXT[], TEXT[], TEXT[], INTEGER[], TEXT[], INTEGER[], BIGINT[], BIGINT, BIGINT[])
  SET enable_sort = off
  SET jit = off;
