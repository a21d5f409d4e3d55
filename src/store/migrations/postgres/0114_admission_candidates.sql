-- The admission's candidates, and where there are some its pools, read in the call that locks its
-- agent (FastPaths.lockAgent with a limit): two round trips less for a claim that takes work from
-- pools. PL/pgSQL takes a new snapshot for each statement under READ COMMITTED, so each read
-- follows its lock, as the engine's own reads after the locks would see them. It reads only; the
-- engine decides what to take (src/engine/transitions/admit.ts, src/engine/pools.ts) and may read
-- its candidates again where keys are shut.
-- Never edit a shipped migration: add a new numbered file.

-- baton_lock_agent(p_agent), then after the lock the agent's first p_limit queued rows that may
-- start at p_now, taken (FOR NO KEY UPDATE SKIP LOCKED), in admission order: the same read as
-- src/engine/candidates.ts candidatesFor (executions_admission; due, not behind its running serial
-- key), as a JSON array of its columns. Where it found some and the agent draws from pools, the
-- rows of baton_lock_pools for them (locked after the agent's row, in name order, as admission
-- locks them), as a JSON array in its order; else null. No row: no such agent.
-- No sorting plan is left to the planner, as for baton_claim_many: with statistics of before a
-- backlog grew it estimates one queued row, and would read every queued row of every agent through
-- executions_status_recent and sort them for each claim; so the candidates walk
-- executions_admission in order whatever the statistics say (test/cost/flow-plans-stale.test.ts).
CREATE OR REPLACE FUNCTION baton_lock_agent(p_agent text, p_limit integer, p_now bigint)
RETURNS TABLE (agent agents, running jsonb, pool_budgeted boolean, candidates jsonb, pools jsonb)
LANGUAGE plpgsql VOLATILE
SET enable_sort = off
SET enable_incremental_sort = off
SET jit = off
AS $$
DECLARE
  l record;
BEGIN
  SELECT * INTO l FROM baton_lock_agent(p_agent);
  IF NOT FOUND THEN
    RETURN;
  END IF;
  agent := l.agent; running := l.running; pool_budgeted := l.pool_budgeted; pools := NULL;
  SELECT coalesce(jsonb_agg(to_jsonb(c) ORDER BY c.priority, c.fair_round, c.queued_at, c.id), '[]'::jsonb) INTO candidates FROM (
    SELECT e.id, e.lease_ttl_seconds, e.timeout_seconds, e.serial_key, e.flow_key, e.fair_round,
      octet_length(e.message) + octet_length(e.payload) AS bytes, e.priority, e.queued_at
    FROM executions e
    WHERE e.agent = p_agent AND e.status = 'queued'
      AND (e.run_after IS NULL OR e.run_after <= p_now)
      AND (e.serial_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM executions k WHERE k.serial_key = e.serial_key AND k.status = 'running'))
    ORDER BY e.priority, e.fair_round, e.queued_at, e.id
    LIMIT p_limit
    FOR NO KEY UPDATE SKIP LOCKED
  ) c;
  IF agent.pools IS NOT NULL AND jsonb_array_length(candidates) > 0 THEN
    SELECT jsonb_agg(to_jsonb(r) ORDER BY r.n) INTO pools
      FROM baton_lock_pools(ARRAY(SELECT jsonb_array_elements_text(agent.pools::jsonb)))
        WITH ORDINALITY r(pool, max_parallel, throttle, throttle_tat, agent, since, seen_at, n);
  END IF;
  RETURN NEXT;
END
$$;
