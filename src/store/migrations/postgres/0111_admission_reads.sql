-- Reads of the admission transaction (src/engine/transitions/admit.ts) that must follow a lock,
-- each with its lock in one call: PL/pgSQL takes a new snapshot for each statement under READ
-- COMMITTED, so what is read after the lock sees every transaction that held it before, as the
-- engine's own statements after the lock would. They read only; the engine decides and writes.
-- Never edit a shipped migration: add a new numbered file.

-- The agent's row locked (as admission's locked read: FOR NO KEY UPDATE), with its running tasks
-- per concurrency key (as src/engine/flow-keys.ts runningPerKey: executions_key_running, at most
-- its running count; null where none runs) and its fact pool_budgeted (as
-- src/engine/fast-path-facts.ts poolBudgeted: a pool it draws from has a budget; kept under the
-- agent's lock by whatever sets a pool's budget) read after the lock (FastPaths.lockAgent). No
-- row: no such agent.
CREATE OR REPLACE FUNCTION baton_lock_agent(p_agent text)
RETURNS TABLE (agent agents, running jsonb, pool_budgeted boolean) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  SELECT a.* INTO agent FROM agents a WHERE a.name = p_agent FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  pool_budgeted := agent.pools IS NOT NULL AND EXISTS (
    SELECT 1 FROM agent_pools ap JOIN pools x ON x.name = ap.pool WHERE ap.agent = p_agent AND x.budget IS NOT NULL);
  running := NULL;
  IF agent.running_count > 0 THEN
    SELECT jsonb_object_agg(k.flow_key, k.n) INTO running FROM (
      SELECT e.flow_key, count(*) AS n FROM executions e
      WHERE e.agent = p_agent AND e.status = 'running' AND e.flow_key IS NOT NULL GROUP BY e.flow_key
    ) k;
  END IF;
  RETURN NEXT;
END
$$;

-- The pools one admission draws from, locked, with each seated pool's seats in use and its waits
-- for a turn, in one call (FastPaths.lockPools): the reads that src/engine/pools.ts flowGate makes
-- after the pools' lock, in one round trip, so the lock is held across one statement fewer. The
-- pools are locked in name order, as lockPools does (after the agent's row: nothing locks a pool
-- and then an agent). PL/pgSQL takes a new snapshot for each statement under READ COMMITTED, so
-- the seats and waits are read after the lock, seeing every admission into the pool that went
-- before. It reads only; the engine decides (src/domain/pool-turns.ts) and writes.
-- One row per pool (agent null: its seats in use as `since`, null without a seat limit), then one
-- row per wait of a seated pool.
CREATE OR REPLACE FUNCTION baton_lock_pools(p_names text[])
RETURNS TABLE (pool text, max_parallel integer, throttle text, throttle_tat bigint, agent text, since bigint, seen_at bigint)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  p record;
BEGIN
  FOR p IN SELECT x.name, x.max_parallel, x.throttle, x.throttle_tat FROM pools x
    WHERE x.name = ANY (p_names) ORDER BY x.name FOR NO KEY UPDATE LOOP
    pool := p.name; max_parallel := p.max_parallel; throttle := p.throttle; throttle_tat := p.throttle_tat;
    agent := NULL; since := NULL; seen_at := NULL;
    IF p.max_parallel IS NOT NULL THEN
      SELECT coalesce(sum(a.running_count), 0) INTO since
        FROM agent_pools ap JOIN agents a ON a.name = ap.agent WHERE ap.pool = p.name;
    END IF;
    RETURN NEXT;
  END LOOP;
  -- The waits after every pool's lock and seats (each statement a new snapshot, after the locks).
  RETURN QUERY SELECT w.pool, NULL::integer, NULL::text, NULL::bigint, w.agent, w.since, w.seen_at
    FROM pool_waits w JOIN pools x ON x.name = w.pool
    WHERE w.pool = ANY (p_names) AND x.max_parallel IS NOT NULL;
END
$$;
