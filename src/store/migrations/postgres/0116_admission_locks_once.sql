-- A gathered admission (src/engine/admissions.ts) locks and reads its agents in one call, and
-- then each pool they draw from once: every agent's call of baton_lock_agent locked and read its
-- pools again (the seats' sum over every member, the waits), though the engine reads a pool in one
-- transaction only once and carries it from one admission to the next (admission-carry.ts). And
-- where an agent has no candidate, whether it has any queued row rides along, the engine's own
-- read of it (onNothingQueued) otherwise a round trip of its own inside the transaction. Reads
-- only; the engine decides what to take, as before.
-- Never edit a shipped migration: add a new numbered file.

-- baton_lock_agent(p_agent, p_limit, p_now) of 0114, its pools locked and read only where
-- p_pools, and `queued`: where it found no candidate, whether the agent has any queued row (one
-- seek of executions_admission; rows the candidates skip count, as src/engine/transitions/admit.ts
-- anyQueued reads them); else true.
CREATE OR REPLACE FUNCTION baton_lock_agent(p_agent text, p_limit integer, p_now bigint, p_pools boolean)
RETURNS TABLE (agent agents, running jsonb, pool_budgeted boolean, candidates jsonb, pools jsonb, queued boolean)
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
  agent := l.agent; running := l.running; pool_budgeted := l.pool_budgeted; pools := NULL; queued := TRUE;
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
  IF jsonb_array_length(candidates) = 0 THEN
    queued := EXISTS (SELECT 1 FROM executions e WHERE e.agent = p_agent AND e.status = 'queued');
  ELSIF p_pools AND agent.pools IS NOT NULL THEN
    SELECT jsonb_agg(to_jsonb(r) ORDER BY r.n) INTO pools
      FROM baton_lock_pools(ARRAY(SELECT jsonb_array_elements_text(agent.pools::jsonb)))
        WITH ORDINALITY r(pool, max_parallel, throttle, throttle_tat, agent, since, seen_at, n);
  END IF;
  RETURN NEXT;
END
$$;

-- The same read as before, now made by the function above (its text is kept once).
CREATE OR REPLACE FUNCTION baton_lock_agent(p_agent text, p_limit integer, p_now bigint)
RETURNS TABLE (agent agents, running jsonb, pool_budgeted boolean, candidates jsonb, pools jsonb)
LANGUAGE sql VOLATILE
AS $$
  SELECT f.agent, f.running, f.pool_budgeted, f.candidates, f.pools FROM baton_lock_agent(p_agent, p_limit, p_now, TRUE) f
$$;

-- Several agents' admissions in one call: each agent locked and read as baton_lock_agent(…,
-- false) reads it, in name order (every admission locks agent rows in that order), a row each;
-- then, after every agent's lock, the pools of the agents that found candidates, each once,
-- locked in name order with their seats and waits (baton_lock_pools), as one last row with no
-- agent (its `pools`; none where no such agent draws from a pool). Agents before pools, pools in
-- name order: the order every admission takes its locks in. An agent not found has no row.
CREATE OR REPLACE FUNCTION baton_lock_agents(p_agent text[], p_limit integer[], p_now bigint[])
RETURNS TABLE (agent agents, running jsonb, pool_budgeted boolean, candidates jsonb, pools jsonb, queued boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  l record;
  i BIGINT;
  drawn text[] := '{}';
BEGIN
  FOR i IN SELECT u.ord FROM unnest(p_agent) WITH ORDINALITY AS u(name, ord) ORDER BY u.name, u.ord LOOP
    SELECT * INTO l FROM baton_lock_agent(p_agent[i], p_limit[i], p_now[i], FALSE);
    CONTINUE WHEN NOT FOUND;
    agent := l.agent; running := l.running; pool_budgeted := l.pool_budgeted; candidates := l.candidates;
    pools := NULL; queued := l.queued;
    IF agent.pools IS NOT NULL AND jsonb_array_length(candidates) > 0 THEN
      drawn := drawn || ARRAY(SELECT jsonb_array_elements_text(agent.pools::jsonb));
    END IF;
    RETURN NEXT;
  END LOOP;
  IF cardinality(drawn) > 0 THEN
    agent := NULL; running := NULL; pool_budgeted := NULL; candidates := NULL; queued := NULL;
    SELECT jsonb_agg(to_jsonb(r) ORDER BY r.n) INTO pools
      FROM baton_lock_pools(ARRAY(SELECT DISTINCT d FROM unnest(drawn) AS d ORDER BY d))
        WITH ORDINALITY r(pool, max_parallel, throttle, throttle_tat, agent, since, seen_at, n);
    RETURN NEXT;
  END IF;
END
$$;
