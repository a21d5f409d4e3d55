-- Each agent row on a page of its own (issue #12; docs/benchmarks.md, "A slow mode of W1 on
-- PostgreSQL").
--
-- An agent's row changes twice per task (the seat counter and the backlog's `queued_out`, in the
-- event trigger) and its `agent_backlog` row once per submit call. PostgreSQL keeps each old
-- version until no open snapshot can see it. About eleven agent rows shared an 8 KiB page: while a
-- snapshot stayed open (the canary's cycle, a report, a long dump) their versions filled the page,
-- every later version went to another page with an index entry of its own, and each read of the
-- agent walked them all. With the rows apart (fillfactor 10: inserts stop at a tenth of a page),
-- an agent's versions stay one chain on its page, read in one buffer.
--
-- Measured in W1 over HTTP (batched protocol): with a REPEATABLE READ snapshot held through the
-- run, 1,755-1,855 tasks/s packed, 2,081 at fillfactor 50, 2,369-2,440 at 10; without one, six
-- alternated pairs 2,162-2,252 -> 2,234-2,405/s. The cost is space: one page (8 KiB) per agent
-- row. test/agent-rows-apart.test.ts reads an agent row after 50 counter changes under an old
-- snapshot. Rows already stored move apart as they are next updated without room on their page,
-- or at once with `VACUUM FULL agents` (docs/operations.md). Never edit a shipped migration: add a
-- new numbered file.
ALTER TABLE agents SET (fillfactor = 10);
ALTER TABLE agent_backlog SET (fillfactor = 10);
